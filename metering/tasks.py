"""Thin metering tasks: each calls one function and is safe to run twice or concurrently."""

from __future__ import annotations

from core.tasks import portal_task
from metering import department_budgets, fleet_ingest, idle_runs, rollups, services
from scheduler.cluster import kube


@portal_task(name="metering.tasks.ingest_allocations", soft_time_limit=50, time_limit=58)
def ingest_allocations() -> dict:
    # the portal's own cluster, then a fleet's workers (none: a single cluster, as ever)
    results = fleet_ingest.ingest_fleet(kube.gateway())
    result = results[0]
    return {
        "clusters": len(results),
        "at": result.at.isoformat(),
        "pods": result.pods,
        "opened": result.opened,
        "closed": result.closed,
        "samples": result.samples,
        "utilisation": result.utilisation,
        "utilisation_error": result.utilisation_error,
    }


@portal_task(name="metering.tasks.roll_up")
def roll_up() -> dict:
    hours = rollups.roll_up_hours()
    days = rollups.roll_up_days()
    purged = rollups.purge_samples()
    return {"hours": hours, "days": days, "purged": purged}


@portal_task(name="metering.tasks.warn_budgets")
def warn_budgets() -> int:
    """The teams' budget warnings due, then the departments'."""
    return len(services.warn_budgets()) + len(department_budgets.warn_department_budgets())


@portal_task(name="metering.tasks.give_back_idle_gpus", soft_time_limit=50, time_limit=58)
def give_back_idle_gpus() -> dict:
    result = idle_runs.give_back_idle_gpus(kube.gateway())
    return {
        "looked": result.looked,
        "warned": result.warned,
        "suspended": result.suspended,
        "skipped": result.skipped,
    }
