"""The queue guard: a ValidatingAdmissionPolicy (and its binding) for tenant namespaces that
closes what Kueue alone leaves open to a team member, written as CEL built by small helpers."""

from __future__ import annotations

from core.images import Spellings
from scheduler.cluster.render.access import ROBOT_SERVICE_ACCOUNT
from scheduler.cluster.render.admission import cel_list, not_trusted, tenant_policy
from scheduler.cluster.render.device_guard import CLAIM_RULE, claim_validations
from scheduler.cluster.render.labels import (
    HEALTH_TAINT_KEY,
    LOCAL_QUEUE,
    QUEUE_PRIORITY_LABEL,
)

QUEUE_GUARD = "gpu-portal-queue-guard"
GPU_RESOURCE_PREFIX = "nvidia.com/"  # whole GPUs, MIG slices and shared replicas alike
# What the NVIDIA container toolkit reads from a container's environment: set by the device
# plugin for the GPUs a pod is given, never by a team (a CPU pod naming them could see every GPU
# of its node where the toolkit honours the variable).
NVIDIA_ENV_PREFIX = "NVIDIA_"
# What the queue guard's pod rules look at; it also sees Secrets and Services (rules of theirs).
POD_KINDS = ("Pod", "Job", "CronJob", "Deployment", "ReplicaSet", "StatefulSet")


def _for_pods(expression: str) -> str:
    """CEL: `expression` holds for the kinds that carry pods; other kinds pass."""
    return f"!(request.kind.kind in {cel_list(POD_KINDS)}) || ({expression})"


def _priority_agrees(meta: str, spec: str) -> str:
    """CEL: the object's Kueue priority label, if any, names its pods' priorityClassName."""
    label = f"'{QUEUE_PRIORITY_LABEL}'"
    return (
        f"(!has({meta}.labels) || !({label} in {meta}.labels) || "
        f"(has({spec}.priorityClassName) && {meta}.labels[{label}] == {spec}.priorityClassName))"
    )


_UPDATE = "request.operation == 'UPDATE'"


def _priority_known(spec: str, old: str, classes: str) -> str:
    """CEL: the pod spec names no priority class, one of the portal's, or the one it had (an
    update that does not change it, e.g. a controller removing a finalizer, is not refused)."""
    return (
        f"(!has({spec}.priorityClassName) || {spec}.priorityClassName in [{classes}] || "
        f"({_UPDATE} && has({old}.priorityClassName) && "
        f"{old}.priorityClassName == {spec}.priorityClassName))"
    )


def _image_ok(image: str, rules: Spellings) -> str:
    """CEL: `image` (a string expression) is allowed by the allow-list's spellings."""
    terms = [f"{image} in {cel_list(rules.exact)}"]
    if rules.prefixes:
        terms.append(f"{cel_list(rules.prefixes)}.exists(p, {image}.startsWith(p))")
    if rules.any_library_short or rules.any_hub_short:
        first = f"{image}.split('/')[0]"
        no_host = f"!({first}.contains('.') || {first}.contains(':') || {first} == 'localhost')"
        terms.append(
            f"!{image}.contains('/')"
            if not rules.any_hub_short
            else f"(!{image}.contains('/') || {no_host})"
        )
    return "(" + " || ".join(terms) + ")"


def _images_allowed(spec: str, old: str, rules: Spellings) -> str:
    """CEL: every image is allowed, or was already there before this update (narrowing the
    allow-list must not refuse the updates controllers make to running pods)."""

    def each(containers: str) -> str:
        before = f"{old}.{containers}"
        kept = f"({_UPDATE} && has({before}) && {before}.exists(o, o.image == c.image))"
        return f"{spec}.{containers}.all(c, {_image_ok('c.image', rules)} || {kept})"

    return f"{each('containers')} && (!has({spec}.initContainers) || {each('initContainers')})"


def _no_health_toleration(spec: str, old: str) -> str:
    """CEL: the pod spec tolerates neither the health taint nor every taint (a key-less
    `Exists`), unless it already did before this update (a running pod's later updates)."""
    bad = (
        f"t.key == '{HEALTH_TAINT_KEY}' || ((!has(t.key) || t.key == '') "
        "&& has(t.operator) && t.operator == 'Exists')"
    )
    kept = f"({_UPDATE} && has({old}.tolerations) && {old}.tolerations.exists(t, {bad}))"
    return f"(!has({spec}.tolerations) || !{spec}.tolerations.exists(t, {bad}) || {kept})"


