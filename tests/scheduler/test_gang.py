"""Multi-pod jobs (gangs) without the cluster: the pure Indexed Job, its headless Service and
rendezvous env, the quota arithmetic, admission in the portal and the API, and Kueue's
waitForPodsReady as the platform team sets it. The cluster side is test_gang_cluster.py."""

from dataclasses import replace

import pytest

from catalog.kueue_config import PodsReady, kueue_configuration
from core.errors import InvalidInput, QuotaExceeded
from scheduler.workloads.kinds import gang
from scheduler.workloads.kinds.manifests import KUEUE_GATE, queue_wait, render_job
from scheduler.workloads.lifecycle.pods import pod_rows
from scheduler.workloads.queue.waiting import explain
from tenants import selectors as tenant_selectors
from tenants.services import grants as grant_services
from tests.portal.api.conftest import session
from tests.scheduler.test_workloads import SPEC, submit

GANG = replace(SPEC, replicas=4, gpus={"nvidia.com/gpu": 8})
INDEX = {
    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
}


def test_a_gang_is_an_indexed_job_of_n_pods_all_running_at_once_under_its_service():
    job = render_job(GANG)
    one = render_job(SPEC)
    assert job["spec"]["completionMode"] == "Indexed"
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 4)
    assert job["spec"]["suspend"] is True  # Kueue admits all four or none
    assert job["spec"]["backoffLimit"] == 2  # the gang's restart budget, over all its pods
    assert job["spec"]["podFailurePolicy"] == one["spec"]["podFailurePolicy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == "train-7-12"
    # everything else about the pod is what a one-pod job runs
    alone = one["spec"]["template"]["spec"]
    assert {k: v for k, v in pod.items() if k not in ("subdomain", "containers")} == {
        k: v for k, v in alone.items() if k != "containers"
    }
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_a_one_pod_job_is_no_gang():
    spec = render_job(SPEC)["spec"]
    assert not {"completionMode", "completions", "parallelism"} & set(spec)
    assert "subdomain" not in spec["template"]["spec"]
    assert not gang.is_gang(replace(SPEC, kind="deployment", replicas=4))


def test_each_pod_gets_the_rendezvous_torchrun_and_mpi_read():
    env = render_job(GANG)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "MASTER_ADDR", "value": "train-7-12-0.train-7-12"},
        {"name": "MASTER_PORT", "value": "29500"},
        {"name": "WORLD_SIZE", "value": "4"},
        {"name": "NNODES", "value": "4"},
        {"name": "NPROC_PER_NODE", "value": "8"},
        {"name": "RANK", "valueFrom": INDEX},
        {"name": "NODE_RANK", "valueFrom": INDEX},
        {"name": "PET_MASTER_ADDR", "value": "train-7-12-0.train-7-12"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
        {"name": "PET_NNODES", "value": "4"},
        {"name": "PET_NPROC_PER_NODE", "value": "8"},
        {"name": "PET_NODE_RANK", "valueFrom": INDEX},
        {"name": "EPOCHS", "value": "3"},  # the workload's own env after
    ]


def test_a_name_the_workload_sets_itself_is_left_to_it():
    spec = replace(GANG, env={"MASTER_PORT": "23456"})
    env = render_job(spec)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "MASTER_PORT"] == [
        {"name": "MASTER_PORT", "value": "23456"}
    ]
    assert {"name": "PET_MASTER_PORT", "value": "29500"} in env  # only the exact name is left


def test_a_mig_gang_runs_one_process_per_instance():
    spec = replace(GANG, gpus={"nvidia.com/mig-3g.40gb": 2})
    assert gang.procs_per_pod(spec) == 2
    assert gang.procs_per_pod(replace(GANG, gpus={})) == 1


def test_the_headless_service_is_owned_by_the_job_and_selects_its_pods():
    assert gang.render_gang_service(GANG, owner_uid="u-1") == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "train-7-12",
            "namespace": "tenant-team-a",
            "labels": {
                "app.kubernetes.io/managed-by": "gpu-portal",
                "gpu-portal.io/instance": "test",
                "gpu-portal.io/tenant": "team-a",
                "gpu-portal.io/workload": "12",
            },
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train-7-12", "uid": "u-1"}
            ],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"gpu-portal.io/workload": "12"},
            "ports": [{"name": "rendezvous", "port": 29500, "protocol": "TCP"}],
        },
    }


@pytest.mark.parametrize(
    ("pods", "per_pod", "capacity", "said"),
    [
        (4, 8, 32, None),
        (4, 8, 31, "4 pods × 8 slices = 32 slices, but the H100 pool holds 31 in all: at most 3"),
        (2, 8, 7, "not one pod of this shape"),
    ],
)
def test_the_pool_arithmetic(pods, per_pod, capacity, said):
    refusal = gang.pool_refusal(
        pods=pods, per_pod=per_pod, capacity=capacity, unit="slices", pool="H100"
    )
    if said is None:
        assert refusal is None
    else:
        assert said in refusal
        assert "ask for fewer pods or a smaller shape per pod" in refusal


