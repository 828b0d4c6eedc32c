"""Work made outside the portal, read from Kueue's Workloads (pure): the top-level owner, what it
asks for, its pods, and a bare pod or a framework's object read as a Job reads."""

from scheduler.workloads.kinds import owners
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL, observe
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.kinds.serving import KUEUE_GATE

NS = "gpu-team-a"


def ref(kind, name, uid="", controller=True):
    return {"kind": kind, "name": name, "uid": uid or f"uid-{name}", "controller": controller}


def queue_workload(name, owner, *, pod_sets=None, labels=None, admitted_to=None, finished=False):
    status: dict = {}
    if admitted_to:
        status["admission"] = {"podSetAssignments": [{"flavors": {"nvidia.com/gpu": admitted_to}}]}
    if finished:
        status["conditions"] = [{"type": "Finished", "status": "True"}]
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": labels or {},
            "ownerReferences": [owner],
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"podSets": pod_sets or [pod_set()]},
        "status": status,
    }


def pod_set(count=1, gpus=None, selector=None, labels=None, priority=""):
    spec: dict = {
        "containers": [
            {"image": "train:1", "resources": {"requests": gpus or {"nvidia.com/gpu": "1"}}}
        ]
    }
    if selector:
        spec["nodeSelector"] = selector
    if priority:
        spec["priorityClassName"] = priority
    return {
        "name": "main",
        "count": count,
        "template": {"metadata": {"labels": labels or {}}, "spec": spec},
    }


def pod(name, owner=None, labels=None, phase="Running", gates=()):
    meta: dict = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "metadata": meta,
        "spec": {"schedulingGates": [{"name": g} for g in gates]},
        "status": {"phase": phase},
    }


def test_a_jobs_workload_is_owned_by_its_job():
    w = queue_workload("job-train-abc12", ref("Job", "train", "uid-job"))
    assert owners.owner_of(w, {}) == owners.Owner("Job", "train", NS)


def test_a_deployments_pods_are_one_workload_of_the_deployment():
    rs = ref("ReplicaSet", "serve-7d9f8c")
    pods = {
        f"serve-7d9f8c-{i}": pod(f"serve-7d9f8c-{i}", rs, {"pod-template-hash": "7d9f8c"})
        for i in range(2)
    }
    found = {
        owners.owner_of(queue_workload(f"pod-{name}-1", ref("Pod", name)), pods) for name in pods
    }
    assert found == {owners.Owner("Deployment", "serve", NS)}


def test_a_statefulsets_and_a_bare_pods_owners():
    pods = {
        "db-0": pod("db-0", ref("StatefulSet", "db")),
        "scratch": pod("scratch"),
    }
    assert owners.owner_of(queue_workload("pod-db-0-1", ref("Pod", "db-0")), pods) == (
        owners.Owner("StatefulSet", "db", NS)
    )
    assert owners.owner_of(queue_workload("pod-scratch-1", ref("Pod", "scratch")), pods) == (
        owners.Owner("Pod", "scratch", NS)
    )


def test_a_jobsets_job_is_followed_as_the_jobset():
    job_pod = pod(
        "trainer-workers-0-0", ref("Job", "trainer-workers-0"),
        {owners.JOBSET_NAME_LABEL: "trainer"},
    )  # fmt: skip
    w = queue_workload("jobset-trainer-1", ref("JobSet", "trainer"))
    assert owners.owner_of(w, {}) == owners.Owner("JobSet", "trainer", NS)
    # a Kueue Workload of one of its Jobs (older integrations) finds the JobSet through its pods
    w = queue_workload("job-trainer-workers-0-1", ref("Job", "trainer-workers-0"))
    assert owners.owner_of(w, {"trainer-workers-0-0": job_pod}) == owners.Owner(
        "JobSet", "trainer", NS
    )


def test_kinds_the_portal_does_not_follow_and_workloads_without_owner():
    assert owners.owner_of(queue_workload("x", ref("CronJob", "nightly")), {}) is None
    w = queue_workload("x", ref("Job", "t"))
    w["metadata"]["ownerReferences"] = []
    assert owners.owner_of(w, {}) is None


def test_the_portals_own_and_finished_workloads_are_told_apart():
    mine = queue_workload(
        "job-x", ref("Job", "x"), pod_sets=[pod_set(labels={WORKLOAD_LABEL: "7"})]
    )
    assert owners.portal_claim(mine) == 7
    assert owners.portal_claim(queue_workload("job-y", ref("Job", "y"))) is None
    made_up = queue_workload(
        "job-y", ref("Job", "y"), pod_sets=[pod_set(labels={WORKLOAD_LABEL: "seven"})]
    )
    assert owners.portal_claim(made_up) is None
    assert owners.is_finished(queue_workload("job-z", ref("Job", "z"), finished=True))


def test_a_claim_is_believed_only_for_the_object_the_portals_row_names():
    claim = [pod_set(labels={WORKLOAD_LABEL: "7"})]
    mine = queue_workload("job-x-1a2b3", ref("Job", "x", uid="uid-x"), pod_sets=claim)
    # by uid once the row knows it, wherever the row says it lives
    assert owners.believed(mine, NS, "x", "uid-x")
    assert owners.believed(mine, "elsewhere", "x", "uid-x")
    # a member's Job wearing the label: another uid, another name, another namespace
    theirs = queue_workload("job-y-9z8y7", ref("Job", "y", uid="uid-y"), pod_sets=claim)
    assert not owners.believed(theirs, NS, "x", "uid-x")
    assert not owners.believed(theirs, NS, "x", "")
    assert not owners.believed(mine, "gpu-team-b", "x", "")
    # before the row's first sync: the same namespace and name
    assert owners.believed(mine, NS, "x", "")
    # a Deployment's pods: Kueue's Workload per pod, named after the pod
    pod_workload = queue_workload(
        "pod-serve-7d9f-abcde-1f2e3", ref("Pod", "serve-7d9f-abcde", uid="uid-p"), pod_sets=claim
    )
    assert owners.believed(pod_workload, NS, "serve", "uid-deployment")
    assert not owners.believed(pod_workload, NS, "other", "uid-deployment")


