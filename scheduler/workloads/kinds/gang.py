"""A gang: a job of N pods of one shape that are admitted, started and stopped together (multi-node
training: torchrun, DeepSpeed, MPI). Pure: typed input in, dicts out, no Django, no I/O.

The model (docs/distributed.md): an Indexed Job (`completionMode: Indexed`, parallelism =
completions = N) and a headless Service named like it. Kueue's batch/job integration already
admits such a Job as one Workload with one pod set of count N: quota for all N pods is reserved
at once or not at all, so no new controller (JobSet, a training operator) has to be built and
run. Each pod gets a stable DNS name, `<job>-<index>.<service>`, and the rendezvous a framework
reads from its environment: index 0 is the master.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from scheduler.workloads.kinds import topology
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL, ManifestSpec, workload_labels

# torchrun's default rendezvous port (and MPI's launcher is told it the same way).
MASTER_PORT = 29500
# Kueue's reason (on the Workload's Evicted condition) for a workload whose pods were not all
# ready within waitForPodsReady's timeout.
PODS_READY_TIMEOUT = "PodsReadyTimeout"
# The Job controller's annotation (and env JOB_COMPLETION_INDEX) of an Indexed Job's pod.
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


# A gang some of whose pods run while the others cannot be placed (Kueue admitted it on quota,
# the scheduler finds no node for the rest): it waits, holding what it was admitted with.
INCOMPLETE = "GangIncomplete"


@dataclass(frozen=True)
class Short:
    needed: int  # pods it needs running now
    waiting: list[dict]  # its pods not placed or not started yet


# What a short gang's row says, written here and read back here (the row keeps only words):
# "1 of 2 pods running; the job waits until every pod is placed: <reason> (<message>)".
_SHORT = re.compile(
    r"^(?P<running>\d+) of (?P<needed>\d+) pods running;[^:]*(?::\s*(?P<reason>\w+)"
    r"(?:\s*\((?P<message>.*)\))?)?$",
    re.S,
)


@dataclass(frozen=True)
class ShortSaid:
    running: int
    needed: int
    reason: str  # why the pods that wait wait (the scheduler's or the kubelet's), or ""
    message: str


def short_message(running: int, needed: int, reason: str = "", message: str = "") -> str:
    said = f": {reason}" + (f" ({message})" if message else "") if reason else ""
    return f"{running} of {needed} pods running; the job waits until every pod is placed{said}"


def read_short(message: str) -> ShortSaid | None:
    """`short_message` read back, or None for any other message."""
    found = _SHORT.match(message or "")
    if found is None:
        return None
    return ShortSaid(
        int(found["running"]), int(found["needed"]), found["reason"] or "", found["message"] or ""
    )


def short_of(job: dict, pods: list[dict], running: int) -> Short | None:
    """A Job of several pods started together with fewer running than it needs while the rest
    wait (a gang runs only whole), else None. Pods already done count out of what it needs."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism") or 1)
    if parallelism < 2:
        return None
    done = int((job.get("status") or {}).get("succeeded") or 0)
    completions = spec.get("completions")
    needed = min(parallelism, int(completions) - done) if completions is not None else parallelism
    waiting = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
    if running >= needed or not waiting:
        return None
    return Short(needed, waiting)


def is_gang(spec: ManifestSpec) -> bool:
    """A job of more than one pod (a deployment's replicas are not a gang)."""
    return spec.kind == "job" and spec.replicas > 1


def service_name(spec: ManifestSpec) -> str:
    """The headless Service of a gang: named like its Job (both are DNS labels)."""
    return spec.name


def master_addr(spec: ManifestSpec) -> str:
    """Index 0's stable name: the Indexed Job's pod hostname under the Service's subdomain."""
    return f"{spec.name}-0.{service_name(spec)}"


def procs_per_pod(spec: ManifestSpec) -> int:
    """One process per GPU device the pod holds (a whole GPU, a MIG instance or a replica)."""
    return max(1, sum(spec.gpus.values()))


