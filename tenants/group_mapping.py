"""From the identity provider's groups to tenant roles and platform admin: pure functions, no
database. `portal.oidc` applies the result at every sign-in (`services.apply_provider_groups`).

Two ways to say which group means what, usable together:
- a map, group -> "tenant:role" (or a list of them), e.g. {"vision-leads": "team-vision:owner"};
- a pattern with the named groups `tenant` and `role`, e.g.
  `^gpu-(?P<tenant>[a-z0-9-]+)-(?P<role>owner|member|viewer)$`, so that each new team needs no
  new setting.
Groups named in the platform-admin list make the person a platform admin."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ROLES = ("owner", "member", "viewer")  # strongest first: a person in two groups gets the stronger
_STRENGTH = {role: len(ROLES) - i for i, role in enumerate(ROLES)}


class MappingError(ValueError):
    """The mapping in settings is malformed (a configuration error, reported at sign-in)."""


@dataclass(frozen=True)
class GroupMapping:
    by_group: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    pattern: re.Pattern[str] | None = None
    admin_groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Desired:
    roles: dict[str, str]  # tenant slug -> role
    platform_admin: bool
    unmatched: tuple[str, ...] = ()  # groups that mean nothing here (shown in the audit)


def _pair(value: str, group: str) -> tuple[str, str]:
    tenant, sep, role = str(value).partition(":")
    if not sep or not tenant or role not in ROLES:
        raise MappingError(
            f"group {group!r} maps to {value!r}; write 'tenant-slug:role' with a role of "
            f"{', '.join(ROLES)}"
        )
    return tenant, role


def parse_mapping(
    group_map: Mapping[str, object] | None,
    pattern: str = "",
    admin_groups: Iterable[str] = (),
) -> GroupMapping:
    """The settings' mapping, checked: a bad entry is an error with what to write instead."""
    if group_map is not None and not isinstance(group_map, Mapping):
        raise MappingError(
            f"the group map must be a JSON object, not {type(group_map).__name__}: write "
            '{"group": "tenant-slug:role"}'
        )
    if isinstance(admin_groups, str):
        admin_groups = [admin_groups]
    by_group: dict[str, tuple[tuple[str, str], ...]] = {}
    for group, target in (group_map or {}).items():
        targets = target if isinstance(target, list | tuple) else [target]
        by_group[str(group)] = tuple(_pair(str(t), str(group)) for t in targets)
    compiled = None
    if pattern:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise MappingError(f"the group pattern {pattern!r} is not a regex: {exc}") from None
        if not {"tenant", "role"} <= set(compiled.groupindex):
            raise MappingError(
                "the group pattern needs the named groups (?P<tenant>…) and (?P<role>…)"
            )
    return GroupMapping(by_group, compiled, frozenset(admin_groups))


def desired_from_groups(groups: object, mapping: GroupMapping) -> Desired:
    """What the provider's `groups` claim asserts: each tenant's strongest role, and whether the
    person is a platform admin. A claim that is not a list of strings asserts nothing."""
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list | tuple):
        groups = []
    roles: dict[str, str] = {}
    admin = False
    unmatched = []
    for group in groups:
        if not isinstance(group, str):
            continue
        pairs = list(mapping.by_group.get(group, ()))
        if mapping.pattern is not None:
            found = mapping.pattern.fullmatch(group)
            if found and found.group("role") in ROLES:
                pairs.append((found.group("tenant"), found.group("role")))
        if group in mapping.admin_groups:
            admin = True
        elif not pairs:
            unmatched.append(group)
        for tenant, role in pairs:
            if _STRENGTH[role] > _STRENGTH.get(roles.get(tenant, ""), 0):
                roles[tenant] = role
    return Desired(roles, admin, tuple(sorted(unmatched)))


@dataclass(frozen=True)
class Change:
    tenant: str
    action: str  # "add", "change", "remove"
    role: str | None
    before: str | None = None


def membership_changes(
    desired: Mapping[str, str],
    provider_held: Mapping[str, str],
    locally_held: Iterable[str],
) -> list[Change]:
    """How the memberships the provider gave must change to match what it asserts now.
    Local memberships (given in the portal) are never touched, nor replaced."""
    local = set(locally_held)
    changes = []
    for tenant, role in sorted(desired.items()):
        if tenant in local:
            continue
        held = provider_held.get(tenant)
        if held is None:
            changes.append(Change(tenant, "add", role))
        elif held != role:
            changes.append(Change(tenant, "change", role, before=held))
    for tenant, held in sorted(provider_held.items()):
        if tenant not in desired:
            changes.append(Change(tenant, "remove", None, before=held))
    return changes


def mapping_from_settings() -> GroupMapping:
    """The mapping the settings say (OIDC_GROUP_MAP, OIDC_GROUP_TENANT_PATTERN,
    OIDC_PLATFORM_ADMIN_GROUPS); MappingError when they are malformed."""
    from django.conf import settings  # the functions above stay usable without Django

    return parse_mapping(
        settings.OIDC_GROUP_MAP,
        settings.OIDC_GROUP_TENANT_PATTERN,
        settings.OIDC_PLATFORM_ADMIN_GROUPS,
    )


def mapping_in_force() -> GroupMapping | None:
    """The mapping sign-in applies: None while group mapping is off (no OIDC_GROUPS_CLAIM) or
    its settings are malformed (sign-in then changes nothing)."""
    from django.conf import settings

    if not settings.OIDC_GROUPS_CLAIM:
        return None
    try:
        return mapping_from_settings()
    except MappingError:
        return None
