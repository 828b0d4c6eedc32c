"""A batch of the periodic reconcile when the API server does not answer (PostgreSQL; the
gateway is a real one, to a port nothing listens on): every tenant of the batch is recorded
as failed, the error is raised after them, and no tenant's lock is left held."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from core.errors import TransientClusterError
from core.locks import advisory_lock
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import ReconcileRun
from scheduler.cluster.reconcile.runs import (
    LOCK_NAMESPACE,
    Summary,
    _Due,
    _sync_batch,
)
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.models import Tenant
from tests.tenants.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_a_batch_records_every_tenant_then_raises_and_lets_the_locks_go():
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:1"  # privileged: nothing listens there
    dead = KubeGateway._with(cfg)
    teams = [TenantFactory(status=Tenant.Status.ARCHIVED) for _ in range(3)]
    # each archived team's namespace as a full run's listing found it: its run deletes it
    due = [
        _Due(
            team, None, [{"kind": "Namespace", "metadata": {"name": tenant_namespace(team)}}], None
        )
        for team in teams
    ]
    summary = Summary()
    with ThreadPoolExecutor(2) as pool, pytest.raises(TransientClusterError):
        _sync_batch(dead, pool, due, "test", summary)

    runs = ReconcileRun.objects.filter(tenant__in=teams)
    assert sorted(run.tenant_id for run in runs) == sorted(team.pk for team in teams)
    assert {run.status for run in runs} == {ReconcileRun.Status.FAILED}
    assert not summary.failed and summary.changed == 0
    for team in teams:
        with advisory_lock(LOCK_NAMESPACE, team.pk) as acquired:
            assert acquired
