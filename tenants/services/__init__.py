"""Every write of the governance core: one function per use case, each under one transaction
that checks permission, locks rows in a fixed order (pools, then tenant, then request, then
grants: see `tenants.services.locks`), changes state, writes exactly one audit event per state
change and queues follow-up work on commit.

The modules, by concept: `tenants` (tenants and members), `requests` (the life of a capacity
request: preview, submit, reject, cancel, provisioned), `capacity` (the capacity check: valid
items and dates, free units, the tenant's ceiling), `approvals` (approving a request, by a
person or the policy), `asks` (the tail of every ask, new or a renewal: the request written,
then auto-approved or put before the approvers), `renewals` (extending a grant), `grants`
(quota grants and their expiry), `channels` (notification channels), `provider_groups`
(memberships from single sign-on's groups), `pools` (pools and policy), `tokens` (API tokens),
`locks` (the one lock helper), `audit_fields` (what the audit events snapshot) and `follow_up`
(the reconcile hint on commit, links in mails).

This package re-exports nothing: callers import the module of the concept,
`from tenants.services import approvals as approval_services` or
`from tenants.services.requests import submit_capacity_request`."""
