"""Work a team made outside the portal (kubectl, Helm, a framework's controller), as Kueue
queues it: every such object gets a Kueue `Workload`, whatever made it, so the portal follows
those. Pure: which object at the top owns a Kueue Workload (a Deployment, though Kueue keeps a
Workload per pod), what it asks for, which pods are its own, and how the portal stops or
suspends each kind of owner. The reading and writing is `lifecycle/following.py`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.utils.dateparse import parse_datetime

from catalog import facts
from scheduler.cluster.node_offers import class_units
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL, Observation
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.kinds.serving import KUEUE_GATE

JOB, DEPLOYMENT = "job", "deployment"  # Workload.Kind's values (models import this module)
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
POD_TEMPLATE_HASH = "pod-template-hash"
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


@dataclass(frozen=True)
class OwnerKind:
    """How the portal treats one kind of top-level object. `row_kind`: runs to an end (job) or
    serves until stopped (deployment). `suspend`: what "suspend" keeps of it —
    `kueue` Kueue's `spec.active=false` (evicted, quota freed, the object kept), `scale` scaled
    to 0 with its spec kept, `delete` nothing to keep (a bare pod): deleted, with a notice."""

    kind: str
    row_kind: str
    suspend: str


OWNER_KINDS: dict[str, OwnerKind] = {
    k.kind: k
    for k in (
        OwnerKind("Job", JOB, "kueue"),
        OwnerKind("JobSet", JOB, "kueue"),
        OwnerKind("PyTorchJob", JOB, "kueue"),
        OwnerKind("RayJob", JOB, "kueue"),
        OwnerKind("RayCluster", DEPLOYMENT, "kueue"),
        OwnerKind("Deployment", DEPLOYMENT, "scale"),
        OwnerKind("StatefulSet", DEPLOYMENT, "scale"),
        OwnerKind("LeaderWorkerSet", DEPLOYMENT, "scale"),
        OwnerKind("Pod", JOB, "delete"),
    )
}


@dataclass(frozen=True)
class Owner:
    """The top-level object behind a Kueue Workload: kind and name in its namespace."""

    kind: str
    name: str
    namespace: str


@dataclass(frozen=True)
class Asked:
    """What a Kueue Workload asks for, per pod, as the portal books it."""

    pods: int
    resources: dict[str, int]  # resource class slug -> units per pod
    gpu_model: str
    image: str
    priority_class: str
    labels: dict[str, str] = field(default_factory=dict)


def _meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def _controller(obj: Mapping) -> dict | None:
    refs = _meta(obj).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def portal_claim(queue_workload: Mapping) -> int | None:
    """The portal workload its pods say they belong to (the portal's workload label, which the
    Kueue Workload copies from the pod template), or None. Only a claim: anyone who can create a
    Job can write the label, so `believed` checks it against the portal's own rows."""
    for ps in (queue_workload.get("spec") or {}).get("podSets") or []:
        labels = ((ps.get("template") or {}).get("metadata") or {}).get("labels") or {}
        value = str(labels.get(WORKLOAD_LABEL, ""))
        if value.isdigit() and len(value) < 19:
            return int(value)
    return None


def believed(queue_workload: Mapping, row_namespace: str, row_name: str, row_uid: str) -> bool:
    """Whether the portal's own row (namespace, Job or Deployment name, uid once synced) is what
    this Kueue Workload's claim says: the same object by uid where both are known (a uid cannot
    be chosen), else the same namespace and an object named after the row's."""
    uid = owner_uid(queue_workload)
    if uid and row_uid:
        return uid == row_uid
    meta = _meta(queue_workload)
    ref = _controller(queue_workload) or {}
    if meta.get("namespace") != row_namespace or not row_name:
        return False
    return any(
        name == row_name or name.startswith(f"{prefix}{row_name}-")
        for name in (ref.get("name", ""), meta.get("name", ""))
        if name
        for prefix in ("", "job-", "pod-")
    )


def is_finished(queue_workload: Mapping) -> bool:
    return any(
        c.get("type") == "Finished" and c.get("status") == "True"
        for c in (queue_workload.get("status") or {}).get("conditions") or []
    )