def test_what_a_workload_asks_for_on_the_flavor_kueue_admitted_it_to():
    w = queue_workload(
        "job-t",
        ref("Job", "t"),
        pod_sets=[pod_set(count=2, gpus={"nvidia.com/gpu": "2"}, priority="gpu-low")],
        admitted_to="h100-80gb",
    )
    got = owners.asked(w, {})
    assert (got.pods, got.resources, got.gpu_model) == (2, {"h100-80gb": 2}, "H100-80GB")
    assert (got.image, got.priority_class) == ("train:1", "gpu-low")


def test_before_admission_the_model_comes_from_the_product_its_pods_select():
    w = queue_workload(
        "job-t",
        ref("Job", "t"),
        pod_sets=[
            pod_set(
                gpus={"nvidia.com/mig-3g.40gb": "1"},
                selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            )
        ],
    )
    got = owners.asked(w, {})
    assert (got.gpu_model, got.resources) == ("H100-80GB", {"h100-80gb-mig-3g.40gb": 1})
    # the platform's override of the product label is honoured, as the inventory does
    w["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {
        "nvidia.com/gpu.product": "H100-PCIe-Custom"
    }
    assert owners.asked(w, {"H100-80GB": "H100-PCIe-Custom"}).gpu_model == "H100-80GB"
    assert owners.asked(w, {}).gpu_model == ""  # unknown: no model, no units guessed


def test_own_pods_and_queue_workloads_of_a_job_and_a_deployment():
    uid_label = {"batch.kubernetes.io/controller-uid": "uid-job"}
    job_pods = [
        pod("train-abc", ref("Job", "train", "uid-job"), uid_label),
        pod("other-abc", ref("Job", "other", "uid-other")),
    ]
    assert [
        p["metadata"]["name"] for p in owners.own_pods("Job", "train", "uid-job", job_pods)
    ] == ["train-abc"]
    by_label = queue_workload(
        "job-train-1", ref("Job", "train"), labels={KUEUE_JOB_UID_LABEL: "uid-job"}
    )
    other = queue_workload("job-other-1", ref("Job", "other", "uid-other"))
    assert owners.own_queue_workloads("Job", "uid-job", [], [by_label, other]) == [by_label]

    rs = ref("ReplicaSet", "serve-7d9f8c")
    serve = pod("serve-7d9f8c-a", rs, {"pod-template-hash": "7d9f8c"})
    server = pod("server-55-a", ref("ReplicaSet", "server-55"), {"pod-template-hash": "55"})
    assert owners.own_pods("Deployment", "serve", "", [serve, server]) == [serve]
    per_pod = queue_workload("pod-serve-7d9f8c-a-1", ref("Pod", "serve-7d9f8c-a"))
    assert owners.own_queue_workloads("Deployment", "uid-dep", [serve], [per_pod, other]) == [
        per_pod
    ]


def test_a_bare_pod_reads_as_a_job_queued_running_and_ended():
    gated = pod("scratch", gates=[KUEUE_GATE], phase="Pending")
    assert observe("job", owners.as_job("Pod", gated), [gated], []).state == "queued"
    running = pod("scratch")
    assert observe("job", owners.as_job("Pod", running), [running], []).state == "running"
    done = pod("scratch", phase="Succeeded")
    assert observe("job", owners.as_job("Pod", done), [done], []).state == "succeeded"
    failed = pod("scratch", phase="Failed")
    assert observe("job", owners.as_job("Pod", failed), [failed], []).state == "failed"


def test_a_frameworks_completed_condition_reads_as_complete():
    jobset = {
        "metadata": {"name": "trainer"},
        "spec": {"suspend": False},
        "status": {"conditions": [{"type": "Completed", "status": "True", "message": "done"}]},
    }
    assert observe("job", owners.as_job("JobSet", jobset), [], []).state == "succeeded"
    jobset["spec"]["suspend"] = True
    jobset["status"]["conditions"] = []
    assert observe("job", owners.as_job("JobSet", jobset), [], []).state == "queued"


def test_every_owner_kind_says_how_it_is_suspended():
    assert {k.suspend for k in owners.OWNER_KINDS.values()} == {"kueue", "scale", "delete"}
    assert owners.OWNER_KINDS["Deployment"].suspend == "scale"
    assert owners.OWNER_KINDS["Job"].suspend == "kueue"
    assert owners.OWNER_KINDS["Pod"].suspend == "delete"


def test_how_work_ended_is_what_kueue_says_where_it_finished_as_a_job():
    def said(reason, status="True", kind="Finished"):
        condition = {"type": kind, "status": status, "reason": reason, "message": "m",
                     "lastTransitionTime": "2026-12-07T05:00:00Z"}  # fmt: skip
        return owners.ended_as({"status": {"conditions": [condition]}})

    done = said("Succeeded")
    assert (done.state, done.reason, done.message) == ("succeeded", "Completed", "m")
    assert done.finished_at.isoformat() == "2026-12-07T05:00:00+00:00"
    assert (said("Failed").state, said("Failed").reason) == ("failed", "Failed")
    assert said("OutOfSync") is None  # not how the work ended: its object went away
    assert said("OwnerNotFound") is None
    assert said("Succeeded", status="False") is None
    assert said("Succeeded", kind="Admitted") is None
    assert owners.ended_as({}) is None
