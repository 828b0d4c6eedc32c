"""Django system checks of the portal's own settings, run by `manage.py check --deploy`."""

from django.conf import settings
from django.core.checks import Tags, Warning, register


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
