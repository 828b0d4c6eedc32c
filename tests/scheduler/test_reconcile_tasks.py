"""Reconcile tasks through Redis and a real Celery worker, across an API server outage."""

from datetime import timedelta

import pytest
from django.utils import timezone

from localcluster import build, cluster, components
from scheduler.cluster.models import ReconcileRun, TenantSyncState
from scheduler.cluster.reconcile.specs import provider_groups_by_tenant, tenant_namespace
from tenants.models import CapacityRequest
from tenants.services.approvals import approve_capacity_request
from tenants.services.requests import submit_capacity_request
from tenants.services.tenants import add_member, create_tenant
from tests.scheduler.cluster_helpers import celery_worker, unique_slug, wait_for
from tests.tenants.factories import (
    PlatformAdminFactory,
    PoolFactory,
    ResourceClassFactory,
    UserFactory,
)

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def reconcile_worker(kube, settings):
    settings.RECONCILE_ON_COMMIT = True
    with celery_worker(["reconcile"], concurrency=2) as worker:
        yield worker


def _apiserver():
    return next(
        c for c in components.component_specs(build.binaries()) if c.name == "kube-apiserver"
    )


def test_approval_during_an_api_server_outage_converges_when_it_is_back(
    kube, tenant_namespaces, reconcile_worker
):
    admin = PlatformAdminFactory()
    rc = ResourceClassFactory(
        slug="h200-141gb",
        gpu_model="H200-141GB",
        kind="whole",
        profile="",
        resource_name="nvidia.com/gpu",
        gpu_fraction=1,
    )
    PoolFactory(resource_class=rc, capacity=8)
    tenant = create_tenant(actor=admin, slug=unique_slug("outage"), name="Outage")
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    wait_for("first reconcile", lambda: kube.get("Namespace", ns), timeout=60)

    cluster.stop(_apiserver())
    try:
        request = submit_capacity_request(
            actor=admin,
            tenant=tenant,
            items={rc.slug: 3},
            ends_at=timezone.now() + timedelta(days=1),
            justification="outage test",
        )
        approve_capacity_request(actor=admin, request=request)  # queues a reconcile
        wait_for(
            "a failed, recorded attempt",
            lambda: ReconcileRun.objects.filter(
                tenant=tenant, status="failed", error__contains="cannot reach"
            ).exists(),
            timeout=60,
        )
        # the worker retries meanwhile (each retry shows "syncing" for a moment): the failure
        # is what the state says between attempts, and the streak it keeps lasts through them
        wait_for(
            "the failure shown",
            lambda: TenantSyncState.objects.get(tenant=tenant).summary.startswith("failed: "),
        )
        assert TenantSyncState.objects.get(tenant=tenant).consecutive_failures >= 1
    finally:
        cluster.up()  # starts the API server again

    def quota_is_three():
        quota = kube.get("ResourceQuota", "gpu-portal-quota", ns)
        return quota and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "3"

    wait_for("the retried task to converge", quota_is_three, timeout=120, interval=0.5)
    wait_for("in sync", lambda: TenantSyncState.objects.get(tenant=tenant).status == "in_sync")
    # the same run marks the request provisioned just after it records itself in sync
    wait_for(
        "provisioned",
        lambda: (
            CapacityRequest.objects.get(pk=request.pk).state == CapacityRequest.State.PROVISIONED
        ),
    )


def test_membership_change_is_reconciled_after_commit(kube, tenant_namespaces, reconcile_worker):
    admin = PlatformAdminFactory()
    tenant = create_tenant(actor=admin, slug=unique_slug("members"), name="Members")
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    user = UserFactory()
    add_member(actor=admin, tenant=tenant, username=user.username, role="viewer")
    wait_for(
        "viewer binding",
        lambda: (
            (kube.get("RoleBinding", "gpu-portal-team-viewers", ns) or {})
            .get("subjects", [{}])[0]
            .get("name")
            == user.username
        ),
        timeout=60,
    )


def test_the_groups_oidc_group_map_names_are_bound_in_their_tenants(settings):

    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_GROUP_MAP = {
        "vision-leads": "team-a:owner",
        "all-ml": ["team-a:viewer", "b:member"],
    }
    assert dict(provider_groups_by_tenant()) == {
        "team-a": [("vision-leads", "owner"), ("all-ml", "viewer")],
        "b": [("all-ml", "member")],
    }
    settings.OIDC_GROUP_MAP = {"x": "team-a:admin"}  # malformed: nothing bound, nothing raised
    assert provider_groups_by_tenant() == {}
    settings.OIDC_GROUPS_CLAIM = ""  # mapping off
    settings.OIDC_GROUP_MAP = {"vision-leads": "team-a:owner"}
    assert provider_groups_by_tenant() == {}
