"""What the portal needs of Kueue's own Configuration, as one fragment: the local cluster's
Kueue runs with it, `manage.py kueue_config` prints it for a real install (merged into
Kueue's Helm value `managerConfig.controllerManagerConfigYaml`; docs/deploy.md), the chart ships
it, and the portal checks the running Kueue against it (scheduler/cluster/kueue_settings.py).

- whoever submits goes through the queue: Kueue manages every workload in a team namespace,
  with or without a queue label (`manageJobsWithoutQueueName`), in team namespaces only
  (`managedJobsNamespaceSelector`: the label the portal sets on them, so a Kueue outage never
  blocks pods in kube-system), for every kind teams may create (`integrations.frameworks`,
  the setting `KUEUE_INTEGRATIONS`, kueue_integrations.py);
- grants in GPU-equivalent slices (`GPU_QUOTA_UNIT=slices`): every GPU resource counted as its
  compute slices through `resources.transformations`; with `class` there are none, and each
  resource name keeps its own quota line;
- fair sharing: idle capacity goes to the queue with the lowest weighted share (each
  ClusterQueue's `spec.fairSharing.weight`, the team's weight in the portal), and a preemption
  must leave the preemptor's share no higher than the victim's;
- a client rate that does not throttle a deep queue: every admission and every failed head is
  a status write (client-go's default 20/30 per second is reached long before the API server
  is busy), and SchedulingEquivalenceHashing (beta, on by default since v0.18; stated so that a
  Kueue whose default moves keeps it), with which a head that cannot be admitted marks the
  queued workloads of the same shape inadmissible too, so a deep queue of equal asks costs one
  attempt per cycle, not one per workload (kueue#9694);
- Kueue's own reasons for a workload it has not admitted (`UnadmittedWorkloadsObservability`,
  beta but off by default in v0.19): `WaitingForQuota`, `ExceedsMaxQuota`, `NoMatchingFlavor`,
  ... on its `QuotaReserved` condition, which "why it waits" reads (workloads/waiting.py);
- GPU models served through DRA (`GPU_DRA_MODELS`, catalog/dra_quota.py): their MIG devices and
  whole GPUs charged in multiprocessors through `resources.deviceClassMappings` (Kueue v0.19's
  counter sources), one quota line per model as the slices are;
- all or nothing for a gang (`waitForPodsReady`, docs/distributed.md): a workload whose pods are
  not all ready within the timeout after admission is evicted, frees its quota and is requeued
  after a backoff that doubles from a base up to a maximum, so no partial gang holds GPUs; the
  platform team sets the numbers (settings `KUEUE_PODS_READY_*`, `PodsReady.from_env`).
  Since v0.19 Kueue waits for pods ready by default (30 min) when its Configuration says
  nothing; the portal always states the section, so its numbers are chosen, never inherited.
- on a fleet's manager only (`multikueue`): MultiKueue's incremental dispatcher, which nominates
  workers in each MultiKueueConfig's `spec.clusters` order (the platform's order of
  preference), `step` of them per five-minute round; its gates stated, as above.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from catalog import dra_devices, kueue_integrations, slices

CLIENT_QPS = 200
CLIENT_BURST = 400
FEATURE_GATES = {"SchedulingEquivalenceHashing": True, "UnadmittedWorkloadsObservability": True}
FAIR_SHARING_PREEMPTION = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
# MultiKueue (v0.19): without RespectConfigOrder the incremental dispatcher nominates workers
# alphabetically; both gates are Beta and on in v0.19.0-v0.19.2, absent before (a gate Kueue
# does not know stops its start: the manager needs v0.19).
MULTIKUEUE_DISPATCHER = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
MULTIKUEUE_GATES = {
    "MultiKueue": True,
    "MultiKueueIncrementalDispatcherConfig": True,
    "MultiKueueIncrementalDispatcherRespectConfigOrder": True,
}
DEFAULT_DISPATCH_STEP = 3  # Kueue's own default: the first three workers at once

# Set by the portal on every tenant namespace (scheduler/cluster/render/namespace.py); a team
# cannot edit its namespace's labels. Kueue manages workloads only where it is, and the local
# cluster's Kueue webhooks select the same namespaces.
QUEUE_ENFORCED_LABEL = "gpu-portal.io/queue-enforced"
TENANT_SELECTOR = {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}}


# The environment names the portal's settings and the local cluster read them from.
PODS_READY_ENV = {
    "timeout_s": "KUEUE_PODS_READY_TIMEOUT_S",
    "requeue_base_s": "KUEUE_PODS_READY_REQUEUE_BASE_S",
    "requeue_max_s": "KUEUE_PODS_READY_REQUEUE_MAX_S",
    "requeue_limit": "KUEUE_PODS_READY_REQUEUE_LIMIT",
    "block_admission": "KUEUE_PODS_READY_BLOCK_ADMISSION",
}


@dataclass(frozen=True)
class PodsReady:
    """Kueue's waitForPodsReady as the platform team sets it. `timeout_s`: how long an admitted
    workload's pods have to be all ready (also how long a gang may run short of a pod before
    it is evicted whole: Kueue's recoveryTimeout defaults to it); `requeue_base_s` and
    `requeue_max_s`: the backoff before an evicted workload may be admitted again (doubling);
    `requeue_limit`: evictions after which Kueue deactivates it (None: requeue for ever);
    `block_admission`: admit nothing more cluster-wide while an admitted workload's pods are not
    all ready (off by default: one slow gang would stop every team; Kueue then says
    `WaitingForPodsReady` of what waits)."""

    timeout_s: int = 300
    requeue_base_s: int = 60
    requeue_max_s: int = 3600
    requeue_limit: int | None = None
    block_admission: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> PodsReady:
        """The numbers from `PODS_READY_ENV` names (defaults for those unset; an empty limit is
        none). A value that is not a whole number ≥ 0 (≥ 1 for the timeout) raises ValueError."""
        values: dict = {}
        for field, name in PODS_READY_ENV.items():
            raw = (environ.get(name) or "").strip()
            if not raw:
                continue
            if field == "block_admission":
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(f"{name}={raw}: say true or false")
                values[field] = raw.lower() in ("true", "1")
                continue
            number = int(raw)
            if number < (1 if field == "timeout_s" else 0):
                raise ValueError(f"{name}={raw}: too small")
            values[field] = number
        return cls(**values)

    def kueue(self) -> dict:
        strategy: dict = {
            "timestamp": "Eviction",
            "backoffBaseSeconds": self.requeue_base_s,
            "backoffMaxSeconds": self.requeue_max_s,
        }
        if self.requeue_limit is not None:
            strategy["backoffLimitCount"] = self.requeue_limit
        # blockAdmission off by default: on, one gang waiting for its pods would stop every
        # team's admissions cluster-wide until it is ready or evicted.
        return {
            "timeout": f"{self.timeout_s}s",
            "blockAdmission": self.block_admission,
            "requeuingStrategy": strategy,
        }


def kueue_configuration(
    unit: str,
    *,
    feature_gates: bool = True,
    pods_ready: PodsReady | None = None,
    integrations: Sequence[str] = kueue_integrations.DEFAULT,
    dra_models: Sequence[str] = (),
    product_overrides: Mapping[str, str] | None = None,
    multikueue: int | None = None,
    worker_lost_s: int | None = None,
) -> dict:
    """The Configuration keys the portal relies on. `feature_gates=False` leaves the gates out
    for a Kueue that takes them by flag (a flag and the config's `featureGates` together are a
    start-up error). `pods_ready`: the platform team's waitForPodsReady (the defaults without).
    `integrations`: Kueue's frameworks (`KUEUE_INTEGRATIONS`). `dra_models`: the models served
    through DRA (`GPU_DRA_MODELS`), matched by product label (`product_overrides`: the platform's
    `GPU_PRODUCT_LABELS`). `multikueue`: on a fleet's manager, the dispatcher's step (workers
    nominated per round); None on any other cluster. `worker_lost_s`: how long MultiKueue keeps
    a workload on a worker it has lost before it requeues it (None: Kueue's 15 minutes)."""
    out: dict = {
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": copy.deepcopy(TENANT_SELECTOR),
        "integrations": {"frameworks": list(integrations)},
        "clientConnection": {"qps": CLIENT_QPS, "burst": CLIENT_BURST},
        "fairSharing": {"preemptionStrategies": list(FAIR_SHARING_PREEMPTION)},
        "waitForPodsReady": (pods_ready or PodsReady()).kueue(),
    }
    if unit == slices.UNIT_SLICES:
        out["resources"] = {"transformations": slices.kueue_transformations()}
    if dra_models:
        out.setdefault("resources", {})["deviceClassMappings"] = dra_devices.device_class_mappings(
            dra_models, product_overrides
        )
    if multikueue is not None:
        out["multiKueue"] = multikueue_section(multikueue, worker_lost_s)
    if feature_gates:
        out["featureGates"] = dict(FEATURE_GATES)
        if multikueue is not None:
            out["featureGates"].update(MULTIKUEUE_GATES)
    return out


def multikueue_section(step: int = DEFAULT_DISPATCH_STEP, worker_lost_s: int | None = None) -> dict:
    """Kueue's `multiKueue` for the incremental dispatcher; `step` ≥ 1 (1: strictly one worker
    at a time in the platform's order, five minutes each before the next is tried).
    `worker_lost_s` ≥ 1: MultiKueue's `workerLostTimeout`, after which work on a worker that
    does not answer is evicted and queued again (Kueue's rule; omitted: its 15 minutes)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"the dispatch step {step!r} must be a whole number of at least 1")
    out: dict = {
        "dispatcherName": MULTIKUEUE_DISPATCHER,
        "incrementalDispatcherConfig": {"stepSize": step},
    }
    if worker_lost_s is not None:
        if (
            isinstance(worker_lost_s, bool)
            or not isinstance(worker_lost_s, int)
            or worker_lost_s < 1
        ):
            raise ValueError(
                f"the worker-lost timeout {worker_lost_s!r} must be whole seconds, at least 1"
            )
        out["workerLostTimeout"] = f"{worker_lost_s}s"
    return out