# --- admission: world's A100 3g.40gb class, 3 units granted (9 slices), pool of 10 units ---------


@pytest.fixture
def granted(world):
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=3
    )
    return world


@pytest.mark.django_db
def test_a_gang_is_counted_n_times_its_pod_against_the_grant(granted):
    world = granted
    w = submit(world, name="gang", pods=3)
    assert (w.replicas, w.max_pods, w.units_held()) == (3, 3, {world.rc.slug: 3})
    lines = {line.resource_class.slug: line for line in tenant_selectors.quota_lines(world.tenant)}
    assert lines[world.rc.slug].in_use == 3
    with pytest.raises(QuotaExceeded) as exc:
        submit(world, name="big", pods=4)
    assert "a gang of 4 pods, admitted all at once" in exc.value.detail
    assert (  # issue 49, 4: the one unit
        "needs 4 × 3g.40gb (= 12 slices), the grant is 9 slices; "
        "ask for 1 × 3g.40gb (= 3 slices) more"
    ) in exc.value.detail


@pytest.mark.django_db
def test_more_pods_than_the_pool_could_ever_hold_is_bad_input_saying_how_many_fit(granted):
    with pytest.raises(InvalidInput) as exc:
        submit(granted, name="huge", pods=11)
    assert (exc.value.field, exc.value.code) == ("pods", "pool_too_small")
    assert "at most 10 pods of this shape" in exc.value.detail


@pytest.mark.django_db
def test_pods_are_for_jobs_and_replicas_for_deployments(granted):
    with pytest.raises(InvalidInput, match="a deployment scales by replicas"):
        submit(granted, kind="deployment", pods=2)
    with pytest.raises(InvalidInput, match="a job's pods are `pods`"):
        submit(granted, replicas=2)
    with pytest.raises(InvalidInput, match="at most 64 pods"):
        submit(granted, pods=65)


@pytest.mark.django_db
def test_the_api_takes_pods_and_answers_what_to_change(granted):
    client = session(granted.member)
    body = {
        "tenant": "team-a",
        "name": "ddp",
        "kind": "job",
        "image": "busybox:1.36",
        "resources": {granted.rc.slug: 1},
        "priority": "gpu-low",
        "pods": 2,
    }
    created = client.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.data
    assert (created.data["pods"], created.data["replicas"]) == (2, 2)
    huge = client.post("/api/v1/workloads/", {**body, "name": "huge", "pods": 11}, format="json")
    assert huge.status_code == 400
    assert huge.data["code"] == "pool_too_small"
    assert "at most 10 pods" in huge.data["detail"]
    over = client.post("/api/v1/workloads/", {**body, "name": "over", "pods": 4}, format="json")
    assert (over.status_code, over.data["code"]) == (409, "quota_exceeded")
    # nothing written for the refused ones
    listed = client.get("/api/v1/workloads/").data["results"]
    assert [w["name"] for w in listed] == ["ddp"]


@pytest.mark.django_db
def test_the_browser_form_submits_a_gang(granted):
    from django.test import Client

    client = Client()
    client.force_login(granted.member)
    answer = client.post(
        "/teams/team-a/workloads/new/",
        {
            "name": "ddp",
            "kind": "job",
            "image": "busybox:1.36",
            "resource_class": granted.rc.slug,
            "units": 1,
            "priority": "gpu-low",
            "replicas": 1,
            "pods": 2,
            "backoff_limit": 0,
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert granted.tenant.workloads.get(name="ddp").max_pods == 2


# --- Kueue's waitForPodsReady -----------------------------------------------------------------


def test_pods_ready_defaults_and_what_kueue_is_given():
    assert kueue_configuration("slices")["waitForPodsReady"] == {
        "timeout": "300s",
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": 60,
            "backoffMaxSeconds": 3600,
        },
    }


def test_pods_ready_as_the_platform_team_sets_it():
    ready = PodsReady.from_env(
        {
            "KUEUE_PODS_READY_TIMEOUT_S": "120",
            "KUEUE_PODS_READY_REQUEUE_BASE_S": "30",
            "KUEUE_PODS_READY_REQUEUE_LIMIT": "5",
        }
    )
    assert ready == PodsReady(timeout_s=120, requeue_base_s=30, requeue_limit=5)
    assert ready.kueue()["requeuingStrategy"]["backoffLimitCount"] == 5
    assert PodsReady.from_env({"KUEUE_PODS_READY_REQUEUE_LIMIT": ""}).requeue_limit is None
    with pytest.raises(ValueError, match="too small"):
        PodsReady.from_env({"KUEUE_PODS_READY_TIMEOUT_S": "0"})
    blocking = PodsReady.from_env({"KUEUE_PODS_READY_BLOCK_ADMISSION": "true"})
    assert blocking.kueue()["blockAdmission"] is True
    with pytest.raises(ValueError, match="say true or false"):
        PodsReady.from_env({"KUEUE_PODS_READY_BLOCK_ADMISSION": "sometimes"})


def test_a_gang_evicted_by_the_ready_timeout_is_queued_again_saying_so_and_when():
    queue_workload = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "PodsReadyTimeout",
                    "message": "Exceeded the PodsReady timeout ns/job-ddp",
                },
                {"type": "Requeued", "status": "False", "reason": "PodsReadyTimeout"},
            ],
            "requeueState": {"count": 2, "requeueAt": "2026-12-03T10:04:05Z"},
        }
    }
    said = queue_wait(queue_workload)
    assert (said.state, said.reason) == ("queued", "PodsReadyTimeout")
    assert said.message == (
        "not all of its pods were running within the ready timeout, so Kueue stopped every pod "
        "and freed its quota (eviction 2); queued again; it may be admitted again from "
        "10:04:05 UTC"
    )
    # once its backoff is over Kueue drops requeueAt: no time is promised
    del queue_workload["status"]["requeueState"]["requeueAt"]
    assert queue_wait(queue_workload).message.endswith("(eviction 2); queued again")


