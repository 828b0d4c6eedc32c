"""Which of Kueue's job integrations ("frameworks") the portal enables: the setting
`KUEUE_INTEGRATIONS` names them, Kueue's Configuration lists them (`integrations.frameworks`,
kueue_config.py), and a team's Role lets its members create the kinds they queue.

Four are built on Kubernetes' own kinds (always served). The others are custom resources of
another project (JobSet, Kubeflow's training operator and trainer, KubeRay, LeaderWorkerSet):
they work only where the platform team installed it. A framework whose CRD the cluster lacks is
reported and its kind is not given to teams (scheduler/cluster/kueue_settings.py): reported,
not half-enabled. Names as Kueue v0.19 spells them (each integration's `FrameworkName`).

Pure: the portal's settings and the local cluster (which runs no Django) both read it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ENV = "KUEUE_INTEGRATIONS"  # the portal's setting and the local cluster read the same name


@dataclass(frozen=True)
class Framework:
    name: str  # Kueue's name, e.g. "jobset.x-k8s.io/jobset"
    group: str  # the API group of the kind it queues ("" is the core group)
    resource: str  # that kind's resource (plural)
    builtin: bool = False  # one of Kubernetes' own kinds: no CRD to look for

    @property
    def crd(self) -> str:
        """Its CustomResourceDefinition's name (<plural>.<group>)."""
        return f"{self.resource}.{self.group}"


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework("batch/job", "batch", "jobs", builtin=True),
        Framework("pod", "", "pods", builtin=True),
        Framework("deployment", "apps", "deployments", builtin=True),
        Framework("statefulset", "apps", "statefulsets", builtin=True),
        Framework("jobset.x-k8s.io/jobset", "jobset.x-k8s.io", "jobsets"),
        Framework("kubeflow.org/mpijob", "kubeflow.org", "mpijobs"),
        Framework("kubeflow.org/pytorchjob", "kubeflow.org", "pytorchjobs"),
        Framework("kubeflow.org/tfjob", "kubeflow.org", "tfjobs"),
        Framework("kubeflow.org/paddlejob", "kubeflow.org", "paddlejobs"),
        Framework("kubeflow.org/xgboostjob", "kubeflow.org", "xgboostjobs"),
        Framework("kubeflow.org/jaxjob", "kubeflow.org", "jaxjobs"),
        Framework("trainer.kubeflow.org/trainjob", "trainer.kubeflow.org", "trainjobs"),
        Framework("ray.io/rayjob", "ray.io", "rayjobs"),
        Framework("ray.io/raycluster", "ray.io", "rayclusters"),
        Framework(
            "leaderworkerset.x-k8s.io/leaderworkerset",
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
        ),
    )
}
DEFAULT: tuple[str, ...] = ("batch/job", "pod", "deployment", "statefulset")
# The local cluster runs JobSet's controller too (localcluster/jobset.py): its portal and its
# Kueue enable it unless KUEUE_INTEGRATIONS says otherwise.
LOCAL_CLUSTER: tuple[str, ...] = (*DEFAULT, "jobset.x-k8s.io/jobset")
# What the portal itself submits (Jobs, Deployments) and what a team may create bare (Pods):
# without them those would run beside the queue, not through it.
REQUIRED: tuple[str, ...] = ("batch/job", "pod", "deployment")


def parse(raw: str) -> tuple[str, ...]:
    """The names of a comma-separated list, in order, each once."""
    names = (part.strip() for part in raw.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


def from_env(
    environ: Mapping[str, str], default: tuple[str, ...] = LOCAL_CLUSTER
) -> tuple[str, ...]:
    """`KUEUE_INTEGRATIONS` as the local cluster reads it (unset or empty: `default`)."""
    return parse(environ.get(ENV) or "") or default


def problems(names: Iterable[str]) -> list[str]:
    """What is wrong with a list of integrations, one line each (pure)."""
    names = tuple(names)
    out = [
        f"{name!r} is not a Kueue integration the portal knows"
        for name in names
        if name not in FRAMEWORKS
    ]
    out += [
        f"{name!r} is missing: the portal's own workloads would run beside the queue"
        for name in REQUIRED
        if name not in names
    ]
    return out


def optional(names: Iterable[str]) -> tuple[Framework, ...]:
    """The enabled frameworks that are custom resources (whose CRD must be on the cluster)."""
    return tuple(FRAMEWORKS[n] for n in names if n in FRAMEWORKS and not FRAMEWORKS[n].builtin)


def role_apis(names: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(API group, resources) that members may write for the custom-resource frameworks among
    `names` (the built-in kinds are in the Role anyway), by group, sorted."""
    by_group: dict[str, set[str]] = defaultdict(set)
    for framework in optional(names):
        by_group[framework.group].add(framework.resource)
    return tuple((group, tuple(sorted(by_group[group]))) for group in sorted(by_group))
