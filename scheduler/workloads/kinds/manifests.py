"""Pure workload manifests and observation: typed input in, dicts out, no I/O.

- `render_job` / `render_deployment` / `render_hpa` build the Kubernetes objects of a workload
  from a `ManifestSpec` around its pod (`pod_template.py`; kubespawner style: tests compare them
  to expected dicts).
- `observe` turns a live object, its pods and events into a state.

The services that admit workloads and drive the cluster are in `scheduler.workloads`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.utils.dateparse import parse_datetime

from catalog.run_limits import duration_words
from scheduler.cluster.render.labels import MAX_EXEC_TIME_LABEL
from scheduler.workloads.kinds import gang, serving
from scheduler.workloads.kinds.pod_template import (
    WORKLOAD_LABEL,
    ManifestSpec,
    queued_labels,
    render_pod_template,
    workload_labels,
)
from scheduler.workloads.models import Workload

PREEMPTION_REASONS = frozenset({"PreemptionByScheduler", "PreemptionByKubeScheduler", "Preempted"})
# Kueue: the scheduling gate it puts on pods it has not admitted yet, and the label that ties a
# Kueue Workload to its Job.
KUEUE_GATE = serving.KUEUE_GATE
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# A container that cannot start for what its spec refers to: a Secret (or key) that is
# missing, an image that cannot be pulled. Said as the pod's own reason (`queue/pod_reasons.py`).
CONTAINER_START_ERRORS = frozenset(
    {"CreateContainerConfigError", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"}
)


# --- rendering ---------------------------------------------------------------------------------


def _object_meta(spec: ManifestSpec, *, queued: bool = True) -> dict:
    labels = queued_labels(spec) if queued else workload_labels(spec)
    return {"name": spec.name, "namespace": spec.namespace, "labels": labels}


def render_job(spec: ManifestSpec) -> dict:
    """A batch/v1 Job, created suspended: Kueue starts it when the team's queue admits it, and
    suspends and requeues it when it is preempted. A pod disrupted otherwise (a node drained)
    is replaced without counting against the backoff limit. With a maximum run time, Kueue
    stops it (deactivates its Workload) once it has been admitted that long.

    A job of N > 1 pods is a gang (`gang.py`): an Indexed Job of N pods that Kueue admits
    whole, with the rendezvous env; its headless Service is `gang.render_gang_service`. The
    backoff limit is then the gang's restart budget, counted over all its pods."""
    metadata = _object_meta(spec)
    if spec.max_run_s is not None:
        metadata["labels"][MAX_EXEC_TIME_LABEL] = str(spec.max_run_s)
    template = render_pod_template(spec, "Never")
    shape: dict = {}
    if gang.is_gang(spec):
        template = gang.gang_template(spec, template)
        shape = gang.gang_job_fields(spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            **shape,
            "backoffLimit": spec.backoff_limit,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            },
            "template": template,
        },
    }