def rendezvous_env(spec: ManifestSpec) -> list[dict]:
    """The env each pod of a gang gets: the names torchrun reads (`PET_*` stand for its
    `--nnodes`, `--node-rank`, `--nproc-per-node`, `--master-addr`, `--master-port` flags, so a
    bare `torchrun train.py` joins the gang) and the plain ones (MASTER_ADDR, WORLD_SIZE = pods,
    RANK = the pod's index) that a one-process-per-pod launcher or MPI wrapper reads. A name the
    workload's own env sets is left to it."""
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    plain = {
        "MASTER_ADDR": master_addr(spec),
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(spec.replicas),
        "NNODES": str(spec.replicas),
        "NPROC_PER_NODE": str(procs_per_pod(spec)),
    }
    ranked = ("RANK", "NODE_RANK")
    out: list[dict] = []
    for name, value in plain.items():
        out.append({"name": name, "value": value})
    for name in ranked:
        out.append({"name": name, "valueFrom": index})
    for name in ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE"):
        out.append({"name": f"PET_{name}", "value": plain[name]})
    out.append({"name": "PET_NODE_RANK", "valueFrom": index})
    return [e for e in out if e["name"] not in spec.env]


def gang_template(spec: ManifestSpec, template: dict) -> dict:
    """`template` (the pod every kind runs) as a gang's pod: under the Service's subdomain, with
    the rendezvous env first (the workload's own env after it), kept in one rack (or block) by
    pod affinity when the job asked (`topology.py`)."""
    pod = dict(template["spec"])
    pod["subdomain"] = service_name(spec)
    if spec.topology_key:
        placement = topology.Placement("", spec.topology_key, spec.topology_required)
        affinity = topology.pod_affinity(placement, spec.workload_id)
        pod["affinity"] = {**(pod.get("affinity") or {}), "podAffinity": affinity}
    (container, *others) = pod["containers"]
    container = {**container, "env": [*rendezvous_env(spec), *container.get("env", [])]}
    pod["containers"] = [container, *others]
    return {**template, "spec": pod}


def gang_job_fields(spec: ManifestSpec) -> dict:
    """What makes a Job a gang: N indexed pods, all running at once. Kueue reserves quota for
    all N (one pod set of count N) and unsuspends the Job only then."""
    return {"completionMode": "Indexed", "completions": spec.replicas, "parallelism": spec.replicas}


def render_gang_service(spec: ManifestSpec, *, owner_uid: str) -> dict:
    """The headless Service that gives a gang's pods their names. Owned by the Job (`owner_uid`),
    so deleting the Job (cancel, clean-up) deletes it too. Not-ready addresses are published:
    workers resolve the master while it is still starting."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(spec),
            "namespace": spec.namespace,
            "labels": workload_labels(spec),
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": spec.name, "uid": owner_uid}
            ],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {WORKLOAD_LABEL: str(spec.workload_id)},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def not_ready_in_time(evictions: int | None, requeue_at: datetime | None) -> str:
    """What the page of a workload Kueue evicted for want of all its pods running within the
    ready timeout says (`waitForPodsReady`, kueue_config.PodsReady): it holds no quota now."""
    again = f"; it may be admitted again from {requeue_at:%H:%M:%S} UTC" if requeue_at else ""
    times = f" (eviction {evictions})" if evictions else ""
    return (
        "not all of its pods were running within the ready timeout, so Kueue stopped every pod "
        f"and freed its quota{times}; queued again{again}"
    )


def evicted_whole(pods: int, message: str) -> str:
    """What a preempted gang's page says: Kueue evicts its one Workload, so every pod stopped."""
    return (
        f"the whole gang of {pods} pods was evicted together (Kueue preempts it as one): {message}"
    )


def pool_refusal(*, pods: int, per_pod: int, capacity: int, unit: str, pool: str) -> str | None:
    """Why a gang of `pods` pods of `per_pod` units each can never run in a pool of `capacity`
    units in all (its every node, every team's grant), else None: no grant or borrowing helps,
    only fewer pods or a smaller shape. Pure arithmetic."""
    need = pods * per_pod
    if need <= capacity:
        return None
    most = capacity // per_pod
    fewer = f"at most {most} pods of this shape" if most else "not one pod of this shape"
    return (
        f"{pods} pods × {per_pod} {unit} = {need} {unit}, but the {pool} pool holds {capacity} "
        f"in all: {fewer} can ever run at once; ask for fewer pods or a smaller shape per pod"
    )
