"""End to end through the CLI, against a live portal (pytest-django's live server), PostgreSQL
and the local cluster: ask, approve, submit a MIG job and wait for success; a refusal over quota;
a gpu-critical job preempting a gpu-low one; logs that KWOK cannot serve.

KWOK keeps pods Running for ever and has no kubelet to end them, so a background thread plays
the two parts a real cluster's workers would: it runs the portal's workload sync (the Celery beat
task), and like a kubelet it marks the pods of workloads named `ok-*` Succeeded when they run.
"""

import threading
from datetime import timedelta

import pytest
from click.testing import CliRunner
from django.db import connection
from django.utils import timezone

from cli.main import cli
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads.lifecycle import watching
from tenants.services.grants import grant_quota
from tenants.services.tenants import add_member
from tenants.services.tokens import issue_token
from tests.scheduler.cluster_helpers import h100_h200_team

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


class ClusterWorker(threading.Thread):
    """Plays the kubelet (pods named ok-* succeed, as the admin) and the portal's periodic
    workload sync (as the portal's ServiceAccount)."""

    def __init__(self, kube, kubelet, namespace):
        super().__init__(daemon=True)
        self.kube, self.kubelet = kube, kubelet
        self.namespace, self.stop = namespace, threading.Event()

    def run(self):
        try:
            while not self.stop.wait(0.3):
                for pod in self.kube.list(
                    "Pod", self.namespace, label_selector="gpu-portal.io/workload"
                ):
                    name = pod["metadata"]["name"]
                    if name.startswith("ok-") and pod["status"].get("phase") == "Running":
                        self.kubelet.apply_status(
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "metadata": {"name": name, "namespace": self.namespace},
                                "status": {"phase": "Succeeded"},
                            }
                        )
                watching.sync_live_workloads(self.kube)
        finally:
            connection.close()


