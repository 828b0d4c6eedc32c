"""Memberships and platform admin from the identity provider's groups, applied at every single
sign-on: what the provider gave follows what it asserts now (added, changed, removed); what was
given in the portal (local memberships) stays as it is. Every change is audited."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction

from core import audit
from core.permissions import is_platform_admin
from tenants.group_mapping import (
    Desired,
    MappingError,
    desired_from_groups,
    mapping_from_settings,
    membership_changes,
)
from tenants.models import Membership, Tenant
from tenants.notifications import notify
from tenants.services.follow_up import notify_desired_state_changed
from tenants.services.tokens import revoke_robot_tokens_made_by

log = logging.getLogger(__name__)
Source = Membership.Source


def apply_provider_groups(*, user, claims: dict) -> list[str]:
    """Make `user`'s provider memberships and platform-admin standing match the groups claim
    (setting OIDC_GROUPS_CLAIM; empty: off). A missing claim means no groups: providers leave
    an empty one out (Dex does), so it removes all the provider gave, as an empty list does.
    Returns what changed, in words, for the sign-in message."""
    claim = settings.OIDC_GROUPS_CLAIM
    if not claim:
        return []
    try:
        mapping = mapping_from_settings()
    except MappingError as exc:
        log.error("single sign-on group mapping is misconfigured: %s", exc)
        audit.record(
            actor=None,
            verb="sso.groups_mapping_error",
            obj=user,
            tenant=None,
            object_type="auth.User",
            after={"error": str(exc)},
        )
        return []
    desired = desired_from_groups(claims.get(claim, []), mapping)
    with transaction.atomic():
        # The person's row first: two first sign-ins of one person (no membership to lock yet)
        # wait for each other instead of both adding the same membership.
        type(user).objects.select_for_update().filter(pk=user.pk).first()
        said = _apply_memberships(user, desired)
        said += _apply_platform_admin(user, desired, bool(mapping.admin_groups))
    return said


def _record(verb: str, membership: Membership, before: dict | None, after: dict | None) -> None:
    audit.record(
        actor=None,
        verb=verb,
        obj=membership,
        tenant=membership.tenant,
        before=before,
        after=after,
    )
    notify_desired_state_changed(membership.tenant)


def _apply_memberships(user, desired: Desired) -> list[str]:
    held = list(
        Membership.objects.select_for_update(of=("self",))  # not the tenants: they come first
        .filter(user=user)
        .select_related("tenant")
    )
    by_slug = {m.tenant.slug: m for m in held}
    tenants = {
        t.slug: t
        for t in Tenant.objects.filter(slug__in=desired.roles).exclude(
            status=Tenant.Status.ARCHIVED
        )
    }
    wanted = {slug: role for slug, role in desired.roles.items() if slug in tenants}
    unknown = sorted(set(desired.roles) - set(tenants))
    changes = membership_changes(
        wanted,
        {m.tenant.slug: m.role for m in held if m.source == Source.PROVIDER},
        [m.tenant.slug for m in held if m.source == Source.LOCAL],
    )
    name = user.get_username()
    said = []
    for change in changes:
        role = change.role or ""
        if change.action == "add":
            membership = Membership.objects.create(
                tenant=tenants[change.tenant], user=user, role=role, source=Source.PROVIDER
            )
            after = {"user": name, "role": change.role, "source": Source.PROVIDER}
            _record("membership.added", membership, None, after)
            said.append(f"added to {change.tenant} as {change.role}")
        elif change.action == "change":
            membership = by_slug[change.tenant]
            membership.role = role
            membership.save(update_fields=["role"])
            after = {"role": change.role, "source": Source.PROVIDER}
            _record("membership.changed", membership, {"role": change.before}, after)
            said.append(f"now {change.role} in {change.tenant}")
        else:
            membership = by_slug[change.tenant]
            before = {"user": name, "role": change.before, "source": Source.PROVIDER}
            _record("membership.removed", membership, before, None)
            membership.delete()
            revoke_robot_tokens_made_by(
                user=user, tenant=membership.tenant, why="left the team (their provider's groups)"
            )
            said.append(f"no longer in {change.tenant}")
        if change.before == Membership.Role.OWNER and change.role != Membership.Role.OWNER:
            _tell_if_no_owner_left(by_slug[change.tenant].tenant, name)
    if said or unknown:
        audit.record(
            actor=None,
            verb="sso.groups_applied",
            obj=user,
            tenant=None,
            object_type="auth.User",
            after={
                "changes": said,
                "unknown_tenants": unknown,
                "unmatched_groups": list(desired.unmatched),
            },
        )
    return said


def _tell_if_no_owner_left(tenant: Tenant, last: str) -> None:
    """The provider may take a team's last owner away (the portal's own services refuse to):
    the team then has no one to manage it, and the platform team is told, with the audit."""
    if Membership.objects.filter(tenant=tenant, role=Membership.Role.OWNER).exists():
        return
    audit.record(
        actor=None,
        verb="tenant.owner_lost",
        obj=tenant,
        tenant=tenant,
        after={"last_owner": last, "by": "the identity provider's groups"},
    )
    notify(
        "tenant.no_owner",
        tenant,
        subject=f"[GPU Portal] {tenant.slug} has no owner left",
        text=(
            f"Single sign-on took {last}'s owner role in {tenant.slug} (their groups at the "
            "identity provider changed), and no one else owns it. Make someone its owner: on "
            "the team's page, through the API, or in the provider's groups."
        ),
        data={"tenant": tenant.slug, "last_owner": last},
    )


def _apply_platform_admin(user, desired: Desired, mapped: bool) -> list[str]:
    """Platform admin from the provider: staff in PLATFORM_ADMIN_GROUP, plus a marker group
    (OIDC_PLATFORM_ADMIN_MARKER_GROUP) that says the provider gave it, so that only what the
    provider gave is taken back. Admins made in the portal are left alone."""
    marker = Group.objects.filter(name=settings.OIDC_PLATFORM_ADMIN_MARKER_GROUP).first()
    from_provider = marker is not None and user.groups.filter(pk=marker.pk).exists()
    # An admin the portal made stays its own: no marker, so the provider never takes it back.
    if desired.platform_admin and mapped and not from_provider and not is_platform_admin(user):
        admins, _ = Group.objects.get_or_create(name=settings.PLATFORM_ADMIN_GROUP)
        if marker is None:  # two first grants at once: one creates it, the other finds it
            marker, _ = Group.objects.get_or_create(name=settings.OIDC_PLATFORM_ADMIN_MARKER_GROUP)
        was_staff = user.is_staff
        user.is_staff = True
        user.save(update_fields=["is_staff"])
        user.groups.add(admins, marker)
        audit.record(
            actor=None,
            verb="sso.platform_admin_granted",
            obj=user,
            tenant=None,
            object_type="auth.User",
            before={"is_staff": was_staff},
            after={"is_staff": True, "group": settings.PLATFORM_ADMIN_GROUP},
        )
        return ["made a platform admin"]
    if not desired.platform_admin and from_provider:
        admin_group = Group.objects.filter(name=settings.PLATFORM_ADMIN_GROUP).first()
        user.groups.remove(*[g for g in (admin_group, marker) if g is not None])
        user.is_staff = False
        user.save(update_fields=["is_staff"])
        audit.record(
            actor=None,
            verb="sso.platform_admin_revoked",
            obj=user,
            tenant=None,
            object_type="auth.User",
            before={"is_staff": True, "group": settings.PLATFORM_ADMIN_GROUP},
            after={"is_staff": False},
        )
        return ["no longer a platform admin"]
    return []