def has_ended(job: Mapping) -> bool:
    """A Job whose conditions say it completed or failed."""
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def ended_as(queue_workload: Mapping) -> Observation | None:
    """How the work behind a Kueue Workload ended, where Kueue says it finished as a job does
    (Succeeded or Failed; not OutOfSync or OwnerNotFound): what the portal records of a Job
    that was deleted as it finished (a member's `ttlSecondsAfterFinished: 0`), seen only in a
    watch's last look at its Workload."""
    finished = next(
        (
            c
            for c in (queue_workload.get("status") or {}).get("conditions") or []
            if c.get("type") == "Finished" and c.get("status") == "True"
        ),
        None,
    )
    if finished is None or finished.get("reason") not in ("Succeeded", "Failed"):
        return None
    message, at = finished.get("message", ""), finished.get("lastTransitionTime")
    ended = parse_datetime(at) if isinstance(at, str) else None
    if finished["reason"] == "Succeeded":
        return Observation("succeeded", "Completed", message, finished_at=ended)
    return Observation("failed", "Failed", message, finished_at=ended)


def owner_uid(queue_workload: Mapping) -> str:
    """The uid of the object a Kueue Workload is for, where it says without reading pods (Kueue's
    job-uid label, else a controller that is not a pod); "" otherwise."""
    uid = (_meta(queue_workload).get("labels") or {}).get(KUEUE_JOB_UID_LABEL, "")
    ref = _controller(queue_workload)
    if not uid and ref is not None and ref.get("kind") != "Pod":
        uid = ref.get("uid", "")
    return uid


def owner_of_pod(pod: Mapping) -> Owner:
    """A pod's top-level owner: its Deployment (through the ReplicaSet, named
    `<deployment>-<pod-template-hash>`), StatefulSet, Job or other controller; itself when bare."""
    meta = _meta(pod)
    namespace = meta.get("namespace", "")
    ref = _controller(pod)
    if ref is None:
        return Owner("Pod", meta.get("name", ""), namespace)
    if ref.get("kind") == "ReplicaSet":
        suffix = f"-{(meta.get('labels') or {}).get(POD_TEMPLATE_HASH, '')}"
        name = ref.get("name", "")
        if suffix != "-" and name.endswith(suffix):
            return Owner("Deployment", name[: -len(suffix)], namespace)
    if ref.get("kind") == "Job" and JOBSET_NAME_LABEL in (meta.get("labels") or {}):
        return Owner("JobSet", meta["labels"][JOBSET_NAME_LABEL], namespace)
    return Owner(ref.get("kind", "Pod"), ref.get("name", ""), namespace)


def owner_of(queue_workload: Mapping, pods_by_name: Mapping[str, Mapping]) -> Owner | None:
    """The top-level object behind a Kueue Workload: its owner (a Job, a JobSet, ...), or, for
    the pods Kueue queues one by one or as a group, the owner of its pod (read from
    `pods_by_name`, the namespace's pods). None for a kind the portal does not follow."""
    namespace = _meta(queue_workload).get("namespace", "")
    ref = _controller(queue_workload)
    if ref is None:
        return None
    if ref.get("kind") == "Pod":
        pod = pods_by_name.get(ref.get("name", ""))
        owner = owner_of_pod(pod) if pod else Owner("Pod", ref.get("name", ""), namespace)
    elif ref.get("kind") == "Job" and ref.get("name", "") in _jobset_jobs(pods_by_name):
        owner = Owner("JobSet", _jobset_jobs(pods_by_name)[ref["name"]], namespace)
    else:
        owner = Owner(ref.get("kind", ""), ref.get("name", ""), namespace)
    return owner if owner.kind in OWNER_KINDS and owner.name else None


def _jobset_jobs(pods_by_name: Mapping[str, Mapping]) -> dict[str, str]:
    """Job name -> JobSet name, from the pods a JobSet's Jobs made."""
    out = {}
    for pod in pods_by_name.values():
        labels = _meta(pod).get("labels") or {}
        ref = _controller(pod)
        if JOBSET_NAME_LABEL in labels and ref and ref.get("kind") == "Job":
            out[ref.get("name", "")] = labels[JOBSET_NAME_LABEL]
    return out


def _requests(pod_spec: Mapping) -> Counter:
    """A pod's GPU requests (init containers run one at a time: the largest counts)."""
    total: Counter = Counter()
    for container in pod_spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name.startswith("nvidia.com/"):
                total[name] += int(str(value))
    for container in pod_spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name.startswith("nvidia.com/"):
                total[name] = max(total[name], int(str(value)))
    return total


