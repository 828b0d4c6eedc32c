"""Which hosts share the portal's cookies: pure functions over host names, no settings.

Workspaces are served from their own host under WORKSPACE_DOMAIN (`w<id>.<domain>`), so that a
script a team member plants in a workspace never runs in the portal's origin and the portal's
cookies never reach it. Without the Public Suffix List the "site" (the registrable domain a
cookie may be scoped to) is approximated conservatively: the last two labels, or three under a
second-level public suffix such as `co.uk`; an IP address is its own site."""

from __future__ import annotations

import ipaddress

# second-level labels that commonly sit under a country code as public suffixes (co.uk, com.au)
SECOND_LEVEL = frozenset({"ac", "co", "com", "edu", "gov", "net", "org", "ne", "or"})


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def site(host: str) -> str:
    """The registrable domain a cookie of `host` may be scoped to (approximate, see above)."""
    host = host.lower().rstrip(".")
    if _is_ip(host):
        return host
    labels = host.split(".")
    keep = 2
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in SECOND_LEVEL:
        keep = 3
    return ".".join(labels[-keep:])


def shares_cookies(portal_host: str, workspace_domain: str) -> str | None:
    """How a workspace host under `workspace_domain` could reach the portal's cookies, in words
    for a start-up error; None when it cannot (another site)."""
    portal, domain = portal_host.lower().rstrip("."), workspace_domain.lower().rstrip(".")
    if not domain:
        return "no workspace domain: workspaces would be served on the portal's own origin"
    if portal == domain or portal.endswith("." + domain) or domain.endswith("." + portal):
        return f"{domain} and the portal's host {portal} are the same host or nest in one another"
    if site(portal) == site(domain):
        return f"{domain} and the portal's host {portal} share the site {site(portal)}"
    return None


def workspace_host(workspace_id: int, domain: str) -> str:
    return f"w{workspace_id}.{domain.lower().rstrip('.')}"


def workspace_id_of(host: str, domain: str) -> int | None:
    """The workspace a request's Host names (`w<id>.<domain>`, any port), else None."""
    name = host.lower().rsplit(":", 1)[0] if not host.startswith("[") else host
    suffix = "." + domain.lower().rstrip(".")
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    if len(label) < 2 or label[0] != "w" or not label[1:].isdigit() or label[1] == "0":
        return None
    return int(label[1:])
