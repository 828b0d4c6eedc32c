"""Every write of the governance core: one function per use case, each under one transaction
that checks permission, locks rows in a fixed order (pools, then tenant, then request, then
grants: see `tenants.services.locks`), changes state, writes exactly one audit event per state
change and queues follow-up work on commit.

The modules, by concept: `tenants` (tenants and members), `requests` (capacity requests and
the capacity check), `grants` (quota grants and their expiry), `renewals` (extending a grant),
`channels` (notification channels), `provider_groups` (memberships from single sign-on's
groups), `pools` (pools and policy), `tokens` (API tokens), `locks`
(the one lock helper). Callers use this package:
`from tenants import services; services.approve_capacity_request(...)`."""

from tenants.services.approvals import approve_capacity_request
from tenants.services.capacity import free_capacity
from tenants.services.channels import (
    change_channel,
    create_channel,
    remove_channel,
    send_test_message,
)
from tenants.services.grants import (
    expire_grants,
    grant_quota,
    revoke_grant,
    warn_expiring_grants,
)
from tenants.services.locks import (
    LOCK_ORDER,
    LockedRows,
    lock_rows,
)
from tenants.services.pools import (
    set_auto_approval_rule,
    set_pool,
)
from tenants.services.provider_groups import apply_provider_groups
from tenants.services.renewals import (
    renewal_decision,
    submit_grant_renewal,
)
from tenants.services.requests import (
    cancel_capacity_request,
    mark_request_provisioned,
    preview_capacity_request,
    reject_capacity_request,
    submit_capacity_request,
)
from tenants.services.tenants import (
    EDITABLE_TENANT_FIELDS,
    add_member,
    change_member_role,
    change_tenant_status,
    create_tenant,
    refuse_provider_managed,
    remove_member,
    update_tenant,
)
from tenants.services.tokens import (
    TOKEN_PREFIX,
    authenticate_token,
    hash_token,
    issue_token,
    revoke_token,
    token_holder,
    void_admin_tokens_of_former_admin,
)

__all__ = [
    "EDITABLE_TENANT_FIELDS",
    "LOCK_ORDER",
    "TOKEN_PREFIX",
    "LockedRows",
    "add_member",
    "apply_provider_groups",
    "approve_capacity_request",
    "authenticate_token",
    "cancel_capacity_request",
    "change_member_role",
    "change_tenant_status",
    "change_channel",
    "create_channel",
    "create_tenant",
    "expire_grants",
    "free_capacity",
    "grant_quota",
    "hash_token",
    "issue_token",
    "lock_rows",
    "mark_request_provisioned",
    "preview_capacity_request",
    "reject_capacity_request",
    "remove_channel",
    "refuse_provider_managed",
    "remove_member",
    "renewal_decision",
    "revoke_grant",
    "revoke_token",
    "send_test_message",
    "set_auto_approval_rule",
    "set_pool",
    "submit_capacity_request",
    "submit_grant_renewal",
    "token_holder",
    "void_admin_tokens_of_former_admin",
    "update_tenant",
    "warn_expiring_grants",
]