def gpu_model_of(queue_workload: Mapping, product_labels: Mapping[str, str]) -> str:
    """The catalog model a Kueue Workload runs on: the flavor Kueue admitted it to (flavors are
    named after models, `reconcile/specs.flavor_name`), else the product its pods select (GFD's
    label; `product_labels`: the platform's overrides, catalog key -> product)."""
    keys = {key.lower(): key for key in facts.load_catalog()}
    admission = (queue_workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        for flavor in (assignment.get("flavors") or {}).values():
            if flavor in keys:
                return keys[flavor]
    for ps in (queue_workload.get("spec") or {}).get("podSets") or []:
        selector = ((ps.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        model = facts.model_for_product_label(selector.get(GPU_PRODUCT_LABEL, ""), product_labels)
        if model is not None:
            return model.key
    return ""


def asked(queue_workload: Mapping, product_labels: Mapping[str, str]) -> Asked:
    """What a Kueue Workload asks for: its pods (all pod sets), the GPU units per pod by
    resource class (of its largest pod set), its model, image and priority."""
    sets = (queue_workload.get("spec") or {}).get("podSets") or []
    model = gpu_model_of(queue_workload, product_labels)
    pods = sum(int(ps.get("count", 1)) for ps in sets)
    per_pod: dict[str, int] = {}
    image, priority = "", ""
    labels: dict[str, str] = {}
    for ps in sets:
        template = ps.get("template") or {}
        spec = template.get("spec") or {}
        units = class_units(model, dict(_requests(spec)), "", "") if model else {}
        if sum(units.values()) >= sum(per_pod.values()):
            per_pod = units
        containers = spec.get("containers") or [{}]
        image = image or containers[0].get("image", "")
        priority = priority or spec.get("priorityClassName", "")
        labels = labels or dict((template.get("metadata") or {}).get("labels") or {})
    priority = (queue_workload.get("spec") or {}).get("priorityClassName") or priority
    return Asked(pods, per_pod, model, image, priority, labels)


def own_pods(owner_kind: str, name: str, uid: str, pods: Iterable[Mapping]) -> list[dict]:
    """The pods of a top-level object, from its namespace's pods."""
    out = []
    for pod in pods:
        if owner_of_pod(pod) == Owner(owner_kind, name, _meta(pod).get("namespace", "")):
            out.append(dict(pod))
            continue
        labels = _meta(pod).get("labels") or {}
        if owner_kind == "Job" and uid and any(labels.get(k) == uid for k in JOB_UID_LABELS):
            out.append(dict(pod))
    return out


def own_queue_workloads(
    owner_kind: str, uid: str, pods: list[dict], queue_workloads: Iterable[Mapping]
) -> list[dict]:
    """Kueue's Workloads of a top-level object, newest first: those labelled with its uid or
    owned by it, or owned by its pods."""
    pod_uids = {_meta(p).get("uid") for p in pods}
    mine = [
        dict(w)
        for w in queue_workloads
        if (_meta(w).get("labels") or {}).get(KUEUE_JOB_UID_LABEL) == uid
        or any(
            r.get("uid") == uid or (r.get("kind") == "Pod" and r.get("uid") in pod_uids)
            for r in _meta(w).get("ownerReferences") or []
        )
    ]
    return sorted(mine, key=lambda w: _meta(w).get("creationTimestamp") or "", reverse=True)


def as_job(owner_kind: str, obj: dict | None) -> dict | None:
    """A bare pod or a framework's object read as a Job reads (conditions `Complete` and
    `Failed`, `spec.suspend`), so one observation serves every kind that runs to an end."""
    if obj is None or owner_kind == "Job":
        return obj
    status = obj.get("status") or {}
    conditions = [dict(c) for c in status.get("conditions") or []]
    spec = obj.get("spec") or {}
    if owner_kind == "Pod":  # waiting behind Kueue's gate: suspended, as Kueue keeps a Job
        gates = {g.get("name") for g in spec.get("schedulingGates") or []}
        spec = {**spec, "suspend": KUEUE_GATE in gates}
        phase = status.get("phase")
        conditions = [
            {"type": t, "status": "True", "reason": status.get("reason") or t}
            for t, p in (("Complete", "Succeeded"), ("Failed", "Failed"))
            if phase == p
        ]
    for c in conditions:  # JobSet and others say Completed; Failed is Failed
        if c.get("type") in ("Completed", "Succeeded"):
            c["type"] = "Complete"
    return {**obj, "spec": spec, "status": {**status, "conditions": conditions}}
