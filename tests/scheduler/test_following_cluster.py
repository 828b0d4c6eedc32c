"""Work a member makes with kubectl, with no queue label, is the team's workload in the portal:
queued by Kueue within the grant, followed by the periodic sync within a run or two (listed with
where it came from, in the API too), cancelled from the portal through its own object, given
back for idleness as its kind allows, and stopped at the team's maximum run time."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import following, suspending, watching
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.lifecycle.idle import Action, Step
from scheduler.workloads.models import Workload
from scheduler.workloads.queue import overquota
from tenants.services.grants import grant_quota, revoke_grant
from tenants.services.tenants import add_member, update_tenant
from tests.scheduler.cluster_helpers import (
    as_user,
    h100_h200_team,
    restricted_pod,
    wait_for,
    wait_for_quota,
)

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

MIG = "nvidia.com/mig-3g.40gb"


@pytest.fixture
def team(kube, kube_cluster, tenant_namespaces, world):
    """A fresh team with two H100 3g slices granted and the member in it, as kubectl."""
    tenant, mig, _ = h100_h200_team(world, kube, tenant_namespaces, "fo", "Followed")
    add_member(actor=world.admin, tenant=tenant, username=world.member.username, role="member")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=mig, amount=2)
    reconcile_tenant(kube, tenant.pk)
    wait_for_quota(kube, tenant.namespace)
    tenant.refresh_from_db()
    return tenant, mig, as_user(kube_cluster, world.member.username)


def pod_spec(resources):
    return restricted_pod("main", resources)["spec"]


def job(name, resources=None, parallelism=1):
    spec = pod_spec(resources or {MIG: 1})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": spec},
        },
    }


def deployment(name, replicas):
    spec = {**pod_spec({MIG: 1}), "restartPolicy": "Always"}
    spec.pop("terminationGracePeriodSeconds")
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def made_by(member, tenant, manifest):
    manifest["metadata"]["namespace"] = tenant.namespace
    return member.create(manifest)


def followed(kube, tenant, origin, state="running"):
    """Run the periodic sync (as beat does) until the team's workload from `origin` is seen in
    `state`; returns it."""

    kind, name = origin.split()

    def seen():
        watching.sync_live_workloads(kube)
        mine = Workload.objects.filter(tenant=tenant, owner_kind=kind, k8s_name=name)
        return mine.filter(state=state).first()

    try:
        return wait_for(f"{origin} followed and {state}", seen, timeout=60)
    except AssertionError as exc:  # say what the portal and Kueue had
        rows = list(
            Workload.objects.filter(tenant=tenant).values_list(
                "owner_kind", "k8s_name", "state", "reason", "message"
            )
        )
        queue = [
            (
                w["metadata"]["name"],
                w["metadata"].get("ownerReferences"),
                w.get("status", {}).get("conditions"),
            )
            for w in kube.list("KueueWorkload", tenant.namespace)
        ]
        raise AssertionError(f"{exc}; rows {rows}; Kueue's {queue}") from None


def test_a_members_kubectl_job_is_followed_listed_and_cancelled_from_the_portal(
    kube, team, world, client
):
    tenant, mig, member = team
    watching.sync_live_workloads(kube, full=True)  # cursors taken: what follows is watched
    made = made_by(member, tenant, job("train"))
    assert made["spec"]["suspend"] is True  # no queue label: Kueue took it in all the same

    w = followed(kube, tenant, "Job train")
    assert (w.origin, w.kind, w.resources, w.gpu_model) == (
        "Job train",
        "job",
        {mig.slug: 1},
        "H100-80GB",
    )
    assert w.k8s_uid == made["metadata"]["uid"] and w.submitted_by is None
    assert [e.reason for e in w.events.order_by("created_at")][:1] == ["Followed"]
    assert w.events.filter(reason="Running").exists()
    # the team sees it with the portal's own, in the API and on its page
    client.force_login(world.member)
    listed = client.get("/api/v1/workloads/", {"tenant": tenant.slug}).json()["results"]
    assert [(r["name"], r["origin"], r["state"]) for r in listed] == [
        ("train", "Job train", "running")
    ]
    page = client.get(f"/workloads/{w.pk}/")
    assert page.status_code == 200 and b"made outside the portal" in page.content
    # safe to run twice: the next full sync follows nothing new
    watching.sync_live_workloads(kube, full=True)
    assert Workload.objects.filter(tenant=tenant).count() == 1

    workloads.cancel_workload(actor=world.member, workload=w)
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    wait_for("the member's job gone", lambda: kube.get("Job", "train", tenant.namespace) is None)
    w.refresh_from_db()
    assert (w.state, w.reason) == ("cancelled", "Cancelled")


def test_a_members_job_deleted_as_it_finishes_is_recorded_as_it_ended(kube, kube_admin, team):
    """`ttlSecondsAfterFinished: 0`: the Job, its pods and its Kueue Workload are gone by the
    next sync; the watch's last look at the Workload says how it ended (succeeded), not the
    object's absence (deleted)."""
    tenant, _, member = team
    watching.sync_live_workloads(kube, full=True)  # cursors taken: what follows is watched
    manifest = job("brief")
    manifest["spec"]["ttlSecondsAfterFinished"] = 0
    made_by(member, tenant, manifest)
    w = followed(kube, tenant, "Job brief")
    (pod,) = kube.list("Pod", tenant.namespace, label_selector="job-name=brief")
    kube_admin.apply_status(  # what the kubelet would report
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod["metadata"]["name"], "namespace": tenant.namespace},
            "status": {"phase": "Succeeded"},
        }
    )
    wait_for("the Job deleted", lambda: kube.get("Job", "brief", tenant.namespace) is None)
    wait_for("its Kueue Workload gone", lambda: not kube.list("KueueWorkload", tenant.namespace))
    watching.sync_live_workloads(kube)
    w.refresh_from_db()
    assert (w.state, w.reason) == ("succeeded", "Completed")
    assert w.finished_at is not None


