"""What the portal needs of Kueue's own Configuration, as one fragment: the local cluster's
Kueue runs with it, and `manage.py kueue_config` prints it for a real install (merged into
Kueue's Helm value `managerConfig.controllerManagerConfigYaml`; docs/deploy.md).

- grants in GPU-equivalent slices (`GPU_QUOTA_UNIT=slices`): every GPU resource counted as its
  compute slices through `resources.transformations`; with `class` there are none, and each
  resource name keeps its own quota line;
- fair sharing: idle capacity goes to the queue with the lowest weighted share (each
  ClusterQueue's `spec.fairSharing.weight`, the team's weight in the portal), and a preemption
  must leave the preemptor's share no higher than the victim's;
- a client rate that does not throttle a deep queue: every admission and every failed head is
  a status write (client-go's default 20/30 per second is reached long before the API server
  is busy), and SchedulingEquivalenceHashing (beta, off by default in v0.17), with which a head
  that cannot be admitted marks the queued workloads of the same shape inadmissible too, so a
  deep queue of equal asks costs one attempt per cycle, not one per workload (kueue#9694).
"""

from __future__ import annotations

from scheduler.catalog import slices

CLIENT_QPS = 200
CLIENT_BURST = 400
FEATURE_GATES = {"SchedulingEquivalenceHashing": True}
FAIR_SHARING_PREEMPTION = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def kueue_configuration(unit: str, *, feature_gates: bool = True) -> dict:
    """The Configuration keys the portal relies on. `feature_gates=False` leaves the gates out
    for a Kueue that takes them by flag (a flag and the config's `featureGates` together are a
    start-up error)."""
    out: dict = {
        "clientConnection": {"qps": CLIENT_QPS, "burst": CLIENT_BURST},
        "fairSharing": {"preemptionStrategies": list(FAIR_SHARING_PREEMPTION)},
    }
    if unit == slices.UNIT_SLICES:
        out["resources"] = {"transformations": slices.kueue_transformations()}
    if feature_gates:
        out["featureGates"] = dict(FEATURE_GATES)
    return out
