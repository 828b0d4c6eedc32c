"""The queue guard's rules for a team's own device claims (Dynamic Resource Allocation): what a
member may write in a ResourceClaim or ResourceClaimTemplate so that every GPU device it can
spend is one Kueue charges to the team's grant.

Kueue v0.19 charges a claim's `exactly` request of a class it maps (`deviceClassMappings`:
`mig.nvidia.com`, `gpu.nvidia.com`) in multiprocessors, times its count. It cannot charge
`allocationMode: All` (every matching device of a node), admin access (which ignores every other
allocation of the device), `firstAvailable` alternatives of a counter-backed class, or a class it
does not map (`vfio.gpu.nvidia.com`). Kueue leaves such a workload inadmissible today, and the
namespace's ResourceQuota counts only the mapped classes; the guard refuses the claim itself,
at kubectl time and in words that say what to do, so no change of Kueue's (a newer claims.go
already admits admin access at no charge) or of the quota spends a GPU outside the grant.

A VAP cannot read DeviceClasses: the driver's classes are known by name (those its chart
installs, and any named under the driver, `*.gpu.nvidia.com`). A class a platform makes itself
over the driver's devices under another name is not seen: map it, or do not make it.

ResourceClaim and ResourceClaimTemplate specs are immutable, so the rules look at CREATE only:
an update (a finalizer the claim controller removes) never carries a new request. Pure."""

from __future__ import annotations

from catalog.dra_devices import DRIVER, GPU_CLASS, MAPPED_CLASSES, MIG_CLASS, VFIO_CLASS
from scheduler.cluster.render.admission import cel_list

CLAIM_RULE = {
    "apiGroups": ["resource.k8s.io"],
    "apiVersions": ["v1"],
    "operations": ["CREATE"],
    "resources": ["resourceclaims", "resourceclaimtemplates"],
}
# The classes NVIDIA's DRA driver chart installs for GPUs (dra-driver-nvidia-gpu, deployments/
# helm/.../deviceclass-*.yaml); any other class named under the driver counts as one too.
GPU_DRIVER_CLASSES = (GPU_CLASS, MIG_CLASS, VFIO_CLASS)


def _gpu_class(name: str) -> str:
    """CEL: the class `name` (a string expression) is one of the GPU driver's."""
    return f"({name} in {cel_list(GPU_DRIVER_CLASSES)} || {name}.endsWith('.{DRIVER}'))"


def _each_request(each: str) -> str:
    """CEL: `each` (about a device request `r`) holds for every request of a ResourceClaim's
    spec, or of a ResourceClaimTemplate's `spec.spec`; other kinds pass."""

    def over(devices: str) -> str:
        return f"(!has({devices}) || !has({devices}.requests) || {devices}.requests.all(r, {each}))"

    return (
        f"request.kind.kind == 'ResourceClaim' ? {over('object.spec.devices')} : "
        f"(request.kind.kind != 'ResourceClaimTemplate' || {over('object.spec.spec.devices')})"
    )


def claim_validations() -> list[dict]:
    """The queue guard's validations for claims and claim templates (their resource rule:
    `CLAIM_RULE`)."""
    exactly = "r.exactly"
    mapped = ", ".join(MAPPED_CLASSES)
    templates = "one of the team's templates (kubectl get resourceclaimtemplates)"
    return [
        {
            "expression": _each_request(
                f"!has({exactly}) || !has({exactly}.allocationMode) || "
                f"{exactly}.allocationMode != 'All' || "
                f"!{_gpu_class(f'{exactly}.deviceClassName')}"
            ),
            "message": "device claims in team namespaces may not ask for every GPU device of "
            "a node (allocationMode: All): Kueue cannot charge it to the team's grant; ask for "
            f"a count of devices (allocationMode: ExactCount), or name {templates}",
        },
        {
            # Kubernetes also wants the namespace label resource.kubernetes.io/admin-access,
            # which the portal never sets; the guard holds whatever the labels say.
            "expression": _each_request(
                f"!has({exactly}) || !has({exactly}.adminAccess) || !{exactly}.adminAccess"
            ),
            "message": "device claims in team namespaces may not ask for admin access "
            "(adminAccess): it reaches devices other pods hold, outside any grant",
        },
        {
            "expression": _each_request(
                "!has(r.firstAvailable) || "
                f"!r.firstAvailable.exists(s, {_gpu_class('s.deviceClassName')})"
            ),
            "message": "device requests in team namespaces may not list alternatives "
            "(firstAvailable) of GPU classes: Kueue charges one exact request; ask for one "
            f"profile with exactly, or name {templates}",
        },
        {
            "expression": _each_request(
                f"!has({exactly}) || !{_gpu_class(f'{exactly}.deviceClassName')} || "
                f"{exactly}.deviceClassName in {cel_list(MAPPED_CLASSES)}"
            ),
            "message": f"device claims in team namespaces may name only the GPU classes "
            f"Kueue charges ({mapped}): the driver's other classes ({VFIO_CLASS}, ...) are "
            "outside the team's grant",
        },
    ]
