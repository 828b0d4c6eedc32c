"""Fills every hook (tenants/hooks.py, catalog/hooks.py), once, at start-up
(PortalConfig.ready): the one place a reader finds which higher layer answers which lower
layer's question."""

from __future__ import annotations

from catalog import hooks as catalog_hooks
from metering.selectors import budget_left, workload_costs
from metering.services import check_budget, over_budget_tenants
from scheduler.cluster.dispatch import placement_problem
from scheduler.cluster.reconcile_hints import enqueue_reconcile, enqueue_reconcile_all
from scheduler.workloads.selectors import usage_by_tenant
from tenants import hooks


def fill_hooks() -> None:
    hooks.workload_usage.fill(usage_by_tenant)
    hooks.workload_costs.fill(workload_costs)  # what the statement bills, per workload
    hooks.workload_admission.fill(check_budget)  # budgets are metering's
    hooks.budget_left.fill(budget_left)  # an ask's cost against the budget
    hooks.queue_holds.fill(over_budget_tenants)  # an over-budget team's queue is held
    hooks.desired_state_changed.fill(enqueue_reconcile)
    catalog_hooks.fleet_policy_changed.fill(enqueue_reconcile_all)
    hooks.departments_changed.fill(enqueue_reconcile_all)  # cohorts and every queue
    hooks.placement_problem.fill(placement_problem)  # the fleet knows its workers and groups
