"""The API server takes the Job the portal renders for an env read from a Secret (issue 13)."""

import pytest

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.from_row import spec_for
from scheduler.workloads.kinds.manifests import render_workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tests.scheduler.cluster_helpers import h100_h200_team

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def test_a_job_with_a_secret_key_ref_passes_a_server_side_dry_run(kube, tenant_namespaces, world):
    tenant, mig, _ = h100_h200_team(world, kube, tenant_namespaces, "env", "Env")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=mig, amount=1)
    reconcile_tenant(kube, tenant.pk)
    workload = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name="sync-s3",
            kind="job",
            image="registry.k8s.io/pause:3.10",
            resources={mig.slug: 1},
            priority="gpu-low",
            env={"AWS_SECRET_ACCESS_KEY": {"secret": "s3-creds", "key": "secret-key"}, "B": "x"},
        ),
    )

    created = kube.create(render_workload(spec_for(workload)), dry_run=True)

    env = created["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [
        {
            "name": "AWS_SECRET_ACCESS_KEY",
            "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secret-key"}},
        },
        {"name": "B", "value": "x"},
    ]
    assert kube.get("Job", workload.k8s_name, workload.namespace) is None  # nothing stored