def _asks_gpu(spec: str) -> str:
    """CEL: a container of the pod spec asks for a GPU resource, or the pod claims a device."""
    p = f"'{GPU_RESOURCE_PREFIX}'"
    has_gpu = (
        "has(c.resources) && ("
        f"(has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith({p}))) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith({p}))))"
    )
    claims = f"(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0)"
    return f"({spec}.containers.exists(c, {has_gpu}) || {claims})"


def _reaches_gpu_nodes(spec: str, taint_keys: str) -> str:
    """CEL: the pod spec tolerates a GPU nodes' taint or selects nodes by an NVIDIA label."""
    p = f"'{GPU_RESOURCE_PREFIX}'"
    return (
        f"((has({spec}.tolerations) && {spec}.tolerations.exists(t, has(t.key) && "
        f"t.key in {taint_keys})) || (has({spec}.nodeSelector) && "
        f"{spec}.nodeSelector.exists(k, k.startsWith({p}))))"
    )


def _only_gpu_pods_reach_gpu_nodes(spec: str, old: str, taint_keys: str) -> str:
    """CEL: a pod that tolerates the GPU taint or selects GPU nodes asks for a GPU (a running
    pod's later updates pass: it was admitted before this rule)."""
    kept = f"({_UPDATE} && {_reaches_gpu_nodes(old, taint_keys)})"
    return f"(!{_reaches_gpu_nodes(spec, taint_keys)} || {_asks_gpu(spec)} || {kept})"


def _containers_all(spec: str, each: str) -> str:
    """CEL: `each` (about `c`) holds for every container and init container of the spec."""
    return (
        f"{spec}.containers.all(c, {each}) && "
        f"(!has({spec}.initContainers) || {spec}.initContainers.all(c, {each}))"
    )


def _no_nvidia_env(spec: str, old: str) -> str:
    """CEL: no container sets an NVIDIA_* variable, unless the spec had one before (updates of
    what already runs)."""
    clean = f"!has(c.env) || c.env.all(e, !e.name.startsWith('{NVIDIA_ENV_PREFIX}'))"
    kept = f"({_UPDATE} && !({_containers_all(old, clean)}))"
    return f"({_containers_all(spec, clean)} || {kept})"


def _runtime_allowed(spec: str, old: str, allowed: str) -> str:
    """CEL: no runtime class, one the platform allows, or the one it had."""
    return (
        f"(!has({spec}.runtimeClassName) || {spec}.runtimeClassName in {allowed} || "
        f"({_UPDATE} && has({old}.runtimeClassName) && "
        f"{old}.runtimeClassName == {spec}.runtimeClassName))"
    )


def _not_the_portals_account(spec: str) -> str:
    """CEL: the pod runs as none of the ServiceAccounts the portal makes (the CI robot's token
    would outlive the member who mounted it)."""
    accounts = cel_list([ROBOT_SERVICE_ACCOUNT])
    return (
        f"(!has({spec}.serviceAccountName) || !({spec}.serviceAccountName in {accounts})) && "
        f"(!has({spec}.serviceAccount) || !({spec}.serviceAccount in {accounts}))"
    )


def _per_kind(rule, template: str) -> str:
    """CEL: `rule(pod spec, its old spec)` for a Pod, a CronJob's job template and any other
    pod template."""
    cron = "spec.jobTemplate.spec.template.spec"
    return (
        f"request.kind.kind == 'Pod' ? {rule('object.spec', 'oldObject.spec')} : "
        f"request.kind.kind == 'CronJob' ? {rule(f'object.{cron}', f'oldObject.{cron}')}"
        f" : {rule(template, template.replace('object.', 'oldObject.', 1))}"
    )


