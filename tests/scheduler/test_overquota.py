"""The over-quota policy: work left running above a lowered grant is stopped after the grace
period, lowest priority and newest first, audited and mailed; nothing happens before."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail

from catalog import services as catalog
from catalog.models import ResourceClass
from scheduler.workloads.models import Workload
from scheduler.workloads.queue import overquota
from tenants.models import AuditEvent
from tenants.notifications import deliver_due
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services
from tests.scheduler.factories import WorkloadFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def over(world, settings):
    """1 unit granted, 3 running (a grant of 2 just ended under them)."""
    settings.OVER_QUOTA_GRACE_S = 600
    world.owner.email = "owner@example.com"
    world.owner.save()
    tenant_services.update_tenant(
        actor=world.admin, tenant=world.tenant, allowed_priority_classes=["gpu-high", "gpu-low"]
    )
    with time_machine.travel(T0 - timedelta(hours=1), tick=False):
        grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=1
        )
        run = {}
        for i, (name, priority) in enumerate(
            [("old-low", "gpu-low"), ("new-low", "gpu-low"), ("newest-high", "gpu-high")]
        ):
            run[name] = WorkloadFactory(
                tenant=world.tenant,
                name=name,
                priority_class=priority,
                state=Workload.State.RUNNING,
                resources={world.rc.slug: 1},
                created_at=T0 - timedelta(minutes=30 - i),
            )
    return world, run


def test_lowest_priority_newest_first_after_the_grace_period(
    over, django_capture_on_commit_callbacks, monkeypatch
):
    world, run = over
    deletes = []
    monkeypatch.setattr(
        overquota.tasks.delete_workload, "delay", lambda workload_id: deletes.append(workload_id)
    )
    with time_machine.travel(T0, tick=False):
        assert overquota.stop_work_over_quota() == []  # first seen over: the clock starts
    with time_machine.travel(T0 + timedelta(seconds=599), tick=False):
        assert overquota.stop_work_over_quota() == []  # still within the grace period
    with (
        time_machine.travel(T0 + timedelta(seconds=601), tick=False),
        django_capture_on_commit_callbacks(execute=True),
    ):
        stopped = overquota.stop_work_over_quota()
    assert stopped == [run["new-low"].pk, run["old-low"].pk]
    assert deletes == stopped  # their Jobs are deleted from the cluster after the commit
    states = dict(Workload.objects.values_list("name", "state"))
    assert states == {"old-low": "cancelled", "new-low": "cancelled", "newest-high": "running"}
    w = Workload.objects.get(name="new-low")
    assert w.reason == "OverQuota" and "beyond its grant" in w.message
    assert AuditEvent.objects.filter(verb="workload.cancelled").count() == 2
    deliver_due()  # what the notify worker sends after the commit
    assert len(mail.outbox) == 1 and "new-low, old-low" in mail.outbox[0].body
    assert mail.outbox[0].to == ["owner@example.com"]


def test_back_under_the_grant_resets_the_clock_and_borrowing_counts_as_allowed(over):
    world, run = over
    with time_machine.travel(T0, tick=False):
        overquota.stop_work_over_quota()
    catalog.set_pool(actor=world.admin, resource_class=world.rc, borrowing_limit=2)
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        assert overquota.stop_work_over_quota() == []  # 1 granted + 2 borrowable: fits
    assert not Workload.objects.filter(state="cancelled").exists()


def test_the_policy_can_be_turned_off(over, settings):
    settings.OVER_QUOTA_GRACE_S = -1
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        overquota.stop_work_over_quota()
        assert overquota.stop_work_over_quota() == []
    assert not Workload.objects.filter(state="cancelled").exists()


def test_in_slices_another_shape_of_the_granted_model_is_not_over_quota(world, settings):
    """A grant of 7 x 1g is 7 slices: a running 4g and 3g hold exactly that, not a 4g and a 3g
    "beyond" grants of their own classes; an eighth slice is over."""
    settings.OVER_QUOTA_GRACE_S = 0
    assert settings.GPU_QUOTA_UNIT == "slices"
    with time_machine.travel(T0 - timedelta(hours=1), tick=False):
        catalog.ensure_resource_classes(["A100-80GB"])
        for rc in ResourceClass.objects.filter(gpu_model="A100-80GB"):  # nothing to borrow
            catalog.set_pool(actor=world.admin, resource_class=rc, borrowing_limit=0)
        one_g = ResourceClass.objects.get(slug="a100-80gb-mig-1g.10gb")
        catalog.set_pool(actor=world.admin, resource_class=one_g, capacity=7)
        grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=one_g, amount=7
        )
        for slug in ("a100-80gb-mig-4g.40gb", "a100-80gb-mig-3g.40gb"):
            WorkloadFactory(
                tenant=world.tenant, name=slug[-7:].replace(".", "-"),
                state=Workload.State.RUNNING, resources={slug: 1},
            )  # fmt: skip
    with time_machine.travel(T0, tick=False):
        assert overquota.stop_work_over_quota() == []
        extra = WorkloadFactory(
            tenant=world.tenant, name="extra", state=Workload.State.RUNNING,
            resources={"a100-80gb-mig-1g.10gb": 1},
        )  # fmt: skip
        assert overquota.stop_work_over_quota() == []  # the grace starts
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        stopped = overquota.stop_work_over_quota()
    assert stopped == [extra.pk]  # the newest: the 4g and the 3g fit the 7 slices again
