"""Django system checks of the portal's own settings, run by `manage.py check --deploy`."""

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from portal.retention import retention_days


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
