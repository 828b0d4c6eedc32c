"""Governance's hooks: where governance, the cluster or the workloads need an answer only a
higher layer has (core/hooks.py says how a hook works). Each is filled in portal/wiring.py;
`manage.py check` fails while one is not."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from decimal import Decimal
from typing import TypedDict

from core.hooks import Hook
from tenants.models import Tenant

# Governance shows granted / in use / free, but only workloads know what pods hold, and only
# the inventory what of it runs ("in use" on a page is what runs: issue 49, 4).
workload_usage: Hook[
    [list[int]], tuple[Mapping[int, Mapping[str, int]], Mapping[int, Mapping[str, int]]]
] = Hook(
    "workload_usage",
    "(tenant id -> {resource class slug -> units its workloads hold}, "
    "tenant id -> {slug -> units of its pods running now})",
)

# What a workload cost is what its team is billed for it: metering prices what its pods held.
workload_costs: Hook[[list[int]], Mapping[int, Decimal]] = Hook(
    "workload_costs", "workload id -> what its pods held, priced as the team's statement prices it"
)

# The submit path refuses what a higher layer forbids (metering: a team over budget). Called
# under the tenant's row lock, inside the submit's transaction; raises a ServiceError to refuse.
workload_admission: Hook[[Tenant], None] = Hook(
    "workload_admission", "refuse a tenant's new workload (raise a ServiceError), or return"
)


# An ask's and a submit's preview show their cost beside the team's budget and what is left
# of it: budgets are metering's. None: no budget set.
class BudgetLeft(TypedDict):
    budget: Decimal
    spent: Decimal
    left: Decimal  # never below zero
    month: date


budget_left: Hook[[Tenant], BudgetLeft | None] = Hook(
    "budget_left", "a tenant's budget this month: {budget, spent, left}, or None"
)

# The reconciler holds the Kueue LocalQueue of these tenants, so kubectl submits wait too.
queue_holds: Hook[[list[int]], set[int]] = Hook(
    "queue_holds", "of these tenant ids, those whose new work must wait in the cluster"
)

# After commit, when what a tenant should have on the cluster may have changed (grants,
# memberships, status). The cluster layer queues the reconcile. (A pool's lending, which shapes
# every tenant's queues, is the catalog's: catalog/hooks.py.)
desired_state_changed: Hook[[int], None] = Hook(
    "desired_state_changed", "a tenant's cluster objects may have to change: reconcile it"
)

# After commit, when a department changed (quota, limits, teams, deleted): its cohort and its
# teams' queues follow. The cluster layer queues a full reconcile (departments change rarely).
departments_changed: Hook[[], None] = Hook(
    "departments_changed", "departments changed: reconcile the cohorts and the teams' queues"
)

# A grant's placement names a worker or a group of workers (tenants/placement.py): only the
# cluster layer knows which are registered. "" when it names one that is, else what to change.
placement_problem: Hook[[str], str] = Hook(
    "placement_problem", "what is wrong with a placement (a worker or group not registered), or ''"
)