def test_a_made_up_portal_label_does_not_hide_a_members_job(kube, team, world):
    """The portal's workload label on a pod template is only a claim: a member who copies it
    from one of the team's own finished workloads (or makes a number up) is followed all the
    same, with the run time, idle and billing rules that come with it."""
    tenant, _, member = team
    finished = Workload.objects.create(
        tenant=tenant, name="earlier", kind="job", image="x", resources={}, gpu_model="H100-80GB",
        priority_class="gpu-low", namespace=tenant.namespace, k8s_name="earlier",
        k8s_uid="0f0e0d0c-uid-of-a-job-long-gone", state=Workload.State.SUCCEEDED,
        submitted_by=world.member,
    )  # fmt: skip
    for name, claim in [("copied", str(finished.pk)), ("invented", "987654321")]:
        manifest = job(name)
        manifest["spec"]["template"]["metadata"] = {"labels": {WORKLOAD_LABEL: claim}}
        made_by(member, tenant, manifest)
    assert followed(kube, tenant, "Job copied").submitted_by is None
    assert followed(kube, tenant, "Job invented").origin == "Job invented"
    assert Workload.objects.filter(tenant=tenant).count() == 3


def test_a_members_deployment_is_one_workload_suspended_to_zero_and_resumed(kube, team, world):
    tenant, mig, member = team
    made_by(member, tenant, deployment("serve", 2))
    w = followed(kube, tenant, "Deployment serve")
    assert (w.kind, w.replicas, w.resources) == ("deployment", 2, {mig.slug: 1})
    wait_for(
        "both replicas running",
        lambda: (
            watching.sync_live_workloads(kube) is not None
            and Workload.objects.get(pk=w.pk).message == "2/2 running"
        ),
    )
    # one workload for the Deployment, though Kueue keeps one Workload per pod
    assert Workload.objects.filter(tenant=tenant).count() == 1

    now = timezone.now()
    step = Step(Action.SUSPEND, now - timedelta(hours=1), "its GPUs sat idle for an hour")
    assert suspending.suspend_idle(kube, w.pk, step, now)
    assert kube.get("Deployment", "serve", tenant.namespace)["spec"]["replicas"] == 0
    w.refresh_from_db()
    assert w.state == "suspended"
    wait_for("its pods gone", lambda: not kube.list("Pod", tenant.namespace))

    suspending.resume_workload(actor=world.member, workload=w, kube=kube)
    assert kube.get("Deployment", "serve", tenant.namespace)["spec"]["replicas"] == 2
    followed(kube, tenant, "Deployment serve")


def test_a_bare_pod_is_followed_and_cancelling_deletes_it(kube, team, world):
    tenant, _, member = team
    made_by(
        member, tenant, {"apiVersion": "v1", "kind": "Pod", **restricted_pod("scratch", {MIG: 1})}
    )
    w = followed(kube, tenant, "Pod scratch")
    assert w.origin == "Pod scratch" and w.kind == "job"
    workloads.cancel_workload(actor=world.member, workload=w)
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    wait_for("the pod gone", lambda: kube.get("Pod", "scratch", tenant.namespace) is None)