@pytest.fixture
def portal(kube, kube_admin, tenant_namespaces, world, live_server, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the create task runs at once, in the web thread
    tenant, _mig, h200 = h100_h200_team(world, kube, tenant_namespaces, "cli", "CLI")
    member = world.member
    add_member(actor=world.admin, tenant=tenant, username=member.username, role="member")
    ns = tenant_namespaces[-1]
    _, member_token = issue_token(
        actor=member, user=member, name="ci", scopes=["read", "request", "submit"]
    )
    _, admin_token = issue_token(
        actor=world.admin, user=world.admin, name="ops", scopes=["read", "approve"]
    )
    worker = ClusterWorker(kube, kube_admin, ns)
    worker.start()
    yield tenant, member_token, admin_token, live_server.url, h200
    worker.stop.set()
    worker.join(timeout=10)


def run(url, token, *args):
    result = CliRunner().invoke(
        cli, list(args), env={"GPU_PORTAL_URL": url, "GPU_PORTAL_TOKEN": token}
    )
    return result.exit_code, result.stdout, result.stderr


def test_ci_pipeline_through_the_cli(kube, portal, world):
    tenant, token, admin_token, url, h200 = portal
    until = (timezone.now() + timedelta(days=2)).isoformat()

    code, out, err = run(
        url, token, "request", "--tenant", tenant.slug, "--item", "h100-80gb-mig-3g.40gb=2",
        "--until", until, "--why", "nightly training",
    )  # fmt: skip
    assert code == 0, err
    request_id = int(out.split("#")[1].split(":")[0])
    code, _, err = run(url, admin_token, "--json", "quota", "--tenant", tenant.slug)
    assert code == 0, err
    # a platform admin approves with an approve-scoped token, through the API
    from cli.client import Client

    Client(url, admin_token).post(f"/api/v1/capacity-requests/{request_id}/approve/")
    reconcile_tenant(kube, tenant.pk)  # what the on-commit reconcile task does

    code, out, err = run(url, token, "quota", "--tenant", tenant.slug)
    assert "h100-80gb-mig-3g.40gb" in out and "free    2" in out

    code, out, err = run(
        url, token, "submit", "--tenant", tenant.slug, "--name", "ok-train",
        "--image", "registry.k8s.io/pause:3.10", "--gpu", "h100-80gb-mig-3g.40gb=1",
        "--wait", "--timeout", "90", "--interval", "0.5", "--", "python", "train.py",
    )  # fmt: skip
    assert code == 0, err
    assert "succeeded" in err
    workload_id = int(out.strip())

    code, out, _ = run(url, token, "status", str(workload_id))
    assert "succeeded (Completed" in out and "Created" in out

    code, out, err = run(url, token, "logs", str(workload_id))
    assert code == 5 and "logs_unavailable" in err

    code, out, err = run(
        url, token, "submit", "--tenant", tenant.slug, "--name", "too-big",
        "--image", "busybox:1.36", "--gpu", "h100-80gb-mig-3g.40gb=5",
    )  # fmt: skip
    assert code == 5
    # in compute slices: 5 x 3g is 15, the grant of 2 x 3g 6
    assert (
        "quota_exceeded" in err
        and ("needs 5 × 3g.40gb (= 15 slices), the grant is 6 slices; ask for 3 × 3g.40gb") in err
    )


def test_a_critical_job_preempts_a_low_one_and_wait_follows_it_back_into_the_queue(
    kube, portal, world
):
    tenant, token, _, url, h200 = portal
    # 8 granted: the critical job does not fit beside the low one, so Kueue preempts the low
    # one (lower priority in the same queue) and requeues it.
    grant_quota(actor=world.admin, tenant=tenant, resource_class=h200, amount=8)
    reconcile_tenant(kube, tenant.pk)
    common = ["--tenant", tenant.slug, "--image", "registry.k8s.io/pause:3.10"]

    code, out, err = run(url, token, "submit", *common, "--name", "low", "--gpu", "h200-141gb=8")
    assert code == 0, err
    low = out.strip()
    from scheduler.workloads.models import Workload
    from tests.scheduler.cluster_helpers import wait_for

    wait_for("low running", lambda: Workload.objects.get(pk=low).state == "running", timeout=60)

    code, out, err = run(
        url, token, "submit", *common, "--name", "high", "--gpu", "h200-141gb=1",
        "--priority", "gpu-critical",
    )  # fmt: skip
    assert code == 0, err

    code, out, err = run(url, token, "wait", low, "--timeout", "20", "--interval", "0.5")
    assert code == 4, err  # it waits behind the critical job: --wait keeps following it
    assert "queued, position 1 (Preempted: Preempted to accommodate" in err


def test_an_autoscaled_deployment_through_the_cli(kube, portal, world):
    tenant, token, _, url, _ = portal
    from catalog.models import ResourceClass
    from scheduler.workloads.models import Workload

    mig = ResourceClass.objects.get(slug="h100-80gb-mig-3g.40gb")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=mig, amount=2)
    reconcile_tenant(kube, tenant.pk)

    code, _, err = run(
        url, token, "submit", "--tenant", tenant.slug, "--name", "serve", "--kind", "deployment",
        "--image", "busybox:1.36", "--gpu", "h100-80gb-mig-3g.40gb=1", "--target-gpu-util", "70",
    )  # fmt: skip
    assert code == 2 and "autoscaling needs --max-replicas" in err
    code, _, err = run(
        url, token, "submit", "--tenant", tenant.slug, "--name", "serve", "--kind", "deployment",
        "--image", "busybox:1.36", "--gpu", "h100-80gb-mig-3g.40gb=1", "--min-replicas", "3",
        "--max-replicas", "4", "--target-gpu-util", "70",
    )  # fmt: skip
    assert code == 5
    assert "3 pods at min replicas" in err and "ask for 1 × 3g.40gb (= 3 slices) more" in err

    code, out, err = run(
        url, token, "submit", "--tenant", tenant.slug, "--name", "serve", "--kind", "deployment",
        "--image", "registry.k8s.io/pause:3.10", "--gpu", "h100-80gb-mig-3g.40gb=1",
        "--min-replicas", "1", "--max-replicas", "2", "--target-gpu-util", "70",
        "--target-latency-ms", "250", "--wait", "--timeout", "60", "--interval", "0.5",
    )  # fmt: skip
    assert code == 0, err
    workload_id = int(out.strip())
    code, out, _ = run(url, token, "status", str(workload_id))
    assert "autoscaling 1-2 replicas on GPU 70 % and latency 250 ms" in out
    w = Workload.objects.get(pk=workload_id)
    assert kube.get("HorizontalPodAutoscaler", w.k8s_name, w.namespace) is not None

    code, out, err = run(url, token, "cancel", str(workload_id))
    assert code == 0, err
    assert kube.get("HorizontalPodAutoscaler", w.k8s_name, w.namespace) is None