def render_queue_guard(
    trusted_users: tuple[str, ...],
    priority_classes: tuple[str, ...] = (),
    images: Spellings | None = None,
    gpu_taint_keys: tuple[str, ...] = ("nvidia.com/gpu",),
    runtime_classes: tuple[str, ...] = (),
) -> list[dict]:
    """A ValidatingAdmissionPolicy (and its binding) for tenant namespaces that closes what
    Kueue alone leaves open to a team member with `edit`: a pod or pod template naming its node
    (`nodeName` skips both the scheduler and Kueue's flavors), lifting Kueue's scheduling gate
    from a pod, unsuspending a Job Kueue has not admitted, and a priority class that is not the
    portal's (`system-node-critical` would preempt every team; the portal's own classes are
    capped per team by its quotas), and an image the portal's allow-list refuses (`images`,
    the same rule as the submit path's; none when it allows any). Only pods that ask for a GPU
    may tolerate the GPU nodes' taint (`gpu_taint_keys`) or select GPU nodes; no pod sets the
    NVIDIA toolkit's variables, runs under a runtime class the platform did not allow
    (`runtime_classes`) or as the portal's CI robot; a Service is never an ExternalName and
    always selects pods; a device claim or claim template spends only GPU devices Kueue charges
    (`device_guard`). Kueue and cluster admins (`trusted_users`, `system:masters`) do these
    things legitimately."""
    taint_keys = cel_list(gpu_taint_keys)
    runtimes = cel_list(runtime_classes)
    classes = ", ".join(f"'{c}'" for c in sorted({"", *priority_classes}))
    gate = "'kueue.x-k8s.io/admission'"
    template = "object.spec.template.spec"
    resource_rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods"],
        },
        {
            "apiGroups": ["batch", "apps"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": [
                "jobs",
                "cronjobs",
                "deployments",
                "replicasets",
                "statefulsets",
            ],
        },
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["secrets", "services"],
        },
        CLAIM_RULE,
    ]
    validations: list[dict] = [
        {
            # On create only: the scheduler's binding sets it later, and every update
            # of a scheduled pod (a finalizer removed, a label) carries it.
            "expression": "request.kind.kind != 'Pod' || request.operation != 'CREATE' "
            "|| !has(object.spec.nodeName) || object.spec.nodeName == ''",
            "message": "pods in team namespaces may not name a node: submit through "
            "the team's queue (the portal, or a Job with kueue.x-k8s.io/queue-name: "
            f"{LOCAL_QUEUE}) and pick the GPU model with nvidia.com/gpu.product",
        },
        {
            "expression": "request.kind.kind == 'Pod' || request.kind.kind == 'CronJob' "
            f"|| !has({template}.nodeName) || {template}.nodeName == '' "
            f"|| ({_UPDATE} && has(oldObject.spec.template.spec.nodeName) "
            f"&& oldObject.spec.template.spec.nodeName == {template}.nodeName)",
            "message": "pod templates in team namespaces may not name a node: pick the "
            "GPU model with nvidia.com/gpu.product and let the team's queue admit it",
        },
        {
            "expression": "request.kind.kind != 'Pod' || request.operation != 'UPDATE' "
            "|| !has(oldObject.spec.schedulingGates) "
            f"|| !oldObject.spec.schedulingGates.exists(g, g.name == {gate}) "
            "|| (has(object.spec.schedulingGates) "
            f"&& object.spec.schedulingGates.exists(g, g.name == {gate}))",
            "message": "only Kueue lifts its scheduling gate: the pod runs when the "
            "team's queue admits it",
        },
        {
            "expression": "request.kind.kind != 'Job' || request.operation != 'UPDATE' "
            "|| !has(oldObject.spec.suspend) || !oldObject.spec.suspend "
            "|| (has(object.spec.suspend) && object.spec.suspend)",
            "message": "only Kueue starts a suspended Job: it runs when the team's queue admits it",
        },
        {
            # Kueue orders and preempts by this label; the namespace's quotas cap pods
            # by their priorityClassName: the two must agree, or a member could queue
            # at gpu-critical without the critical allowance.
            "expression": "request.kind.kind == 'CronJob' || (request.kind.kind == 'Pod' ? "
            + _priority_agrees("object.metadata", "object.spec")
            + " : ("
            + _priority_agrees("object.metadata", template)
            + " && (!has(object.spec.template.metadata) || "
            + _priority_agrees("object.spec.template.metadata", template)
            + ")))",
            "message": f"the {QUEUE_PRIORITY_LABEL} label must name the same priority "
            "class as the pods' priorityClassName",
        },
        {
            # A member's pod tolerating the health taint would land on a sick GPU the
            # portal took out of service.
            "expression": _per_kind(_no_health_toleration, template),
            "message": "pods in team namespaces may not tolerate the GPU health taint "
            f"({HEALTH_TAINT_KEY}) or every taint (a toleration with operator Exists "
            "and no key): ask for a GPU resource (e.g. nvidia.com/gpu: 1) and the "
            "team's queue adds the tolerations its GPU nodes need",
        },
        {
            "expression": _per_kind(
                lambda spec, old: _only_gpu_pods_reach_gpu_nodes(spec, old, taint_keys),
                template,
            ),
            "message": "only pods that ask for a GPU may tolerate the GPU nodes' taint "
            f"({', '.join(gpu_taint_keys)}) or select nodes by an nvidia.com/ label: "
            "ask for a GPU resource (e.g. nvidia.com/gpu: 1), or leave the toleration "
            "and the selector out so the pod runs on a CPU node",
        },
        {
            "expression": _per_kind(_no_nvidia_env, template),
            "message": f"containers in team namespaces may not set {NVIDIA_ENV_PREFIX}* "
            "variables: the GPU device plugin sets them for the GPUs a pod is given; "
            "ask for GPUs by resource (e.g. nvidia.com/gpu: 1)",
        },
        {
            "expression": _per_kind(
                lambda spec, old: _runtime_allowed(spec, old, runtimes), template
            ),
            "message": "pods in team namespaces may use "
            + (
                f"only the runtime classes {', '.join(runtime_classes)}"
                if runtime_classes
                else "no runtimeClassName"
            )
            + " (setting WORKLOAD_RUNTIME_CLASSES): leave it out, and GPUs come with "
            "the GPU resources a pod asks for",
        },
        {
            "expression": _per_kind(lambda spec, old: _not_the_portals_account(spec), template),
            "message": f"pods in team namespaces may not run as the portal's "
            f"ServiceAccount {ROBOT_SERVICE_ACCOUNT} (its token outlives a member's "
            "place in the team): leave serviceAccountName out, or use one of the "
            "team's own",
        },
        {
            "expression": _per_kind(
                lambda spec, old: _priority_known(spec, old, classes), template
            ),
            "message": "team namespaces may use only the portal's priority classes ("
            + ", ".join(sorted(priority_classes))
            + "), and only those the team was granted",
        },
    ]
    if images is not None and not images.allow_all:
        validations.append(
            {
                "expression": _per_kind(
                    lambda spec, old: _images_allowed(spec, old, images), template
                ),
                "message": "an image is not on the platform's allow-list "
                "(WORKLOAD_IMAGE_ALLOWLIST): use an image under a listed registry or "
                "repository, or ask a platform admin to add yours",
            }
        )
    for rule in validations:
        rule["expression"] = _for_pods(rule["expression"])
    validations += [
        {
            # Such a Secret gets a token that never expires and outlives the person's
            # membership; CI authenticates with a portal API token instead.
            "expression": "request.kind.kind != 'Secret' || !has(object.type) "
            "|| object.type != 'kubernetes.io/service-account-token'",
            "message": "team namespaces may not hold ServiceAccount token Secrets (they never "
            "expire): give CI a portal API token instead",
        },
        {
            # An ExternalName or selector-less Service points anywhere the cluster reaches,
            # another team's workspace included; a team's Services select its own pods.
            "expression": "request.kind.kind != 'Service' || ((!has(object.spec.type) "
            "|| object.spec.type != 'ExternalName') && has(object.spec.selector) "
            "&& size(object.spec.selector) > 0)",
            "message": "Services in team namespaces must select the team's pods (a selector, "
            "not type ExternalName or hand-made endpoints): expose another service through "
            "the platform's ingress",
        },
        {
            # externalIPs let a Service intercept traffic to any address (CVE-2020-8554).
            "expression": "request.kind.kind != 'Service' || !has(object.spec.externalIPs) "
            "|| size(object.spec.externalIPs) == 0",
            "message": "Services in team namespaces may not set externalIPs: expose a workload "
            "through the platform's ingress",
        },
        *claim_validations(),
    ]
    return tenant_policy(
        QUEUE_GUARD,
        resource_rules,
        [{"name": "not-trusted", "expression": not_trusted(trusted_users)}],
        validations,
    )