def render_deployment(spec: ManifestSpec) -> dict:
    """A Deployment whose rollouts never run more pods than its replicas (`serving.py`): each
    pod is its own Kueue workload, so a surge pod would need quota the grant may not have."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _object_meta(spec),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": {WORKLOAD_LABEL: str(spec.workload_id)}},
            "strategy": serving.ROLLING_UPDATE,
            "template": render_pod_template(spec, "Always"),
        },
    }


def render_service(spec: ManifestSpec, *, owner_uid: str = "") -> dict:
    """The ClusterIP Service of an inference deployment with ports, named like it."""
    if not spec.ports:
        raise ValueError(f"workload {spec.workload_id} serves on no port")
    return serving.render_service(
        name=spec.name,
        namespace=spec.namespace,
        labels=workload_labels(spec),
        selector={WORKLOAD_LABEL: str(spec.workload_id)},
        ports=spec.ports,
        owner_uid=owner_uid,
    )


def _pods_metric(name: str, average_value: str) -> dict:
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": average_value},
        },
    }


def render_hpa(spec: ManifestSpec, *, owner_uid: str = "") -> dict:
    """An autoscaling/v2 HorizontalPodAutoscaler of the workload's Deployment on pod metrics:
    GPU utilisation in percent (DCGM's gauge, 0–100), request latency in seconds (a latency
    of 200 ms is the quantity `200m`) and requests per second (an average over the pods, so
    per replica: 0.5 is `500m`); it scales down once the metric stayed low for the spec's
    window (`serving.hpa_behavior`). With `owner_uid` (the Deployment's), the garbage collector
    deletes it with the Deployment as well."""
    scaling = spec.autoscaling
    if scaling is None:
        raise ValueError(f"workload {spec.workload_id} does not autoscale")
    metrics = []
    if scaling.target_gpu_util is not None:
        metrics.append(_pods_metric(scaling.gpu_util_metric, str(scaling.target_gpu_util)))
    if scaling.target_latency_ms is not None:
        metrics.append(_pods_metric(scaling.latency_metric, f"{scaling.target_latency_ms}m"))
    if scaling.target_requests_per_s is not None:
        rate = serving.rate_quantity(scaling.target_requests_per_s)
        metrics.append(_pods_metric(scaling.request_rate_metric, rate))
    metadata = _object_meta(spec, queued=False)
    if owner_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": spec.name,
                "uid": owner_uid,
            }
        ]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "metrics": metrics,
            "behavior": serving.hpa_behavior(scaling.scale_down_window_s),
        },
    }


def render_workload(spec: ManifestSpec) -> dict:
    return render_job(spec) if spec.kind == Workload.Kind.JOB else render_deployment(spec)


# --- observation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    state: str
    reason: str = ""
    message: str = ""
    # when the cluster says the work started and ended (None: it does not say): the portal
    # looks only every few seconds, so its own clock would add up to a sync to each end, and a
    # job done between two looks would seem never to have started
    started_at: datetime | None = None
    finished_at: datetime | None = None


def _instant(value) -> datetime | None:
    try:
        return parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _container_times(pods: list[dict]) -> tuple[list[datetime], list[datetime]]:
    """When the pods' containers started (running or since ended) and ended."""
    started, ended = [], []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            state = status.get("state") or {}
            for phase in ("running", "terminated"):
                if at := _instant((state.get(phase) or {}).get("startedAt")):
                    started.append(at)
            if at := _instant((state.get("terminated") or {}).get("finishedAt")):
                ended.append(at)
    return started, ended


def cluster_times(obs: Observation, obj: dict | None, pods: list[dict]) -> Observation:
    """`obs` with the cluster's own start and end (pure): the first container start of the
    pods (else a pod's or the Job's startTime); for a finished Job the last container end
    (else its completionTime or the condition's time)."""
    if obs.state not in (Workload.State.RUNNING, *Workload.FINAL_STATES) or obj is None:
        return obs
    started, ended = _container_times(pods)
    status = obj.get("status") or {}
    fallback = [(p.get("status") or {}).get("startTime") for p in pods] + [status.get("startTime")]
    starts = started or [at for at in map(_instant, fallback) if at]
    finished = None
    if obs.state in Workload.FINAL_STATES:
        condition = {"succeeded": "Complete", "failed": "Failed"}.get(obs.state, "")
        when = _conditions(obj).get(condition, {}).get("lastTransitionTime")
        said = (_instant(status.get("completionTime")), _instant(when))
        ends = ended or [at for at in said if at]
        finished = max(ends) if ends else None
    return replace(obs, started_at=min(starts) if starts else None, finished_at=finished)


def _exit_codes(pods: list[dict]) -> list[str]:
    """What a failed Job's containers said when they stopped ("container train exited with code
    3"), the first thing a person asks of a failure."""
    said = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            done = (status.get("state") or {}).get("terminated") or {}
            if done.get("exitCode"):
                said.append(f"container {status.get('name')} exited with code {done['exitCode']}")
    return list(dict.fromkeys(said))


def _conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def preemption_of(pods: list[dict], events: list[dict]) -> str:
    """A message when a pod of the workload was preempted (pod condition, pod reason or a
    `Preempted` event), else ''."""
    for pod in pods:
        target = _conditions(pod).get("DisruptionTarget")
        if (
            target
            and target.get("status") == "True"
            and target.get("reason") in (PREEMPTION_REASONS)
        ):
            return target.get("message") or "preempted by a higher-priority pod"
        if (pod.get("status") or {}).get("reason") in PREEMPTION_REASONS:
            return (pod.get("status") or {}).get("message") or "preempted"
    for event in events:
        if event.get("reason") in PREEMPTION_REASONS:
            return event.get("message") or "preempted by a higher-priority pod"
    return ""


def _pending_reason(pods: list[dict], events: list[dict]) -> Observation:
    if not pods:
        for event in events:
            if event.get("reason") == "FailedCreate":  # e.g. refused by the ResourceQuota
                return Observation(Workload.State.PENDING, "FailedCreate", event.get("message", ""))
    for pod in pods:
        scheduled = _conditions(pod).get("PodScheduled")
        if scheduled and scheduled.get("status") == "False":
            return Observation(
                Workload.State.PENDING, scheduled.get("reason", ""), scheduled.get("message", "")
            )
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in CONTAINER_START_ERRORS:  # e.g. a Secret not found
                return Observation(
                    Workload.State.PENDING, waiting["reason"], waiting.get("message", "")
                )
    return Observation(Workload.State.PENDING, "Created" if pods else "NoPodsYet")


def _gang_short(
    job: dict, pods: list[dict], running: list[dict], events: list[dict]
) -> Observation | None:
    """`pending` while a gang runs short of pods (`gang.short_of`), saying why the rest wait."""
    short = gang.short_of(job, pods, len(running))
    if short is None:
        return None
    why = _pending_reason(short.waiting, events)
    message = gang.short_message(len(running), short.needed, why.reason, why.message)
    return Observation(Workload.State.PENDING, gang.INCOMPLETE, message)


def _true(conditions: dict[str, dict], kind: str) -> dict | None:
    cond = conditions.get(kind)
    return cond if cond and cond.get("status") == "True" else None


# Kueue's reason when a Workload ran past spec.maximumExecutionTimeSeconds: on its
# DeactivationTarget condition, then (as the eviction's cause) "DeactivatedDueTo…" on Evicted.
MAX_EXEC_TIME_EXCEEDED = "MaximumExecutionTimeExceeded"


def max_run_exceeded(queue_workload: dict) -> Observation | None:
    """`failed` when Kueue stopped the workload for running past its maximum run time (it
    deactivated the Workload, suspended the Job and freed its quota), else None (pure)."""
    conditions = _conditions(queue_workload)
    said = [
        c
        for kind in ("DeactivationTarget", "Evicted")
        if (c := _true(conditions, kind))
        and (c.get("reason") or "").endswith(MAX_EXEC_TIME_EXCEEDED)
    ]
    if not said:
        return None
    limit = (queue_workload.get("spec") or {}).get("maximumExecutionTimeSeconds")
    after = f" of {duration_words(int(limit))}" if limit else ""
    return Observation(
        Workload.State.FAILED,
        "MaxRunTimeExceeded",
        f"stopped after its maximum run time{after}: Kueue deactivated it and freed its quota",
    )


def queue_wait(queue_workload: dict | None, *, preempted: str = "") -> Observation:
    """Why Kueue has not admitted (or has evicted) a workload: `queued` with Kueue's own words,
    reason `Preempted` when it was evicted to make room (pure)."""
    if queue_workload is None:
        return Observation(
            Workload.State.QUEUED,
            "WaitingForQueue",
            "waiting for the team's queue (Kueue) to take the workload in",
        )
    conditions = _conditions(queue_workload)
    stopped = max_run_exceeded(queue_workload)
    if stopped is not None:
        return stopped
    evicted = _true(conditions, "Evicted")
    if evicted and evicted.get("reason") == "AdmissionCheck":
        # a check withdrew it (MultiKueue: its worker was lost past workerLostTimeout): Kueue
        # stops it and queues it again, Admitted still True for a moment
        message = evicted.get("message") or "evicted by an admission check"
        return Observation(Workload.State.QUEUED, "Evicted", f"{message}; queued again")
    if _true(conditions, "Admitted"):  # Kueue is about to unsuspend it
        return Observation(Workload.State.PENDING, "Admitted", "admitted by the team's queue")
    taken = _true(conditions, "Preempted") or (
        evicted if evicted and evicted.get("reason") == "Preempted" else None
    )
    if taken or preempted:
        message = (taken or {}).get("message") or preempted
        return Observation(Workload.State.QUEUED, "Preempted", f"{message}; queued again")
    if evicted and evicted.get("reason") == gang.PODS_READY_TIMEOUT:
        requeue = (queue_workload.get("status") or {}).get("requeueState") or {}
        return Observation(
            Workload.State.QUEUED,
            gang.PODS_READY_TIMEOUT,
            gang.not_ready_in_time(
                requeue.get("count"), parse_datetime(requeue.get("requeueAt") or "")
            ),
        )
    reserved = conditions.get("QuotaReserved")
    if reserved and reserved.get("status") == "True":
        return Observation(
            Workload.State.QUEUED, "AdmissionChecks", "quota reserved; waiting for admission checks"
        )
    if reserved:
        return Observation(
            Workload.State.QUEUED, reserved.get("reason") or "Pending", reserved.get("message", "")
        )
    return Observation(Workload.State.QUEUED, "Pending", "waiting in the team's queue")


def _owner_uids(obj: dict) -> set[str]:
    return {o.get("uid", "") for o in (obj.get("metadata") or {}).get("ownerReferences") or []}


def _gated(pod: dict) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == KUEUE_GATE for g in gates)