def test_why_a_gang_stopped_by_the_ready_timeout_waits_says_that_first():
    from tests.scheduler.test_waiting import FULL

    w = explain(replace(FULL, state="queued", kueue_reason="PodsReadyTimeout"))
    assert w.reason.startswith("Not all its pods were running within the ready timeout")
    assert "quota is full" in w.reason  # and what keeps it waiting now


# --- the pods on the workload's page ----------------------------------------------------------


def _pod(name, index=None, node="", phase="Running", **extra):
    meta = {"name": name}
    if index is not None:
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": index}
    spec = {"nodeName": node} if node else {}
    spec.update(extra.pop("spec", {}))
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, **extra}}


def test_pod_rows_in_index_order_with_node_and_state_in_words():
    pods = [
        _pod("ddp-12-10-x", "10", "gpu-h100-0"),
        _pod("ddp-12-2-x", "2", phase="Pending", spec={"schedulingGates": [{"name": KUEUE_GATE}]}),
        _pod(
            "ddp-12-0-x",
            "0",
            "gpu-h100-0",
            containerStatuses=[{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
            phase="Pending",
        ),
        _pod(
            "ddp-12-1-x",
            "1",
            phase="Pending",
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        ),
    ]
    assert [(r.index, r.node, r.state) for r in pod_rows(pods)] == [
        ("0", "gpu-h100-0", "Pending: ImagePullBackOff"),
        ("1", "", "Pending: Unschedulable"),
        ("2", "", "Pending: waiting in the team's queue"),
        ("10", "gpu-h100-0", "Running"),
    ]
    (alone,) = pod_rows(
        [
            _pod(
                "serve-1-abc",
                phase="Failed",
                containerStatuses=[{"state": {"terminated": {"exitCode": 3}}}],
            )
        ]
    )
    assert (alone.index, alone.state) == ("", "Failed: exited with code 3")
    # a pod on a simulated node says so (its logs never come, it runs until stopped)
    on_kwok = pod_rows([_pod("a-0", "0", "kwok-0"), _pod("a-1", "1", "real-0")], {}, {"kwok-0"})
    assert [(r.node, r.simulated) for r in on_kwok] == [("kwok-0", True), ("real-0", False)]


@pytest.mark.django_db
def test_the_pods_panel_says_why_there_are_none_before_the_cluster_has_the_workload(granted):
    from django.test import Client

    w = submit(granted, name="ddp", pods=2)
    client = Client()
    client.force_login(granted.viewer)
    panel = client.get(f"/workloads/{w.pk}/pods/")
    assert panel.status_code == 200
    assert "is not on the cluster yet" in panel.content.decode()
    detail = client.get(f"/workloads/{w.pk}/").content.decode()
    assert "a gang of 2 pods" in detail
    client.force_login(granted.outsider)
    assert client.get(f"/workloads/{w.pk}/pods/").status_code == 404


def test_why_a_gang_waits_counts_every_pod_and_offers_fewer_pods():
    from scheduler.workloads.queue.counting import Holder
    from scheduler.workloads.queue.waiting import explain
    from tests.scheduler.test_waiting import FULL

    holders = (Holder("train-a", "gpu-low", {"a100-80gb-mig-3g.40gb": 2}),)  # 8 of 14 free
    facts = replace(FULL, ask={"a100-80gb-mig-3g.40gb": 1}, pods=4, holders=holders)
    w = explain(facts)
    assert w.code == "quota_full"
    assert "has 8 of 14 slices free and this asks for 12" in w.reason  # 4 pods x 3 slices
    assert "A smaller ask fits now: 2 pods instead of 4." in w.hints


def test_a_short_gangs_words_read_back_as_they_were_written():
    said = gang.short_message(1, 2, "Unschedulable", "0/5 nodes are available: (x) y")
    assert gang.read_short(said) == gang.ShortSaid(
        1, 2, "Unschedulable", "0/5 nodes are available: (x) y"
    )
    assert gang.read_short(gang.short_message(3, 4)) == gang.ShortSaid(3, 4, "", "")
    assert gang.read_short("2/2 running") is None
