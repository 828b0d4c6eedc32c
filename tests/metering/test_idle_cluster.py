"""Idle GPUs given back on the local cluster (issue 30, item 3), with a real Prometheus scraping
the DCGM stand-in: an idle job is warned, then suspended through Kueue (its unit goes to the
team's next job), then resumed from the API; a busy job beside it is never touched; with
Prometheus down nothing is suspended, however long the idle clock has run. An idle Deployment,
under its team's own policy, is scaled to 0 with its spec kept and scaled back on resume."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from catalog.services import set_pool
from metering import idle_runs, prometheus
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import AuditEvent
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import h100_mig, submit, team, wait_state
from tests.scheduler.test_reclaim_cluster import kueue_workload

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]
__all__ = ["h100_mig"]  # the fixture, shared with test_kueue_cluster


def _pod_name(kube, workload) -> str:
    pods = kube.list("Pod", workload.namespace, label_selector=f"{WORKLOAD_LABEL}={workload.pk}")
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    assert running, f"no running pod of {workload.name}"
    return running[0]["metadata"]["name"]


def test_an_idle_job_is_warned_suspended_and_resumed_and_a_busy_one_is_left_alone(
    kube, tenant_namespaces, world, h100_mig, settings, client, dcgm, prometheus_server
):
    settings.PORTAL_INSTANCE = unique_slug("idle")
    settings.PROMETHEUS_URL = prometheus_server.url
    settings.IDLE_USE_WINDOW = "30s"
    settings.IDLE_CHECK_EVERY_S = 60
    set_pool(
        actor=world.admin,
        resource_class=h100_mig,
        borrowing_limit=0,
        idle_threshold_pct=5,
        idle_warn_after_s=60,
        idle_suspend_after_s=120,
        idle_protect_s=0,
    )
    idle_team = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="idlea")
    busy_team = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="idleb")
    idle = submit(kube, world, idle_team, h100_mig, name="notebook")
    busy = submit(kube, world, busy_team, h100_mig, name="train")
    wait_state(kube, idle, "running")
    wait_state(kube, busy, "running")
    nxt = submit(kube, world, idle_team, h100_mig, name="next")
    wait_state(kube, nxt, "queued")  # the team's one unit is held by the idle notebook

    # DCGM through a real Prometheus: the notebook at 1 %, the trainer at 90 %
    idle_pod, busy_pod = _pod_name(kube, idle), _pod_name(kube, busy)
    dcgm.namespaces.update({idle.namespace, busy.namespace})
    dcgm.util[(idle.namespace, idle_pod)] = Decimal("0.01")
    dcgm.util[(busy.namespace, busy_pod)] = Decimal("0.9")
    want = {(idle.namespace, idle_pod), (busy.namespace, busy_pod)}
    deadline = time.monotonic() + 60
    while not want <= prometheus.pod_utilisation(prometheus_server.url, window="30s").keys():
        assert time.monotonic() < deadline, f"Prometheus never had both pods; {dcgm.last_error}"
        time.sleep(0.5)

    # the pass's clock is given: a look now, one a minute on (warned), one two minutes on
    t0 = timezone.now()
    first = idle_runs.give_back_idle_gpus(kube, now=t0)
    assert (first.looked, first.warned, first.suspended, first.skipped) == (2, [], [], "")
    idle.refresh_from_db()
    assert idle.idle_since == t0 and idle.idle_warned_at is None

    warned = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=61))
    assert warned.warned == [idle.pk] and warned.suspended == []
    event = Workload.objects.get(pk=idle.pk).events.get(reason="IdleWarning")
    assert event.message.startswith("1 min below 5 % GPU use: it will be suspended after 1 min")
    assert AuditEvent.objects.filter(verb="workload.idle_warned", object_id=str(idle.pk)).exists()
    again = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=62))
    assert again.warned == [] and again.suspended == []  # warned once

    # Prometheus down: nothing is decided, nothing suspended, however late it is
    settings.PROMETHEUS_URL = "http://127.0.0.1:1"
    down = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=122))
    assert down.suspended == [] and down.looked == 0 and "unreachable" in down.skipped
    assert Workload.objects.get(pk=idle.pk).state == "running"
    settings.PROMETHEUS_URL = prometheus_server.url

    # back up, two minutes idle and warned a minute ago: suspended through Kueue
    gone = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=123))
    assert gone.suspended == [idle.pk] and gone.warned == []
    suspended = Workload.objects.get(pk=idle.pk)
    assert suspended.state == "suspended" and suspended.reason == "IdleSuspended"
    assert suspended.message == (
        "suspended after 2 min below 5 % GPU use; resume it from its page, the API or "
        "gpu-portal resume"
    )
    assert kueue_workload(kube, suspended)["spec"]["active"] is False
    wait_for(
        "job suspended",
        lambda: kube.get("Job", idle.k8s_name, idle.namespace)["spec"].get("suspend") is True,
        timeout=30,
    )
    assert AuditEvent.objects.filter(verb="workload.suspended", object_id=str(idle.pk)).exists()

    # its unit goes to the team's next job; the sync leaves the suspended one so
    wait_state(kube, nxt, "running", timeout=60)
    assert workload_sync.sync_workload(kube, idle.pk).state == "suspended"

    # the busy job was never touched
    busy.refresh_from_db()
    assert busy.state == "running" and busy.idle_since is None and busy.idle_warned_at is None
    assert not busy.events.filter(reason__startswith="Idle").exists()

    # the page says why and offers to resume; the team resumes it by API
    client.force_login(world.member)
    page = client.get(reverse("scheduler:workload_detail", args=[idle.pk])).content.decode()
    assert "suspended after 2 min below 5 % GPU use" in page and 'id="resume"' in page
    answer = client.post(f"/api/v1/workloads/{idle.pk}/resume/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["state"] == "queued"
    assert kueue_workload(kube, suspended)["spec"]["active"] is True
    assert AuditEvent.objects.filter(verb="workload.resumed", object_id=str(idle.pk)).exists()
    again = client.post(f"/api/v1/workloads/{idle.pk}/resume/")
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"

    # it waits for the unit the next job holds, and runs once that job is gone
    wait_state(kube, idle, "queued")
    workload_sync.delete_from_cluster(kube, nxt.pk)
    resumed = wait_state(kube, idle, "running", timeout=90)
    assert resumed.resumed_at is not None and resumed.idle_since is None


def test_an_idle_deployment_is_scaled_to_zero_with_its_spec_kept_and_resumed(
    kube, tenant_namespaces, world, h100_mig, settings, client, dcgm, prometheus_server
):
    settings.PORTAL_INSTANCE = unique_slug("idled")
    settings.PROMETHEUS_URL = prometheus_server.url
    settings.IDLE_USE_WINDOW = "30s"
    settings.IDLE_CHECK_EVERY_S = 60
    owner = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="idled")
    # the team's own idle policy (the pool has none): it alone decides
    owner.idle_threshold_pct, owner.idle_warn_after_s, owner.idle_suspend_after_s = 5, 60, 120
    owner.idle_protect_s = 0
    owner.save()
    served = workloads.submit_workload(
        actor=world.admin,
        tenant=owner,
        spec=workload_spec(
            name="serve",
            kind="deployment",
            image="registry.k8s.io/pause:3.10",
            resources={h100_mig.slug: 1},
            priority="gpu-low",
            replicas=1,
        ),
    )
    workload_sync.create_in_cluster(kube, served.pk)
    wait_state(kube, served, "running")
    pod = _pod_name(kube, served)
    dcgm.namespaces.add(served.namespace)
    dcgm.util[(served.namespace, pod)] = Decimal("0.02")
    deadline = time.monotonic() + 60
    while (served.namespace, pod) not in prometheus.pod_utilisation(
        prometheus_server.url, window="30s"
    ):
        assert time.monotonic() < deadline, f"Prometheus never had the pod; {dcgm.last_error}"
        time.sleep(0.5)

    t0 = timezone.now()
    for seconds in (0, 61):
        idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=seconds))
    gone = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=123))
    assert gone.suspended == [served.pk]
    deployment = kube.get("Deployment", served.k8s_name, served.namespace)
    assert deployment["spec"]["replicas"] == 0  # scaled to 0, its spec (image, GPUs) kept
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/pause:3.10"
    assert h100_mig.resource_name in container["resources"]["limits"]
    wait_for(
        "its pods gone",
        lambda: (
            not kube.list("Pod", served.namespace, label_selector=f"{WORKLOAD_LABEL}={served.pk}")
        ),
        timeout=60,
    )
    # the sync does not bring it back: it stays suspended until someone resumes it
    assert workload_sync.sync_workload(kube, served.pk).state == "suspended"
    assert kube.get("Deployment", served.k8s_name, served.namespace)["spec"]["replicas"] == 0

    client.force_login(world.member)
    answer = client.post(f"/api/v1/workloads/{served.pk}/resume/")
    assert answer.status_code == 200, answer.content
    assert kube.get("Deployment", served.k8s_name, served.namespace)["spec"]["replicas"] == 1
    resumed = wait_state(kube, served, "running", timeout=90)
    assert resumed.resumed_at is not None and resumed.idle_since is None


def test_a_members_idle_kubectl_job_is_given_back_by_the_same_pass(
    kube, kube_cluster, tenant_namespaces, world, h100_mig, settings, dcgm, prometheus_server
):
    """Work made with kubectl, followed by the portal (lifecycle/following.py): the idle pass
    finds its pods by owner, not by the portal's label, and suspends it through Kueue."""
    from scheduler.workloads.lifecycle import watching
    from tests.scheduler.cluster_helpers import as_user
    from tests.scheduler.test_kueue_cluster import MIG, member_job

    settings.PORTAL_INSTANCE = unique_slug("idlek")
    settings.PROMETHEUS_URL = prometheus_server.url
    settings.IDLE_USE_WINDOW = "30s"
    settings.IDLE_CHECK_EVERY_S = 60
    set_pool(
        actor=world.admin,
        resource_class=h100_mig,
        idle_threshold_pct=5,
        idle_warn_after_s=60,
        idle_suspend_after_s=120,
        idle_protect_s=0,
    )
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="idlek")
    job = member_job("notebook", {MIG: 1})
    job["metadata"]["namespace"] = tenant.namespace
    as_user(kube_cluster, world.member.username).create(job)

    def followed_running():
        watching.sync_live_workloads(kube)
        return Workload.objects.filter(tenant=tenant, owner_kind="Job", state="running").first()

    w = wait_for("the kubectl job followed and running", followed_running, timeout=60)
    pod = workload_sync.workload_pods(kube, w)[0]["metadata"]["name"]
    dcgm.namespaces.add(w.namespace)
    dcgm.util[(w.namespace, pod)] = Decimal("0.01")
    deadline = time.monotonic() + 60
    while (w.namespace, pod) not in prometheus.pod_utilisation(prometheus_server.url, window="30s"):
        assert time.monotonic() < deadline, f"Prometheus never had the pod; {dcgm.last_error}"
        time.sleep(0.5)

    t0 = timezone.now()
    idle_runs.give_back_idle_gpus(kube, now=t0)
    warned = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=61))
    assert w.pk in warned.warned
    gone = idle_runs.give_back_idle_gpus(kube, now=t0 + timedelta(seconds=123))
    assert gone.suspended == [w.pk]
    assert Workload.objects.get(pk=w.pk).state == "suspended"
    wait_for(
        "the member's job suspended by Kueue",
        lambda: kube.get("Job", "notebook", tenant.namespace)["spec"].get("suspend") is True,
        timeout=30,
    )
