import pytest
from django.urls import reverse
from django.utils import timezone

from scheduler.models import Cluster, Node, ReconcileRun, TenantSyncState

pytestmark = pytest.mark.django_db


def test_console_pages_for_nodes_runs_and_sync(client, world):
    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    cluster = Cluster.objects.create(name="local")
    Node.objects.create(
        cluster=cluster,
        name="gpu-a100-0",
        gpu_model="A100-80GB",
        gpu_count=4,
        allocatable={"nvidia.com/mig-1g.10gb": 7},
        last_seen_at=timezone.now(),
    )
    TenantSyncState.objects.create(tenant=world.tenant, status="failed", last_error="422 bad")
    ReconcileRun.objects.create(
        tenant=world.tenant,
        trigger="periodic",
        status="failed",
        started_at=timezone.now(),
        error="422 bad",
        drift=["x"],
    )
    nodes = client.get(reverse("admin:scheduler_node_changelist")).content.decode()
    assert "gpu-a100-0" in nodes and "mig-1g.10gb: 7" in nodes
    runs = client.get(reverse("admin:scheduler_reconcilerun_changelist")).content.decode()
    assert "422 bad" in runs
    tenants = client.get(reverse("admin:tenants_tenant_changelist")).content.decode()
    assert "failed: 422 bad" in tenants
    assert client.get(reverse("admin:scheduler_tenantsyncstate_changelist")).status_code == 200
