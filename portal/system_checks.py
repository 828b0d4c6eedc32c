"""Django system checks of the portal's own settings, run by `manage.py check --deploy`."""

import re
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from portal.retention import retention_days
from workspaces.sites import shares_cookies

BILLING_MODES = ("chargeback", "showback")
BILLING_BASES = ("allocation", "quota", "max")  # metering/pricing.BASES


@register()
def billing(app_configs, **kwargs) -> list[Error]:
    """Bad billing settings stop the portal at start, not at the first statement."""
    checks = (
        (
            "BILLING_CURRENCY",
            re.fullmatch(r"[A-Z]{3}", settings.BILLING_CURRENCY),
            "is not an ISO 4217 code: three capital letters, e.g. USD, EUR or GBP",
            "portal.E010",
        ),
        (
            "BILLING_MODE",
            settings.BILLING_MODE in BILLING_MODES,
            f"is not one of {', '.join(BILLING_MODES)} (chargeback bills the teams; showback "
            "reports the same figures to them)",
            "portal.E011",
        ),
        (
            "BILLING_BASIS",
            settings.BILLING_BASIS in BILLING_BASES,
            f"is not one of {', '.join(BILLING_BASES)}",
            "portal.E012",
        ),
    )
    return [
        Error(f"{name}={getattr(settings, name)!r} {why}.", id=code)
        for name, ok, why, code in checks
        if not ok
    ]


@register(Tags.security, deploy=True)
def image_allowlist(app_configs, **kwargs) -> list[Warning]:
    if any(entry.strip() for entry in settings.WORKLOAD_IMAGE_ALLOWLIST):
        return []
    return [
        Warning(
            "WORKLOAD_IMAGE_ALLOWLIST is empty: every workload image is refused.",
            hint="List the registries or repositories teams may pull from, e.g. "
            "WORKLOAD_IMAGE_ALLOWLIST=registry.example.com,nvcr.io/nvidia",
            id="portal.W001",
        )
    ]


@register()
def retention_periods(app_configs, **kwargs) -> list[Error]:
    try:
        retention_days()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="portal.E001")]
    return []


@register(Tags.security)
def workspace_origin(app_configs, **kwargs) -> list[Error]:
    """Workspaces run code a team member wrote: never on the portal's origin, and never where
    the portal's cookies reach them (docs/workspaces.md, "Their own origin")."""
    portal_host = urlsplit(settings.PORTAL_BASE_URL).hostname or ""
    shared = shares_cookies(portal_host, settings.WORKSPACE_DOMAIN)
    if shared is None or settings.WORKSPACE_ALLOW_SAME_SITE:
        return []
    if settings.PORTAL_HOST_COOKIES and settings.WORKSPACE_DOMAIN:
        if settings.SESSION_COOKIE_SECURE and settings.CSRF_COOKIE_SECURE:
            return []  # __Host- cookies: no other host sets or reads them
        return [
            Error(
                "PORTAL_HOST_COOKIES needs secure cookies (__Host- cookies are Secure only).",
                hint="Serve the portal over HTTPS with SECURE_COOKIES=true.",
                id="portal.E021",
            )
        ]
    return [
        Error(
            f"WORKSPACE_DOMAIN={settings.WORKSPACE_DOMAIN!r} would let workspaces reach the "
            f"portal's cookies: {shared}.",
            hint="Serve workspaces from a registrable domain of their own (e.g. "
            "WORKSPACE_DOMAIN=ws.example-workspaces.net with a wildcard DNS record and "
            "certificate), or set PORTAL_HOST_COOKIES=true where the platform cannot; "
            "WORKSPACE_ALLOW_SAME_SITE=true is for a developer's machine only.",
            id="portal.E020",
        )
    ]
