"""Why it waits, in Kueue v0.19's own reasons (issue 44, item 3), on the real local cluster:
with UnadmittedWorkloadsObservability on, Kueue says WaitingForQuota, ExceedsMaxQuota,
NoMatchingFlavor, Suspended and (with blockAdmission) WaitingForPodsReady on the Workload's
QuotaReserved condition; the portal's sync stores the reason, and the page's explanation and the
API's `waiting` (which the CLI prints) say it in the portal's words."""

import pytest

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.selectors import waiting_for
from tenants.models import QuotaGrant
from tenants.services.grants import grant_quota, revoke_grant
from tenants.services.tenants import change_tenant_status
from tests.portal.api.conftest import session
from tests.scheduler.cluster_helpers import (
    kueue_restarted_with,
    unique_slug,
    wait_for,
)
from tests.scheduler.test_gang_cluster import fill_node
from tests.scheduler.test_kueue_cluster import (
    h100_mig,  # noqa: F401 - a fixture
    submit,
    team,
    wait_state,
)
from tests.tenants.factories import PoolFactory, ResourceClassFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def said(kube, workload, reason: str, timeout: float = 60):
    """The workload synced until Kueue's reason is `reason`; what it said last on a miss."""
    seen: list = []

    def check():
        w = workload_sync.sync_workload(kube, workload.pk)
        seen[:] = [(w.state, w.reason, w.message)]
        return w if w.reason == reason else None

    try:
        return wait_for(f"{workload.name}: Kueue says {reason}", check, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None


def api_waiting(world, workload) -> dict:
    answer = session(world.admin).get(f"/api/v1/workloads/{workload.pk}/")
    assert answer.status_code == 200, answer.content
    return answer.json()["waiting"]


def one_running_one_waiting(kube, world, tenant, rc, units=1):
    """A one-unit job running on the team's grant, and one of `units` queued behind it."""
    blocker = submit(kube, world, tenant, rc, name="blocker")
    wait_state(kube, blocker, "running")
    late = submit(kube, world, tenant, rc, units=units, name="late")
    return late, said(kube, late, "WaitingForQuota")


@pytest.fixture
def own_cohort(settings):
    # a cohort of its own: another team's idle units lent to this one would admit it early
    settings.PORTAL_INSTANCE = unique_slug("why")


def test_waiting_for_quota_names_the_teams_own_holders(
    kube,
    tenant_namespaces,
    world,
    h100_mig,  # noqa: F811 - the fixture
    own_cohort,
):
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="wfq")
    late, waiting = one_running_one_waiting(kube, world, tenant, h100_mig)
    assert waiting.state == "queued"
    why = waiting_for(waiting)
    assert why.code == "quota_full" and "in use by blocker" in why.reason
    assert api_waiting(world, late)["code"] == "quota_full"


def test_exceeds_max_quota_once_the_grant_shrinks_below_the_ask(
    kube,
    tenant_namespaces,
    world,
    h100_mig,  # noqa: F811 - the fixture
    own_cohort,
):
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="emq")
    extra = grant_quota(actor=world.admin, tenant=tenant, resource_class=h100_mig, amount=1)
    reconcile_tenant(kube, tenant.pk)
    big, _ = one_running_one_waiting(kube, world, tenant, h100_mig, units=2)  # grant: 2

    revoke_grant(actor=world.admin, grant=QuotaGrant.objects.get(pk=extra.pk), comment="test")
    reconcile_tenant(kube, tenant.pk)  # the queue's quota is now one unit: 2 can never fit

    waiting = said(kube, big, "ExceedsMaxQuota")
    why = waiting_for(waiting)
    assert why.code == "exceeds_max"
    assert why.reason.startswith("It asks for more H100-80GB than the team's queue can ever")
    assert "Ask for less, or ask for a larger grant." in why.hints
    assert api_waiting(world, big)["code"] == "exceeds_max"


def test_no_matching_flavor_once_the_teams_grant_of_its_model_is_gone(
    kube,
    tenant_namespaces,
    world,
    h100_mig,  # noqa: F811 - the fixture
    own_cohort,
):
    """Its Job is pinned to the H100 nodes; with the H100 grant revoked the team's queue has
    only its A100 flavor, which does not match. (A `kubectl edit` of a suspended Job's
    nodeSelector is not the way to this: Kueue keeps the Workload it made, seen on v0.19.2.)"""
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="nmf")
    a100 = ResourceClassFactory(
        slug="a100-80gb-mig-1g.10gb", gpu_model="A100-80GB", resource_name="nvidia.com/mig-1g.10gb"
    )
    PoolFactory(resource_class=a100, capacity=7)
    grant_quota(actor=world.admin, tenant=tenant, resource_class=a100, amount=1)
    reconcile_tenant(kube, tenant.pk)
    late, _ = one_running_one_waiting(kube, world, tenant, h100_mig)

    for grant in QuotaGrant.objects.filter(tenant=tenant, resource_class=h100_mig):
        revoke_grant(actor=world.admin, grant=grant, comment="test")
    reconcile_tenant(kube, tenant.pk)  # the queue keeps its A100 flavor only

    waiting = said(kube, late, "NoMatchingFlavor")
    why = waiting_for(waiting)
    assert why.code == "no_flavor" and "none of the team's flavors" in why.reason
    assert "doesn't match node affinity" in waiting.message  # Kueue's own words, as details
    assert api_waiting(world, late)["code"] == "no_flavor"


def test_suspended_when_the_queue_is_stopped_and_the_portal_says_why(
    kube,
    tenant_namespaces,
    world,
    h100_mig,  # noqa: F811 - the fixture
    own_cohort,
):
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="sus")
    late, _ = one_running_one_waiting(kube, world, tenant, h100_mig)

    change_tenant_status(actor=world.admin, tenant=tenant, action="suspend")
    reconcile_tenant(kube, tenant.pk)  # the ClusterQueue's stopPolicy: HoldAndDrain

    waiting = said(kube, late, "Suspended")
    why = waiting_for(waiting)  # Kueue sees a stopped queue; the portal knows whose doing
    assert why.code == "suspended" and why.reason.startswith("The team is suspended")
    assert api_waiting(world, late)["code"] == "suspended"


@pytest.fixture
def blocking_admission(kube_cluster):
    with kueue_restarted_with({"block_admission": "true"}):
        yield


def test_waiting_for_pods_ready_while_admitted_work_cannot_start(
    kube,
    kube_admin,
    kube_namespace,
    tenant_namespaces,
    world,
    h100_mig,  # noqa: F811 - the fixture
    own_cohort,
    blocking_admission,
):
    tenant = team(world, kube, tenant_namespaces, h100_mig, 2, prefix="wpr")
    # the H100 node full: a pod outside any queue holds every 3g.40gb, so Kueue (which counts
    # quota, not nodes) admits a job whose pod then cannot be placed, and is not ready
    fill_node(kube_admin, kube_namespace, "gpu-h100-0", leave=0)

    stuck = submit(kube, world, tenant, h100_mig, name="stuck")
    wait_state(kube, stuck, "pending")  # admitted; its pod finds no room on the node
    after = submit(kube, world, tenant, h100_mig, name="after")  # quota free, admission blocked

    waiting = said(kube, after, "WaitingForPodsReady")
    why = waiting_for(waiting)
    assert why.code == "pods_ready" and "until the pods of the work it admitted last" in why.reason
    assert api_waiting(world, after)["code"] == "pods_ready"
