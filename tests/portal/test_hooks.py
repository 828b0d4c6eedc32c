"""Hooks (core/hooks.py): every hook the portal declares is filled at start-up by
portal/wiring.py, `manage.py check` fails while one is not, and an unfilled hook refuses to be
called rather than answering nothing."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from catalog import hooks as catalog_hooks
from core import hooks as core_hooks
from metering.selectors import budget_left, workload_costs
from metering.services import check_budget, over_budget_tenants
from scheduler.cluster.dispatch import placement_problem
from scheduler.cluster.reconcile_hints import enqueue_reconcile, enqueue_reconcile_all
from scheduler.workloads.selectors import usage_by_tenant
from tenants import hooks


def test_every_declared_hook_is_filled_by_the_wiring():
    filled = {hook.name: hook.filled_by for hook in core_hooks.declared_hooks()}
    assert filled == {
        "workload_usage": f"{usage_by_tenant.__module__}.usage_by_tenant",
        "workload_admission": f"{check_budget.__module__}.check_budget",
        "budget_left": f"{budget_left.__module__}.budget_left",
        "workload_costs": f"{workload_costs.__module__}.workload_costs",
        "queue_holds": f"{over_budget_tenants.__module__}.over_budget_tenants",
        "desired_state_changed": f"{enqueue_reconcile.__module__}.enqueue_reconcile",
        "fleet_policy_changed": f"{enqueue_reconcile_all.__module__}.enqueue_reconcile_all",
        "departments_changed": f"{enqueue_reconcile_all.__module__}.enqueue_reconcile_all",
        "placement_problem": f"{placement_problem.__module__}.placement_problem",
    }
    assert core_hooks.check_hooks_filled() == []


def test_each_room_declares_its_own_hooks():
    """The catalog sits below governance: its question is its own, not governance's."""
    assert {h.name for h in core_hooks.declared_hooks()} >= {"fleet_policy_changed"}
    assert catalog_hooks.fleet_policy_changed in core_hooks.declared_hooks()
    assert not hasattr(hooks, "fleet_policy_changed")


def test_a_hook_left_unfilled_fails_manage_py_check(monkeypatch):
    monkeypatch.setattr(hooks.queue_holds, "_impl", None)  # undone after the test
    with pytest.raises(SystemCheckError) as refused:
        call_command("check")
    assert "core.E001" in str(refused.value)
    assert "hook queue_holds is not filled" in str(refused.value)
    assert "portal/wiring.py" in str(refused.value)


def test_an_unfilled_hook_refuses_to_be_called_and_a_filled_one_answers():
    hook: core_hooks.Hook[[int], int] = core_hooks.Hook("double", "twice n", declare=False)
    with pytest.raises(ImproperlyConfigured, match="hook double is not filled .*portal/wiring"):
        hook(2)
    assert [e.id for e in core_hooks.unfilled_errors([hook])] == ["core.E001"]

    def twice(n: int) -> int:
        return 2 * n

    hook.fill(twice)
    assert hook(21) == 42
    assert core_hooks.unfilled_errors([hook]) == []
    assert hook not in core_hooks.declared_hooks()  # a test's hook stays out of the check
