"""Checks that other apps add to the admission of a workload, without the workloads layer
importing them: metering registers its budget check here at start-up (its AppConfig.ready).
A check raises a `ServiceError` (e.g. 409 over budget) to refuse; it runs under the tenant's
row lock, inside the submit's transaction."""

from __future__ import annotations

from collections.abc import Callable

from tenants.models import Tenant

AdmissionCheck = Callable[[Tenant], None]
_checks: dict[str, AdmissionCheck] = {}


def register(name: str, check: AdmissionCheck) -> None:
    """Add (or replace, by name: registering twice is harmless) a check."""
    _checks[name] = check


def run_checks(tenant: Tenant) -> None:
    for check in _checks.values():
        check(tenant)
