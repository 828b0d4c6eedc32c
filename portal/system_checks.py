"""Django system checks of the portal's own settings, run by `manage.py check --deploy`."""

import re

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from portal.retention import retention_days

BILLING_MODES = ("chargeback", "showback")
BILLING_BASES = ("allocation", "quota", "max")  # metering/pricing.BASES


@register()
def billing(app_configs, **kwargs) -> list[Error]:
    """Bad billing settings stop the portal at start, not at the first statement."""
    errors = []
    if not re.fullmatch(r"[A-Z]{3}", settings.BILLING_CURRENCY):
        errors.append(
            Error(
                f"BILLING_CURRENCY={settings.BILLING_CURRENCY!r} is not an ISO 4217 code.",
                hint="Three capital letters, e.g. USD, EUR or GBP.",
                id="portal.E010",
            )
        )
    if settings.BILLING_MODE not in BILLING_MODES:
        errors.append(
            Error(
                f"BILLING_MODE={settings.BILLING_MODE!r} is not one of {', '.join(BILLING_MODES)}.",
                hint="chargeback bills the teams; showback reports the same figures to them.",
                id="portal.E011",
            )
        )
    if settings.BILLING_BASIS not in BILLING_BASES:
        errors.append(
            Error(
                f"BILLING_BASIS={settings.BILLING_BASIS!r} is not one of "
                f"{', '.join(BILLING_BASES)}.",
                id="portal.E012",
            )
        )
    return errors


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
