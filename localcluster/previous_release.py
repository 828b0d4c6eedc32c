"""The previous release's stack, for the upgrade tests (tests/upgrade/): the portal's main before
Kubernetes 1.36 and Kueue 0.19 ran Kueue v0.17.0, and its chart was installed with Helm 3
(v3.22.0 then, which is not approved for use here; v3.21.4 is the Helm 3 that is). Built like
the rest, into their own cache folders, only when an upgrade test asks for them.

`run_previous_kueue` swaps the running local cluster's Kueue for v0.17.0 (its CRDs, webhooks and
process, with the settings that release ran); the next `cluster.up()` upgrades it back to the
checkout's Kueue exactly as an upgrade of a real install does: the new CRDs and webhook
configurations applied over the old, the old controller stopped, the new one started on the
objects the old one made. The Kubernetes upgrade itself (one minor at a time on a real cluster)
is Kubernetes' to keep: its built-in objects are not re-made here.
"""

from __future__ import annotations

from pathlib import Path

from . import build, cluster, kueue
from .components import Component, component_specs

KUEUE_VERSION = "v0.17.0"
# What the previous release passed (localcluster/kueue.py then): v0.17 knows neither
# UnadmittedWorkloadsObservability nor the TAS gates v0.19 checks.
KUEUE_FEATURE_GATES = (
    "TopologyAwareScheduling=false,TASProfileMixed=false,MultiKueue=false,"
    "VisibilityOnDemand=false,SchedulingEquivalenceHashing=true"
)
HELM_VERSION = "v3.21.4"
HELM_K8S_MINOR = "36"  # helm v3.21.4's go.mod: k8s.io/client-go v0.36.2


def _helm3_ldflags() -> str:
    # As helm 3's Makefile: the Kubernetes version `helm template` and `helm lint` assume is the
    # one of its client-go, not the v1.20 fallback.
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={HELM_K8S_MINOR}"]
    return " ".join(flags)


def components() -> list[build.Component]:
    return [
        build.kueue_component(KUEUE_VERSION, go_version="1.25.0"),
        build.Component(
            tag=f"helm-{HELM_VERSION}",
            module="helm.sh/helm/v3",
            version=HELM_VERSION,
            packages={"helm": "helm.sh/helm/v3/cmd/helm"},
            ldflags=_helm3_ldflags(),
        ),
    ]


def kueue_build() -> build.Component:
    return components()[0]


def ensure_built() -> dict[str, Path]:
    """{"kueue": Kueue v0.17.0, "helm": Helm v3.21.4}, built on first use."""
    comps = components()
    build.build_missing(comps)
    return {name: build.bin_dir(c) / name for c in comps for name in c.packages}


def run_previous_kueue() -> None:
    """Stop the cluster's Kueue and run the previous release's in its place (on a running
    cluster). `cluster.up()` brings the checkout's back."""
    binary = ensure_built()["kueue"]
    current = next(c for c in component_specs(build.binaries()) if c.name == "kueue")
    cluster.stop(current)
    api = cluster.api_client()
    try:
        kueue.prepare(api, comp=kueue_build())
        # the previous release served no model through DRA: v0.17 refuses the mapping
        kueue.publish_config(api, kueue.write_config(dra=False))
    finally:
        api.close()
    previous = Component(
        "kueue", kueue.argv(binary, feature_gates=KUEUE_FEATURE_GATES), env=kueue.env()
    )
    cluster.log(f"starting Kueue {KUEUE_VERSION} (the previous release's)")
    proc = cluster.start(previous)
    cluster.wait_until("Kueue /readyz", kueue.ready, previous, 120, proc)
    cluster.wait_until("Kueue's resources listed", kueue.storage_ready, previous, 60)