def test_a_followed_job_past_the_teams_maximum_run_time_is_stopped_and_frees_its_quota(
    kube, team, world
):
    tenant, _, member = team
    update_tenant(actor=world.admin, tenant=tenant, max_run_s=3600)
    made_by(member, tenant, job("long", parallelism=2))  # the team's two slices
    w = followed(kube, tenant, "Job long")
    assert w.max_run_s == 3600 and w.replicas == 2
    # an hour later (its start moved back, not the clock)
    Workload.objects.filter(pk=w.pk).update(
        started_at=timezone.now() - timedelta(hours=1, seconds=1)
    )
    assert following.stop_past_their_run_time(kube) == [w.pk]
    w.refresh_from_db()
    assert (w.state, w.reason) == ("failed", "MaxRunTimeExceeded")
    assert "maximum run time of 1 h" in w.message
    # Kueue suspended it and freed the quota: a new job of the member's is admitted and runs
    wait_for(
        "the job suspended by Kueue",
        lambda: kube.get("Job", "long", tenant.namespace)["spec"].get("suspend") is True,
    )
    made_by(member, tenant, job("next", parallelism=2))
    followed(kube, tenant, "Job next")


def test_a_followed_job_left_above_a_revoked_grant_is_stopped_by_the_over_quota_policy(
    kube, team, world, settings, django_capture_on_commit_callbacks
):
    tenant, _, member = team
    settings.OVER_QUOTA_GRACE_S = 0
    made_by(member, tenant, job("kept", parallelism=2))
    w = followed(kube, tenant, "Job kept")
    for grant in tenant.grants.filter(state="active"):
        revoke_grant(actor=world.admin, grant=grant, comment="the project ended")
    assert overquota.stop_work_over_quota() == []  # first seen above the grant: the clock starts
    with django_capture_on_commit_callbacks() as hints:  # the delete is the worker's (a hint)
        assert overquota.stop_work_over_quota() == [w.pk]
    assert [h.keywords for h in hints] == [{"workload_id": w.pk}]
    w.refresh_from_db()
    assert (w.state, w.reason) == ("cancelled", "OverQuota")
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    wait_for("the member's job gone", lambda: kube.get("Job", "kept", tenant.namespace) is None)


def test_a_submit_that_mounts_a_claim_the_namespace_lacks_is_refused_naming_it(
    kube, team, world, client, settings
):
    """Accepted, it would wait forever (its pod is never placed): refused at submit instead,
    and accepted once the member has made the claim."""
    tenant, mig, member = team
    settings.SUBMIT_CHECKS_CLAIMS = True
    client.force_login(world.member)
    body = {
        "tenant": tenant.slug, "name": "reads-data", "kind": "job",
        "image": "registry.k8s.io/pause:3.10", "resources": {mig.slug: 1}, "priority": "gpu-low",
        "volumes": [{"claim": "datasets", "mount_path": "/data"}],
    }  # fmt: skip
    refused = client.post("/api/v1/workloads/", body, content_type="application/json")
    assert refused.status_code == 400, refused.content
    assert "'datasets' does not exist" in refused.content.decode()
    assert not Workload.objects.filter(tenant=tenant).exists()  # nothing written
    made_by(
        member, tenant,
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "datasets"},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    )  # fmt: skip
    accepted = client.post("/api/v1/workloads/", body, content_type="application/json")
    assert accepted.status_code == 201, accepted.content


def over_budget(world, tenant, rc, settings):
    """The team has spent more than its budget this month (a minute of 8 slices at the class's
    price, just ended) and budgets are enforced."""
    from metering import selectors as metering_selectors
    from metering import services as metering
    from metering.models import AllocationInterval
    from scheduler.cluster.models import Cluster

    now = timezone.now()
    metering.set_budget(
        actor=world.admin, tenant=tenant, month=metering_selectors.current_month(now), amount="0.01"
    )
    cluster, _ = Cluster.objects.get_or_create(name="local")
    start = max(now - timedelta(minutes=1), now.replace(day=1, hour=0, minute=0, second=0))
    AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid="spent",
        namespace=tenant.namespace,
        pod_name="spent",
        node_name="gpu-h100-0",
        tenant=tenant,
        resource_class=rc,
        resource_name=rc.resource_name,
        units=8,
        started_at=start,
        last_seen_at=now,
        ended_at=now,
    )
    settings.BUDGET_ENFORCE = True
    assert tenant.pk in metering.over_budget_tenants([tenant.pk])