def observe(
    kind: str,
    obj: dict | None,
    pods: list[dict],
    events: list[dict],
    queue_workloads: list[dict] | None = None,
) -> Observation:
    """The workload's state from its live object, its pods, preemption events and Kueue's
    Workloads for it, with the cluster's start and end where it says (pure).
    `queue_workloads` is None where Kueue does not manage it."""
    return cluster_times(_observe(kind, obj, pods, events, queue_workloads), obj, pods)


def _observe(
    kind: str,
    obj: dict | None,
    pods: list[dict],
    events: list[dict],
    queue_workloads: list[dict] | None,
) -> Observation:
    if obj is None:
        return Observation(Workload.State.FAILED, "Deleted", "the object is gone from the cluster")
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    preempted = preemption_of(pods, events)
    if kind == Workload.Kind.JOB:
        conditions = _conditions(obj)
        complete = conditions.get("Complete")
        if complete and complete.get("status") == "True":
            return Observation(Workload.State.SUCCEEDED, "Completed", complete.get("message", ""))
        failed = conditions.get("Failed")
        if failed and failed.get("status") == "True":
            if preempted and not running:  # outside Kueue: the scheduler's preemption ended it
                return Observation(Workload.State.FAILED, "Preempted", preempted)
            message = "; ".join(filter(None, [failed.get("message", ""), *_exit_codes(pods)]))
            return Observation(Workload.State.FAILED, failed.get("reason", "Failed"), message)
        if (obj.get("spec") or {}).get("suspend"):
            return queue_wait(queue_workloads[0] if queue_workloads else None)
        if running:
            return _gang_short(obj, pods, running, events) or Observation(
                Workload.State.RUNNING, "Running"
            )
        return _pending_reason(pods, events)
    wanted = int((obj.get("spec") or {}).get("replicas", 1))
    if len(running) >= wanted:
        return Observation(Workload.State.RUNNING, "Running", f"{len(running)}/{wanted} running")
    gated = [p for p in pods if _gated(p)]
    # A pod waiting behind Kueue's gate already counts in the namespace's ResourceQuota (the
    # backstop: grants + borrowing), so a replica beyond it is not even created: its
    # ReplicaSet retries until there is room, which is waiting too.
    refused = next(
        (
            e
            for e in events
            if e.get("reason") == "FailedCreate" and "exceeded quota" in (e.get("message") or "")
        ),
        None,
    )
    missing = wanted - len(pods) if refused else 0
    if running:
        waiting = [f"{len(gated)} waiting in the queue"] if gated else []
        if missing > 0:
            waiting.append(f"{missing} waiting for room in the team's quota")
        return Observation(
            Workload.State.RUNNING,
            "PartlyRunning",
            "; ".join([f"{len(running)}/{wanted} running", *waiting]),
        )
    if missing > 0 and not gated and refused is not None:
        return Observation(
            Workload.State.QUEUED,
            "WaitingForQuota",
            f"waiting for room in the team's quota: {refused.get('message', '')}",
        )
    if gated:
        uids = {(p.get("metadata") or {}).get("uid") for p in gated}
        mine = [w for w in queue_workloads or [] if _owner_uids(w) & uids]
        return queue_wait(mine[0] if mine else None, preempted=preempted)
    if preempted:
        return Observation(Workload.State.PREEMPTED, "Preempted", preempted)
    return _pending_reason(pods, events)


