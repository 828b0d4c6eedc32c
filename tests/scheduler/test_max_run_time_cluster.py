"""Maximum run time on the real local cluster (issue 30, item 4): a job told at submit that it
stops after its team's limit carries Kueue's label, runs, is deactivated by Kueue once admitted
that long (its Job suspended, its quota freed for the next job), and the portal says why."""

import pytest
from django.urls import reverse

from catalog.services import set_pool
from scheduler.workloads.models import Workload
from tenants.services.tenants import update_tenant
from tests.scheduler.cluster_helpers import unique_slug
from tests.scheduler.test_kueue_cluster import h100_mig, submit, team, wait_state
from tests.scheduler.test_reclaim_cluster import kueue_workload

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]
__all__ = ["h100_mig"]  # the fixture, shared with test_kueue_cluster

MAX_RUN_S = 15  # long enough to see it run, short enough for a test
LABEL = "kueue.x-k8s.io/max-exec-time-seconds"


def test_a_job_past_its_maximum_run_time_is_stopped_by_kueue_and_its_page_says_why(
    kube, tenant_namespaces, world, h100_mig, settings, client
):
    # a cohort of its own, and no borrowing: the next job runs only on the units freed
    settings.PORTAL_INSTANCE = unique_slug("maxrun")
    set_pool(actor=world.admin, resource_class=h100_mig, borrowing_limit=0, max_run_s=3600)
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="maxrun")
    update_tenant(actor=world.admin, tenant=tenant, max_run_s=MAX_RUN_S)  # smaller: it wins

    long = submit(kube, world, tenant, h100_mig, name="long")
    assert long.max_run_s == MAX_RUN_S
    assert long.max_run_words == f"stops after {MAX_RUN_S} s of running"
    job = kube.get("Job", long.k8s_name, long.namespace)
    assert job["metadata"]["labels"][LABEL] == str(MAX_RUN_S)
    running = wait_state(kube, long, "running")
    assert kueue_workload(kube, running)["spec"]["maximumExecutionTimeSeconds"] == MAX_RUN_S
    client.force_login(world.admin)
    page = client.get(reverse("scheduler:workload_state", args=[long.pk])).content.decode()
    assert f"Stops after {MAX_RUN_S} s of running: about" in page and " left" in page

    # the team's one unit is held: the next job waits for it
    after = submit(kube, world, tenant, h100_mig, name="after")
    wait_state(kube, after, "queued")

    # Kueue stops the first once admitted for its limit, and the portal says why
    stopped = wait_state(kube, long, "failed", timeout=MAX_RUN_S + 60)
    assert stopped.reason == "MaxRunTimeExceeded"
    assert stopped.message == (
        f"stopped after its maximum run time of {MAX_RUN_S} s: Kueue deactivated it and freed "
        "its quota"
    )
    kw = kueue_workload(kube, stopped)
    assert kw["spec"]["active"] is False
    evicted = next(c for c in kw["status"]["conditions"] if c["type"] == "Evicted")
    assert evicted["reason"] == "DeactivatedDueToMaximumExecutionTimeExceeded"
    assert kube.get("Job", long.k8s_name, long.namespace)["spec"]["suspend"] is True

    # its unit goes to the next job
    wait_state(kube, after, "running", timeout=60)
    page = client.get(reverse("scheduler:workload_detail", args=[long.pk])).content.decode()
    assert "stopped after its maximum run time of 15 s" in page
    assert Workload.objects.get(pk=long.pk).events.filter(reason="MaxRunTimeExceeded").exists()