def test_the_holds_on_a_teams_queue_hold_for_kubectl_work_as_for_the_portals(
    kube, team, world, settings, client
):
    from metering.services import OverBudget
    from scheduler.workloads.submit.spec import workload_spec
    from tenants.services.tenants import change_tenant_status

    tenant, mig, member = team
    made_by(member, tenant, job("before"))
    running = followed(kube, tenant, "Job before")

    # over its enforced budget: the LocalQueue is held; what runs goes on, what comes waits
    over_budget(world, tenant, mig, settings)
    reconcile_tenant(kube, tenant.pk)
    assert kube.get("LocalQueue", "default", tenant.namespace)["spec"]["stopPolicy"] == "Hold"
    made_by(member, tenant, job("after"))
    waiting = followed(kube, tenant, "Job after", state="queued")
    # Kueue holds it (with the queue held its defaulting leaves the Job without a queue
    # name: "LocalQueue  doesn't exist"); the portal says why in its own words
    client.force_login(world.member)
    why = client.get(f"/api/v1/workloads/{waiting.pk}/").json()["waiting"]
    assert why["code"] == "over_budget" and "budget" in why["reason"]
    # the portal refuses a new submit with the reason, rather than queue it
    with pytest.raises(OverBudget, match="budget"):
        workloads.submit_workload(
            actor=world.member,
            tenant=tenant,
            spec=workload_spec(
                name="portal", kind="job", image="registry.k8s.io/pause:3.10",
                resources={mig.slug: 1}, priority="gpu-low",
            ),
        )  # fmt: skip
    running.refresh_from_db()
    assert running.state == "running"
    assert kube.get("Job", "after", tenant.namespace)["spec"]["suspend"] is True
    waiting.refresh_from_db()
    assert waiting.state == "queued"

    # a suspended team (HoldAndDrain): what ran is stopped, by Kueue, whatever made it
    settings.BUDGET_ENFORCE = False
    change_tenant_status(actor=world.admin, tenant=tenant, action="suspend")
    reconcile_tenant(kube, tenant.pk)
    cq = kube.get("ClusterQueue", tenant.namespace)
    assert cq["spec"]["stopPolicy"] == "HoldAndDrain"
    try:
        wait_for(
            "the running kubectl job stopped by Kueue",
            lambda: kube.get("Job", "before", tenant.namespace)["spec"].get("suspend") is True,
        )
    except AssertionError as exc:
        queue = [
            (w["metadata"]["name"], w.get("status", {}).get("conditions"))
            for w in kube.list("KueueWorkload", tenant.namespace)
        ]
        raise AssertionError(f"{exc}; Kueue's {queue[::-1]}") from None
    wait_for(
        "the portal sees it stopped",
        lambda: (
            watching.sync_live_workloads(kube) is not None
            and Workload.objects.get(pk=running.pk).state in ("preempted", "queued")
        ),
    )


def jobset(name, pods):
    """A JobSet of one replicated Job of `pods` pods, each with one 3g slice."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "backoffLimit": 0,
                            "template": {"spec": pod_spec({MIG: 1})},
                        }
                    },
                }
            ]
        },
    }


def test_a_members_jobset_is_queued_within_the_grant_followed_and_cancelled(kube, team, world):
    """The framework the local cluster runs (JobSet's controller, built from the module Kueue
    v0.19.2 pins): a member may make JobSets; Kueue queues them on the team's grant (two
    slices: one JobSet of two pods runs, the next waits), the portal follows each as one
    workload and cancels it through the JobSet."""
    tenant, mig, member = team
    made_by(member, tenant, jobset("trainer", 2))
    w = followed(kube, tenant, "JobSet trainer")
    assert (w.kind, w.replicas, w.resources) == ("job", 2, {mig.slug: 1})
    pods = workload_sync.workload_pods(kube, w)
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)

    made_by(member, tenant, jobset("next", 2))  # beyond the grant: Kueue holds it whole
    waiting = followed(kube, tenant, "JobSet next", state="queued")
    assert kube.get("JobSet", "next", tenant.namespace)["spec"]["suspend"] is True
    assert not workload_sync.workload_pods(kube, waiting)

    workloads.cancel_workload(actor=world.member, workload=w)
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    wait_for("the JobSet gone", lambda: kube.get("JobSet", "trainer", tenant.namespace) is None)
    followed(kube, tenant, "JobSet next")  # its units free, the next one runs


def test_a_members_statefulset_is_one_workload_and_is_given_back_by_scaling_to_zero(
    kube, team, world
):
    tenant, mig, member = team
    spec = {**pod_spec({MIG: 1}), "restartPolicy": "Always"}
    spec.pop("terminationGracePeriodSeconds")
    made_by(
        member,
        tenant,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": spec},
            },
        },
    )
    w = followed(kube, tenant, "StatefulSet db")
    assert (w.kind, w.replicas, w.resources) == ("deployment", 2, {mig.slug: 1})
    assert Workload.objects.filter(tenant=tenant).count() == 1
    now = timezone.now()
    step = Step(Action.SUSPEND, now - timedelta(hours=1), "its GPUs sat idle for an hour")
    assert suspending.suspend_idle(kube, w.pk, step, now)
    assert kube.get("StatefulSet", "db", tenant.namespace)["spec"]["replicas"] == 0