def queue_position(queue_workload: dict, pending: list[dict]) -> int | None:
    """1-based place of a Kueue Workload among the pending ones of its queue, in Kueue's order:
    priority (highest first), then the time it joined the queue (pure)."""
    return queue_places(pending).get((queue_workload.get("metadata") or {}).get("name"))


def queue_places(pending: list[dict]) -> dict[str | None, int]:
    """Kueue Workload name -> its `queue_position`, for all of a namespace's at once: one sort
    per namespace, where a sort per workload made following a deep queue quadratic (issue 55)."""

    def key(w: dict) -> tuple:
        meta = w.get("metadata") or {}
        evicted = _conditions(w).get("Evicted")
        joined = (
            evicted.get("lastTransitionTime")
            if evicted and evicted.get("status") == "True"
            else meta.get("creationTimestamp")
        )
        return (-int((w.get("spec") or {}).get("priority") or 0), joined or "", meta.get("name"))

    waiting = sorted(
        (
            w
            for w in pending
            if not _true(_conditions(w), "QuotaReserved") and not _true(_conditions(w), "Finished")
        ),
        key=key,
    )
    places: dict[str | None, int] = {}
    for i, w in enumerate(waiting, start=1):
        places.setdefault((w.get("metadata") or {}).get("name"), i)  # the first, as before
    return places
