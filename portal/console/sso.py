"""The console's single sign-on page: the group mapping in force (from settings), what each
entry names, and a dry run: the teams, roles and platform-admin standing a list of groups would
give. Read-only: the mapping is configuration (docs/configuration.md), applied at sign-in."""

from __future__ import annotations

import re

from django.conf import settings
from django.shortcuts import render

from core.permissions import platform_admin_required
from tenants.group_mapping import MappingError, desired_from_groups, mapping_from_settings
from tenants.models import AuditEvent, Membership, Tenant

_SEPARATORS = re.compile(r"[\s,]+")
MAX_TRIED_GROUPS = 200  # a dry run reads at most this many groups (a pasted claim, not a dump)


@platform_admin_required
def sso(request):
    error, mapping = "", None
    try:
        mapping = mapping_from_settings()
    except MappingError as exc:
        error = str(exc)
    # as sign-in counts them: an archived team takes no one
    known = set(
        Tenant.objects.exclude(status=Tenant.Status.ARCHIVED).values_list("slug", flat=True)
    )
    entries = [
        (group, [(tenant, role, tenant in known) for tenant, role in targets])
        for group, targets in sorted((mapping.by_group if mapping else {}).items())
    ]
    typed = request.GET.get("groups", "")[:10_000]
    tried = [g for g in _SEPARATORS.split(typed) if g][:MAX_TRIED_GROUPS]
    outcome = None
    if typed and mapping is not None:
        desired = desired_from_groups(tried, mapping)
        outcome = {
            "roles": [(slug, role, slug in known) for slug, role in sorted(desired.roles.items())],
            "platform_admin": desired.platform_admin and bool(mapping.admin_groups),
            "unmatched": desired.unmatched,
        }
    recent = list(AuditEvent.objects.filter(verb__startswith="sso.").order_by("-created_at")[:20])
    for event in recent:  # a refused sign-in has no account: the name it came with
        after = event.after if isinstance(event.after, dict) else {}
        event.who = event.object_repr or str(after.get("username", ""))
    context = {
        "on": bool(settings.OIDC_GROUPS_CLAIM),
        "claim": settings.OIDC_GROUPS_CLAIM,
        "error": error,
        "entries": entries,
        "pattern": mapping.pattern.pattern if mapping and mapping.pattern else "",
        "admin_groups": sorted(mapping.admin_groups) if mapping else [],
        "user_prefix": settings.KUBE_USER_PREFIX,
        "group_prefix": settings.KUBE_GROUP_PREFIX,
        "from_provider": Membership.objects.filter(source=Membership.Source.PROVIDER).count(),
        "typed": typed,
        "outcome": outcome,
        "recent": recent,
    }
    return render(request, "console/sso.html", context)
