"""Settings the reconciler renders into every namespace, checked when the portal starts: a typo
in a CIDR would otherwise fail every tenant's reconcile later."""

import ipaddress

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility)
def check_egress_cidrs(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for name in ("TENANT_EGRESS_ALLOWED_CIDRS", "TENANT_EGRESS_DENIED_CIDRS"):
        for value in getattr(settings, name, ()):
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                errors.append(
                    checks.Error(
                        f"{name} has {value!r}, which is not a CIDR",
                        hint="write addresses as CIDRs, e.g. 10.0.0.0/8 or 169.254.169.254/32",
                        id="scheduler.E001",
                    )
                )
    return errors
