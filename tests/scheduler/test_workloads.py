"""Workloads without the cluster: pure manifests, pure observation, admission in the portal."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog import services as catalog
from core.errors import InvalidInput, InvalidTransition, NotFound, QuotaExceeded
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds import manifests
from scheduler.workloads.kinds.manifests import Observation, observe, render_job
from scheduler.workloads.kinds.pod_template import ManifestSpec
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.submit import admission
from scheduler.workloads.submit.spec import workload_spec
from tenants import selectors as tenant_selectors
from tenants.models import AuditEvent
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services
from tests.tenants.factories import PoolFactory, QuotaGrantFactory, ResourceClassFactory

SPEC = ManifestSpec(
    name="train-7-12",
    namespace="tenant-team-a",
    tenant="team-a",
    workload_id=12,
    kind="job",
    image="pytorch/pytorch:2.4-cuda12.4",
    gpu_model="A100-80GB",
    gpu_product="NVIDIA-A100-SXM4-80GB",
    priority_class="gpu-low",
    gpus={"nvidia.com/mig-3g.40gb": 1},
    command=("python", "train.py"),
    env={"EPOCHS": "3"},
    backoff_limit=2,
    instance="test",
)


def test_a_job_manifest_is_restricted_gpu_exact_queued_and_pinned_to_its_model():
    labels = {
        "app.kubernetes.io/managed-by": "gpu-portal",
        "gpu-portal.io/instance": "test",
        "gpu-portal.io/tenant": "team-a",
        "gpu-portal.io/workload": "12",
        "kueue.x-k8s.io/queue-name": "default",
        "kueue.x-k8s.io/priority-class": "gpu-low",
    }
    assert render_job(SPEC) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train-7-12", "namespace": "tenant-team-a", "labels": labels},
        "spec": {
            "suspend": True,
            "backoffLimit": 2,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": "gpu-low",
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "runAsGroup": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "main",
                            "image": "pytorch/pytorch:2.4-cuda12.4",
                            "command": ["python", "train.py"],
                            "env": [{"name": "EPOCHS", "value": "3"}],
                            "resources": {
                                "requests": {"nvidia.com/mig-3g.40gb": "1"},
                                "limits": {"nvidia.com/mig-3g.40gb": "1"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                        }
                    ],
                },
            },
        },
    }


def test_a_deployment_manifest_has_replicas_and_a_selector():
    from dataclasses import replace

    manifest = manifests.render_deployment(replace(SPEC, kind="deployment", replicas=3))
    assert manifest["kind"] == "Deployment" and manifest["apiVersion"] == "apps/v1"
    assert manifest["spec"]["replicas"] == 3
    assert manifest["spec"]["selector"] == {"matchLabels": {"gpu-portal.io/workload": "12"}}
    assert manifest["spec"]["template"]["spec"]["restartPolicy"] == "Always"


def pod(phase="Running", conditions=(), reason=None):
    status = {"phase": phase, "conditions": list(conditions)}
    if reason:
        status["reason"] = reason
    return {"metadata": {"name": "p"}, "status": status}


def gated_pod(uid="u1"):
    p = pod("Pending")
    p["metadata"]["uid"] = uid
    p["spec"] = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}
    return p


JOB = {"spec": {}, "status": {}}
SUSPENDED_JOB = {"spec": {"suspend": True}, "status": {}}
FAILED_JOB = {"spec": {}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}


def queue_workload(*conditions, name="job-w-1-abc", priority=0, created="2026-01-01T00:00:00Z"):
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"priority": priority},
        "status": {"conditions": list(conditions)},
    }


PENDING_QUOTA = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Pending",
    "message": "couldn't assign flavors to pod set main: insufficient unused quota for "
    "nvidia.com/mig-3g.40gb in flavor h100-80gb, 1 more needed",
}
PREEMPTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "preempted by pod x",
}


@pytest.mark.parametrize(
    ("kind", "obj", "pods", "events", "expected"),
    [
        ("job", None, [], [], "failed"),
        ("job", JOB, [], [], "pending"),
        ("job", JOB, [pod("Pending")], [], "pending"),
        ("job", JOB, [pod()], [], "running"),
        (
            "job",
            {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
            [],
            [],
            "succeeded",
        ),
        (
            "job",
            {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "X"}]}},
            [pod("Failed")],
            [],
            "failed",
        ),
        # a pod disrupted outside Kueue is replaced (the Job's pod failure policy ignores it)
        ("job", JOB, [pod("Failed", [PREEMPTED])], [], "pending"),
        ("job", JOB, [pod("Pending")], [{"reason": "Preempted", "message": "m"}], "pending"),
        ("job", FAILED_JOB, [pod("Failed", reason="Preempted")], [], "failed"),
        ("deployment", {"spec": {"replicas": 2}}, [pod(), pod()], [], "running"),
        ("deployment", {"spec": {"replicas": 2}}, [pod(), pod("Pending")], [], "running"),
        (
            "deployment",
            {"spec": {"replicas": 2}},
            [pod(), pod("Pending")],
            [{"reason": "Preempted"}],
            "running",
        ),
        (
            "deployment",
            {"spec": {"replicas": 1}},
            [pod("Pending")],
            [{"reason": "Preempted"}],
            "preempted",
        ),
        ("deployment", {"spec": {"replicas": 1}}, [pod("Pending")], [], "pending"),
        ("deployment", {"spec": {"replicas": 1}}, [gated_pod()], [], "queued"),
    ],
)
def test_observe(kind, obj, pods, events, expected):
    assert observe(kind, obj, pods, events).state == expected


def test_a_failed_job_says_the_exit_codes_of_its_containers():
    failed = {
        "status": {
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"}
            ]
        }
    }  # fmt: skip
    stopped = {"state": {"terminated": {"exitCode": 3}}}
    pods = [
        {"status": {"phase": "Failed", "containerStatuses": [{"name": "main", **stopped}]}},
        {"status": {"phase": "Failed", "containerStatuses": [{"name": "main", **stopped}]}},
        {"status": {"phase": "Failed", "containerStatuses": [{"name": "side", "state": {}}]}},
    ]
    obs = observe("job", failed, pods, [])
    assert obs == Observation(
        "failed",
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit; container main exited with code 3",
    )


UNPLACED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/5 nodes are available: 5 Insufficient nvidia.com/mig-1g.10gb.",
}


def test_a_gang_with_a_pod_that_cannot_be_placed_waits_and_does_not_say_running():
    gang = {"spec": {"parallelism": 2, "completions": 2}, "status": {}}
    obs = observe("job", gang, [pod(), pod("Pending", [UNPLACED])], [])
    assert (obs.state, obs.reason) == ("pending", "GangIncomplete")
    assert obs.message == (
        "1 of 2 pods running; the job waits until every pod is placed: Unschedulable "
        f"({UNPLACED['message']})"
    )
    # whole: running
    assert observe("job", gang, [pod(), pod()], []).state == "running"
    # one pod left to finish of two: the one that runs is all it needs
    finishing = {"spec": {"parallelism": 2, "completions": 2}, "status": {"succeeded": 1}}
    assert observe("job", finishing, [pod(), pod("Pending", [UNPLACED])], []).state == "running"
    # a job of one pod is never a gang
    assert observe("job", JOB, [pod(), pod("Pending", [UNPLACED])], []).state == "running"


def test_a_suspended_job_is_queued_with_kueues_reason():
    obs = observe("job", SUSPENDED_JOB, [], [], [queue_workload(PENDING_QUOTA)])
    assert obs == Observation("queued", "Pending", PENDING_QUOTA["message"])
    # Kueue has not made its Workload yet (or is down): queued, saying so
    assert observe("job", SUSPENDED_JOB, [], [], []).reason == "WaitingForQueue"


def test_a_job_kueue_evicted_is_queued_again_with_who_took_its_place():
    taken = {
        "type": "Preempted",
        "status": "True",
        "reason": "InCohortReclamation",
        "message": "Preempted to accommodate a workload (UID: x) due to reclamation within "
        "the cohort",
    }
    obs = observe("job", SUSPENDED_JOB, [], [], [queue_workload(taken, PENDING_QUOTA)])
    assert (obs.state, obs.reason) == ("queued", "Preempted")
    assert "reclamation within the cohort" in obs.message and "queued again" in obs.message


def test_a_gated_deployment_pod_is_queued_with_its_own_workloads_reason():
    mine = queue_workload(PENDING_QUOTA, name="pod-serve-1-abc")
    mine["metadata"]["ownerReferences"] = [{"uid": "u1", "kind": "Pod"}]
    other = queue_workload(name="pod-other-abc")
    other["metadata"]["ownerReferences"] = [{"uid": "u2", "kind": "Pod"}]
    obs = observe("deployment", {"spec": {"replicas": 1}}, [gated_pod("u1")], [], [other, mine])
    assert obs == Observation("queued", "Pending", PENDING_QUOTA["message"])


QUOTA_REFUSED = {
    "reason": "FailedCreate",
    "message": 'pods "more-2-x" is forbidden: exceeded quota: gpu-portal-quota',
}


def test_a_replica_the_quota_backstop_refuses_is_waiting_for_room():
    two = {"spec": {"replicas": 2}}
    partly = observe("deployment", two, [pod()], [QUOTA_REFUSED], [])
    assert partly == Observation(
        "running", "PartlyRunning", "1/2 running; 1 waiting for room in the team's quota"
    )
    none = observe("deployment", two, [], [QUOTA_REFUSED], [])
    assert (none.state, none.reason) == ("queued", "WaitingForQuota")
    assert "exceeded quota" in none.message
    # an old refusal once every replica exists says nothing any more
    assert observe("deployment", two, [pod(), pod("Pending")], [QUOTA_REFUSED], []).message == (
        "1/2 running"
    )


def test_queue_position_follows_kueues_order_priority_then_age():
    old_low = queue_workload(PENDING_QUOTA, name="a", priority=100, created="2026-01-01T00:00:00Z")
    new_low = queue_workload(PENDING_QUOTA, name="b", priority=100, created="2026-01-02T00:00:00Z")
    new_high = queue_workload(PENDING_QUOTA, name="c", priority=500, created="2026-01-03T00:00:00Z")
    admitted = queue_workload({"type": "QuotaReserved", "status": "True"}, name="d", priority=900)
    pending = [old_low, new_low, new_high, admitted]
    assert [manifests.queue_position(w, pending) for w in pending] == [2, 3, 1, None]


def test_pending_says_why_the_scheduler_waits():
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/5 nodes are available",
    }
    assert observe("job", JOB, [pod("Pending", [unschedulable])], []) == Observation(
        "pending", "Unschedulable", "0/5 nodes are available"
    )


# --- admission --------------------------------------------------------------------------------


@pytest.fixture
def granted(world):
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=3
    )
    return world


def submit(world, actor=None, **kw):
    args = dict(
        actor=actor or world.member,
        tenant=world.tenant,
        name="w",
        kind="job",
        image="busybox:1.36",
        resources={world.rc.slug: 1},
        priority="gpu-low",
    )
    args.update(kw)
    actor, tenant = args.pop("actor"), args.pop("tenant")
    return workloads.submit_workload(actor=actor, tenant=tenant, spec=workload_spec(**args))


@pytest.mark.django_db
def test_submit_writes_the_workload_an_event_and_one_audit_row(granted, settings):
    world = granted
    before = AuditEvent.objects.count()
    w = submit(world)
    assert (w.state, w.k8s_name, w.namespace) == (
        "pending",
        f"w-{w.pk}",
        f"{settings.TENANT_NAMESPACE_PREFIX}team-a",
    )
    assert w.gpu_model == "A100-80GB"
    assert AuditEvent.objects.count() == before + 1
    assert AuditEvent.objects.first().verb == "workload.submitted"
    assert WorkloadEvent.objects.filter(workload=w, reason="Submitted").exists()


@pytest.mark.django_db
def test_what_fits_the_grant_is_admitted_to_wait_and_only_what_never_fits_is_refused(granted):
    world = granted
    submit(world, name="a", kind="deployment", replicas=2)
    # 2 of 3 in use: asking for 2 more fits the grant, so it is admitted and waits in the queue
    submit(world, name="b", resources={world.rc.slug: 2})
    # in compute slices: 3 x 3g granted is 9, 4 x 3g needs 12
    with pytest.raises(
        QuotaExceeded, match=r"needs 4 × 3g\.40gb \(= 12 slices\), the grant is 9 slices; ask for"
    ):
        submit(world, name="c", resources={world.rc.slug: 4})
    lines = {line.resource_class.slug: line for line in tenant_selectors.quota_lines(world.tenant)}
    assert (lines[world.rc.slug].granted, lines[world.rc.slug].in_use) == (3, 4)


@pytest.mark.django_db
def test_the_pools_borrowing_limit_lets_a_team_ask_beyond_its_grant(granted):
    world = granted
    catalog.set_pool(actor=world.admin, resource_class=world.rc, borrowing_limit=2)
    submit(world, name="a", resources={world.rc.slug: 5})  # 3 granted + 2 borrowable
    with pytest.raises(
        QuotaExceeded, match="the grant is 9 slices and 6 slices may be borrowed; ask for 1 × 3g"
    ):
        submit(world, name="b", resources={world.rc.slug: 6})


@pytest.mark.django_db
def test_the_per_model_split_that_a_resource_quota_cannot_see(granted):
    world = granted
    other_model = ResourceClassFactory(
        slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB", resource_name="nvidia.com/mig-3g.40gb"
    )
    PoolFactory(resource_class=other_model, capacity=4)
    # Same Kubernetes resource name, another GPU model: the A100 grant does not cover it.
    with pytest.raises(
        QuotaExceeded, match=r"H100-80GB: needs 1 × 3g\.40gb \(= 3 slices\), the grant is 0"
    ):
        submit(world, resources={other_model.slug: 1})


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "Not_A_Label"}, "name"),
        ({"kind": "cronjob"}, "kind"),
        ({"image": "has space"}, "image"),
        ({"resources": {}}, "resources"),
        ({"resources": {"nope": 1}}, "resources"),
        ({"resources": {"SLUG": 0}}, "resources"),
        ({"priority": "gpu-critical"}, "priority"),
        ({"replicas": 2}, "replicas"),
        ({"backoff_limit": 99}, "backoff_limit"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"labels": {"gpu-portal.io/workload": "1"}}, "labels"),
    ],
)
def test_bad_submissions_are_refused_with_the_field(granted, changes, field):
    world = granted
    if changes.get("resources") == {"SLUG": 0}:
        changes = {"resources": {world.rc.slug: 0}}
    with pytest.raises(InvalidInput) as exc:
        submit(world, **changes)
    assert exc.value.field == field


@pytest.mark.django_db
def test_image_allow_list(granted, settings):
    settings.WORKLOAD_IMAGE_ALLOWLIST = ["registry.example.com/*"]
    with pytest.raises(InvalidInput, match="allow-list") as exc:
        submit(granted)
    assert exc.value.code == "image_not_allowed"
    assert submit(granted, image="registry.example.com/ml/train:1").pk


@pytest.mark.django_db
def test_a_live_name_is_unique_per_tenant(granted):
    submit(granted)
    with pytest.raises(InvalidInput, match="already runs"):
        submit(granted)


@pytest.mark.django_db
def test_suspended_tenants_run_nothing_and_outsiders_see_nothing(granted):
    world = granted
    with pytest.raises(NotFound):
        submit(world, actor=world.outsider)
    tenant_services.change_tenant_status(actor=world.admin, tenant=world.tenant, action="suspend")
    with pytest.raises(InvalidTransition, match="suspended"):
        submit(world)


@pytest.mark.django_db
def test_gpu_critical_is_capped_by_the_critical_quota(granted):
    world = granted
    tenant_services.update_tenant(
        actor=world.admin,
        tenant=world.tenant,
        allowed_priority_classes=["gpu-critical", "gpu-low"],
        critical_gpu_quota=1,
    )
    submit(world, name="a", priority="gpu-critical")
    with pytest.raises(QuotaExceeded, match="gpu-critical"):
        submit(world, name="b", priority="gpu-critical")


@pytest.mark.django_db
def test_cancel_is_one_audit_row_and_refused_twice(granted):
    world = granted
    w = submit(world)
    before = AuditEvent.objects.count()
    w = workloads.cancel_workload(actor=world.member, workload=w)
    assert w.state == Workload.State.CANCELLED and w.finished_at is not None
    assert AuditEvent.objects.count() == before + 1
    with pytest.raises(InvalidTransition):
        workloads.cancel_workload(actor=world.member, workload=w)


@pytest.mark.django_db
def test_cancel_queues_the_cluster_delete_on_commit_and_a_refused_cancel_queues_nothing(
    granted, django_capture_on_commit_callbacks, monkeypatch
):
    world = granted
    w = submit(world)
    deletes = []
    monkeypatch.setattr(workloads, "_enqueue_delete", deletes.append)
    with django_capture_on_commit_callbacks() as callbacks:
        w = workloads.cancel_workload(actor=world.member, workload=w)
    assert deletes == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert deletes == [w.pk] and w.state == Workload.State.CANCELLED
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(InvalidTransition):
            workloads.cancel_workload(actor=world.member, workload=w)
    assert callbacks == []  # refused: no delete queued


@pytest.mark.django_db
def test_grants_that_end_do_not_count(granted):
    world = granted
    grant_services.grant_quota(
        actor=world.admin,
        tenant=world.tenant,
        resource_class=world.rc,
        amount=2,
        ends_at=timezone.now() + timedelta(hours=1),
    )
    submit(world, name="a", resources={world.rc.slug: 5})
    grant_services.expire_grants(now=timezone.now() + timedelta(hours=2))
    with pytest.raises(
        QuotaExceeded, match=r"needs 5 × 3g\.40gb \(= 15 slices\), the grant is 9 slices"
    ):
        submit(world, name="b", resources={world.rc.slug: 5})


@pytest.mark.django_db
def test_queued_and_preempted_workloads_hold_no_quota_and_keep_their_name(granted):
    world = granted
    serve = submit(world, name="serve", kind="deployment", replicas=2)
    train = submit(world, name="train")
    Workload.objects.filter(pk=serve.pk).update(state=Workload.State.QUEUED)
    Workload.objects.filter(pk=train.pk).update(state=Workload.State.PREEMPTED)
    lines = {line.resource_class.slug: line for line in tenant_selectors.quota_lines(world.tenant)}
    assert lines[world.rc.slug].in_use == 0
    with pytest.raises(InvalidInput, match="already runs"):
        submit(world, name="train")  # a preempted job waits to run again: still live


@pytest.mark.django_db
def test_a_preempted_workload_can_run_again_or_be_cancelled(granted):
    world = granted
    w = submit(world, name="serve", kind="deployment")
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.PREEMPTED)
    w.refresh_from_db()
    assert not w.is_final and w.can_move_to(Workload.State.RUNNING)
    assert w.can_move_to(Workload.State.QUEUED)
    assert workloads.cancel_workload(actor=world.member, workload=w).state == "cancelled"


@pytest.mark.django_db
def test_the_critical_allowance_is_per_gpu_resource_as_the_cluster_enforces_it(granted):
    """The namespace's gpu-critical ResourceQuota caps each GPU resource name at the
    allowance; the portal counts the same way, so the two never disagree (issue 14)."""
    world = granted
    whole = ResourceClassFactory(
        slug="a100-80gb", kind="whole", profile="", resource_name="nvidia.com/gpu"
    )
    PoolFactory(resource_class=whole, capacity=4)
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=whole, amount=2
    )
    tenant_services.update_tenant(
        actor=world.admin,
        tenant=world.tenant,
        allowed_priority_classes=["gpu-critical", "gpu-low"],
        critical_gpu_quota=1,
    )
    submit(world, name="a", priority="gpu-critical")  # 1 × nvidia.com/mig-3g.40gb
    submit(world, name="b", priority="gpu-critical", resources={whole.slug: 1})  # another name
    with pytest.raises(QuotaExceeded, match="nvidia.com/mig-3g.40gb: 1 in use") as exc:
        submit(world, name="c", priority="gpu-critical")
    assert exc.value.field == "priority"


def test_the_admission_statement_reads_what_the_orm_reads(world, settings):
    """Under the tenant's lock a submit reads the name, the grants and the next id in one SQL
    statement: its name-taken is `Workload.objects.live()`'s and its grants are
    `effective_quotas`', for every state of a workload and every kind of grant (per class
    here: in slices it reads every class of the model, as the slices tests show)."""
    settings.GPU_QUOTA_UNIT = "class"
    now = timezone.now()
    rc, other_rc = world.rc, ResourceClassFactory(slug="h100-80gb")
    for i, state in enumerate(Workload.State.values):
        Workload.objects.create(
            tenant=world.tenant, name=f"w-{state}", kind="job", image="x", resources={},
            gpu_model="A100-80GB", priority_class="gpu-low", namespace="n", k8s_name=f"k-{i}",
            state=state, submitted_by=world.member,
        )  # fmt: skip
    Workload.objects.create(
        tenant=world.other_tenant, name="elsewhere", kind="job", image="x", resources={},
        gpu_model="A100-80GB", priority_class="gpu-low", namespace="n", k8s_name="k-other",
        submitted_by=world.outsider,
    )  # fmt: skip
    for tenant, resource_class, amount, starts, ends, state in [
        (world.tenant, rc, 2, now - timedelta(days=1), None, "active"),
        (world.tenant, rc, 3, now - timedelta(days=1), now + timedelta(days=1), "active"),
        (world.tenant, rc, 5, now - timedelta(days=2), now - timedelta(days=1), "active"),
        (world.tenant, rc, 7, now + timedelta(days=1), None, "active"),
        (world.tenant, rc, 11, now - timedelta(days=1), None, "revoked"),
        (world.tenant, other_rc, 13, now - timedelta(days=1), None, "active"),
        (world.other_tenant, rc, 17, now - timedelta(days=1), None, "active"),
    ]:
        QuotaGrantFactory(
            tenant=tenant, resource_class=resource_class, amount=amount, starts_at=starts,
            ends_at=ends, state=state,
        )  # fmt: skip
    asked = [(rc, 1), (other_rc, 1)]
    ids = []
    for name in [f"w-{state}" for state in Workload.State.values] + ["elsewhere", "new"]:
        taken, grants, next_id = admission.admission_reads(world.tenant, name, asked)
        assert taken == Workload.objects.live().filter(tenant=world.tenant, name=name).exists()
        assert grants == tenant_selectors.effective_quotas([world.tenant.pk])[world.tenant.pk]
        ids.append(next_id)
    assert grants == {rc.pk: 5, other_rc.pk: 13}
    assert ids == sorted(set(ids)) and ids[0] > Workload.objects.order_by("-pk")[0].pk
    # only the asked classes are read
    assert admission.admission_reads(world.tenant, "new", [(rc, 1)])[1] == {rc.pk: 5}


def test_a_submit_writes_its_k8s_name_with_the_row_and_its_id_in_order(granted):
    made = [submit(granted, name=f"ci-{i}") for i in range(3)]
    rows = list(Workload.objects.filter(pk__in=[w.pk for w in made]).order_by("pk"))
    assert [w.pk for w in rows] == [w.pk for w in made]
    assert [w.k8s_name for w in rows] == [f"ci-{i}-{w.pk}" for i, w in enumerate(rows)]
    assert [w.created_at for w in rows] == sorted(w.created_at for w in rows)


def test_under_the_tenants_lock_a_submit_reads_once_and_writes_its_three_rows(granted):
    """The critical section of a submit (what queues other submits of the tenant): the lock,
    one read (name, grants, next id), the workload, its event, the audit row; the role, the
    resource classes and their pools are read before it."""
    submit(granted, name="warm")
    with CaptureQueriesContext(connection) as queries:
        submit(granted, name="counted")
    statements = [q["sql"] for q in queries.captured_queries]
    locked = next(i for i, sql in enumerate(statements) if "FOR UPDATE" in sql)
    under_lock = [
        "read" if sql.startswith("SELECT EXISTS") else " ".join(sql.split()[:3])
        for sql in statements[locked + 1 : -1]  # up to the savepoint's release (the commit)
    ]
    assert under_lock == [
        "read",  # name taken?, grants, next id
        'INSERT INTO "scheduler_workload"',
        'INSERT INTO "scheduler_workloadevent"',
        'INSERT INTO "tenants_auditevent"',
    ], statements
    # the role, the classes; savepoint, lock, read, three inserts, release
    assert len(statements) == 9, statements


@pytest.mark.django_db(transaction=True)
def test_submits_racing_for_one_name_admit_one_and_refuse_the_others_as_taken(granted):
    """The name check reads in a statement after the tenant lock's: a submit that waited for
    the lock sees the workload its holder committed, and answers "already runs", never the
    database's unique constraint (a 500)."""
    from tests.race import race

    results = race([lambda: submit(granted, name="same") for _ in range(6)])
    admitted = [r for r in results if isinstance(r, Workload)]
    refused = [r for r in results if not isinstance(r, Workload)]
    assert len(admitted) == 1, results
    assert all(isinstance(r, InvalidInput) and "already runs" in str(r) for r in refused), refused
    assert Workload.objects.filter(tenant=granted.tenant, name="same").count() == 1
