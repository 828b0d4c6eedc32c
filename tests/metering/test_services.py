"""Statements from stored intervals and grants, prices with effective dates, budgets, warnings
and the admission check."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from core.errors import Forbidden, InvalidInput, InvalidTransition
from metering import selectors, services
from metering.models import AllocationInterval, BudgetAlert
from scheduler.cluster.models import Cluster
from scheduler.workloads import services as workloads
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import AuditEvent, QuotaGrant
from tenants.notifications import deliver_due

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)


def interval(world, start, end, units=1, uid="u"):
    cluster, _ = Cluster.objects.get_or_create(name="local")
    return AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid=uid,
        namespace="ns",
        pod_name=uid,
        node_name="n",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        units=units,
        started_at=start,
        last_seen_at=end or start,
        ended_at=end,
    )


def t(*args):
    return datetime(*args, tzinfo=UTC)


def test_statement_prices_stored_intervals_with_a_mid_month_price_change(world):
    # 1.5 $/h until the 15th noon, 3.0 $/h after; a pod of 2 units straddles the change.
    services.set_price(
        actor=world.admin,
        resource_class=world.rc,
        price_per_hour="3.0",
        effective_from=t(2026, 11, 15, 12),
    )
    interval(world, t(2026, 11, 15, 11), t(2026, 11, 15, 13), units=2)
    # straddles the month end: only November's part counts
    interval(world, t(2026, 11, 30, 23), t(2026, 12, 1, 1), units=1, uid="late")
    statement = selectors.tenant_statement(
        world.tenant, NOV, basis="allocation", now=t(2026, 12, 5)
    )
    (line,) = statement.lines
    assert line.allocated_hours == Decimal("5.0000")  # 2 × 2 h + 1 h
    assert line.allocated_cost == Decimal("3.00") + Decimal("6.00") + Decimal("3.00")
    assert line.allocated_gpu_hours == Decimal("2.1430")  # 5 × 0.4286
    dec = selectors.tenant_statement(
        world.tenant, date(2026, 12, 1), basis="allocation", now=t(2026, 12, 5)
    )
    assert dec.lines[0].allocated_hours == Decimal("1.0000") and dec.total == Decimal("3.00")
    audit = AuditEvent.objects.get(verb="price.set")
    assert audit.after["price_per_hour"] == "3.0000"  # as stored: the column's 4 places


def test_quota_and_max_bases_use_the_grants_held(world):
    QuotaGrant.objects.create(
        tenant=world.tenant,
        resource_class=world.rc,
        amount=2,
        starts_at=t(2026, 11, 10),
        ends_at=t(2026, 11, 11),
        state=QuotaGrant.State.EXPIRED,
        ended_at=t(2026, 11, 11),
    )
    interval(world, t(2026, 11, 10), t(2026, 11, 10, 6), units=1)
    now = t(2026, 11, 20)
    by = {
        b: selectors.tenant_statement(world.tenant, NOV, basis=b, now=now)
        for b in ("allocation", "quota", "max")
    }
    assert by["allocation"].total == Decimal("9.00")  # 6 h × 1.5
    assert by["quota"].total == Decimal("72.00")  # 2 × 24 h × 1.5
    assert by["max"].total == Decimal("72.00")
    assert by["quota"].lines[0].quota_hours == Decimal("48.0000")


def test_open_intervals_count_to_the_last_minute_seen(world):
    iv = interval(world, t(2026, 11, 2), None)
    AllocationInterval.objects.filter(pk=iv.pk).update(last_seen_at=t(2026, 11, 2, 3))
    st = selectors.tenant_statement(world.tenant, NOV, basis="allocation", now=t(2026, 11, 3))
    assert st.lines[0].allocated_hours == Decimal("3.0000")


def test_prices_are_for_the_platform_team_and_budgets_not_for_members(world):
    with pytest.raises(Forbidden):
        services.set_price(
            actor=world.owner,
            resource_class=world.rc,
            price_per_hour=1,
            effective_from=t(2026, 11, 1),
        )
    with pytest.raises(InvalidInput):
        services.set_price(
            actor=world.admin,
            resource_class=world.rc,
            price_per_hour="-1",
            effective_from=t(2026, 11, 1),
        )
    with pytest.raises(Forbidden):  # owners set their own team's (test_budget_owners.py)
        services.set_budget(actor=world.member, tenant=world.tenant, month=NOV, amount=10)
    budget = services.set_budget(
        actor=world.admin, tenant=world.tenant, month=date(2026, 11, 17), amount="100"
    )
    assert budget.month == NOV and selectors.budget_for(world.tenant, NOV) == Decimal("100")
    services.set_budget(actor=world.admin, tenant=world.tenant, month=NOV, amount="120")
    assert AuditEvent.objects.filter(verb="budget.set").count() == 2
    assert AuditEvent.objects.filter(verb="budget.set").order_by("pk").last().before == {
        "amount": "100.00"
    }


def test_budget_warnings_at_80_and_100_percent_once_each(
    world, settings, django_capture_on_commit_callbacks
):
    world.owner.email = "owner@example.com"
    world.owner.save()
    services.set_budget(actor=world.admin, tenant=world.tenant, month=NOV, amount="10")
    now = t(2026, 11, 20)
    interval(world, t(2026, 11, 2), t(2026, 11, 2, 5), uid="a")  # 5 h × 1.5 = 7.50: 75 %
    assert services.warn_budget(world.tenant, now=now) is None
    interval(world, t(2026, 11, 3), t(2026, 11, 3, 1), uid="b")  # 9.00: 90 %
    with django_capture_on_commit_callbacks(execute=True):
        alert = services.warn_budget(world.tenant, now=now)
    deliver_due()  # what the worker does with the queued delivery (the notification layer)
    assert alert.threshold == 80 and len(mail.outbox) == 1
    assert "90 %" in mail.outbox[0].subject and mail.outbox[0].to == ["owner@example.com"]
    with django_capture_on_commit_callbacks(execute=True):
        assert services.warn_budget(world.tenant, now=now) is None  # once
    interval(world, t(2026, 11, 4), t(2026, 11, 4, 1), uid="c")  # 10.50: over
    with django_capture_on_commit_callbacks(execute=True):
        assert services.warn_budget(world.tenant, now=now).threshold == 100
    deliver_due()
    assert len(mail.outbox) == 2
    assert BudgetAlert.objects.filter(tenant=world.tenant).count() == 2
    assert AuditEvent.objects.filter(verb="budget.warned").count() == 2


def test_over_budget_tenants_are_refused_new_workloads_when_enforced(world, settings, time_machine):
    from django.utils import timezone

    # Mid-month, so the last two hours are in the month whose budget is checked.
    time_machine.move_to(t(2026, 11, 18, 12))
    now = timezone.now()
    services.set_budget(
        actor=world.admin, tenant=world.tenant, month=selectors.current_month(now), amount="1"
    )
    interval(world, now - timedelta(hours=2), now - timedelta(hours=1))  # 1.50 > 1.00
    settings.BUDGET_ENFORCE = False
    services.check_budget(world.tenant)  # off: fine
    settings.BUDGET_ENFORCE = True
    with pytest.raises(services.OverBudget) as exc:
        services.check_budget(world.tenant)
    assert exc.value.status == 409 and exc.value.code == "over_budget"
    from tenants.services import grants as grant_services

    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2
    )
    with pytest.raises(services.OverBudget):
        workloads.submit_workload(
            actor=world.member,
            tenant=world.tenant,
            spec=workload_spec(
                name="too-dear",
                kind="job",
                image="pytorch/pytorch:2.4-cuda12.4",
                resources={world.rc.slug: 1},
                priority="gpu-low",
            ),
        )
    services.check_budget(world.other_tenant)  # no budget: never refused


def test_an_over_budget_team_has_its_kueue_queue_held_when_enforced(world, settings, time_machine):
    """So that work submitted with kubectl waits too: the reconciler renders its LocalQueue with
    `stopPolicy: Hold` (running work goes on)."""
    from django.utils import timezone

    from scheduler.cluster.reconcile.specs import build_specs

    time_machine.move_to(t(2026, 11, 18, 12))
    now = timezone.now()
    services.set_budget(
        actor=world.admin, tenant=world.tenant, month=selectors.current_month(now), amount="1"
    )
    interval(world, now - timedelta(hours=2), now - timedelta(hours=1))  # 1.50 > 1.00
    tenants = [world.tenant, world.other_tenant]
    settings.BUDGET_ENFORCE = False
    assert services.over_budget_tenants([t.pk for t in tenants]) == set()
    settings.BUDGET_ENFORCE = True
    assert services.over_budget_tenants([t.pk for t in tenants]) == {world.tenant.pk}
    specs = build_specs(tenants)
    assert (specs[world.tenant.pk].queue_held, specs[world.other_tenant.pk].queue_held) == (
        True,
        False,
    )
    from scheduler.cluster.render.tenant import render_tenant

    held = [m for m in render_tenant(specs[world.tenant.pk]) if m["kind"] == "LocalQueue"]
    assert held[0]["spec"]["stopPolicy"] == "Hold"


def test_the_tasks_warn_in_one_batch_and_roll_up(
    world, django_capture_on_commit_callbacks, time_machine
):
    from django.utils import timezone

    from metering import tasks

    time_machine.move_to(t(2026, 11, 18, 12))  # mid-month: the spend is this month's
    now = timezone.now()
    world.owner.email = "owner@example.com"
    world.owner.save()
    world.other_tenant.monthly_budget = Decimal("1000")
    world.other_tenant.save()
    services.set_budget(
        actor=world.admin, tenant=world.tenant, month=selectors.current_month(now), amount="1"
    )
    interval(world, now - timedelta(hours=2), now - timedelta(hours=1))  # 1.50 of 1.00
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.warn_budgets() == 1
        assert tasks.warn_budgets() == 0  # safe to run twice
    deliver_due()
    assert BudgetAlert.objects.get().threshold == 100 and len(mail.outbox) == 1
    assert tasks.roll_up() == {"hours": 0, "days": 0, "purged": 0}


def test_billing_history_survives_a_cluster_row_deleted_or_archived(world):
    """Allocation intervals are what statements are made of: deleting the Cluster row they
    point at is refused; the platform team archives a cluster instead (audited)."""
    from django.db.models import ProtectedError

    from scheduler.cluster import inventory
    from scheduler.cluster.models import Cluster
    from tenants.models import AuditEvent

    kept = interval(world, t(2026, 11, 2, 10), t(2026, 11, 2, 12))
    cluster = Cluster.objects.get(name="local")
    with pytest.raises(ProtectedError):
        cluster.delete()
    archived = inventory.archive_cluster(actor=world.admin, cluster=cluster)
    assert archived.archived_at is not None
    assert AuditEvent.objects.filter(verb="cluster.archived").count() == 1
    assert AllocationInterval.objects.filter(pk=kept.pk).exists()
    with pytest.raises(InvalidTransition):
        inventory.archive_cluster(actor=world.admin, cluster=archived)
    with pytest.raises(Forbidden):
        inventory.archive_cluster(actor=world.member, cluster=archived)
