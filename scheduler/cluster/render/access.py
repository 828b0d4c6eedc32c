"""Who may do what in a tenant namespace: the CI robot's ServiceAccount, the portal's two Roles
and one RoleBinding per portal role that has anyone in it (members and identity-provider
groups)."""

from __future__ import annotations

from scheduler.cluster.render.labels import _finish
from scheduler.cluster.render.specs import TenantSpec, _meta

ROBOT_SERVICE_ACCOUNT = "ci-robot"
# Portal-owned Roles in each tenant namespace. Kubernetes' own `admin` and `edit` would let a
# team rewrite its NetworkPolicy or bind people the portal never granted: owners manage access
# through the portal, so in the cluster owners and members get the same workload rights.
WORKLOAD_ROLE = "gpu-portal-workloads"
VIEW_ROLE = "gpu-portal-view"
ROLE_FOR = {"owner": WORKLOAD_ROLE, "member": WORKLOAD_ROLE, "viewer": VIEW_ROLE}
ROLE_BINDING_PREFIX = "gpu-portal-team-"


_READ = ["get", "list", "watch"]
_WRITE = [*_READ, "create", "update", "patch", "delete", "deletecollection"]
# The kinds of Kueue's custom-resource integrations: run and stop them, one at a time.
_FRAMEWORK_WRITE = ["create", "get", "list", "watch", "update", "patch", "delete"]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": list(verbs)}


def role_rules(
    *,
    write: bool,
    pod_exec: bool,
    framework_apis: tuple[tuple[str, tuple[str, ...]], ...] = (),
) -> list[dict]:
    """What a team needs for its workloads, and nothing that changes access (roles, bindings),
    isolation (network policies) or quota (quotas, limit ranges, queues): those are read-only.
    Viewers read the same things, minus secrets, exec and port-forward. `framework_apis`: the
    (group, resources) of the custom-resource kinds Kueue queues here (JobSets, PyTorchJobs,
    ...), only those whose CRD the cluster serves (kueue_settings.Verdict.usable)."""
    verbs = _WRITE if write else _READ
    rules = [
        _rule([""], ["pods", "configmaps", "persistentvolumeclaims", "services"], verbs),
        _rule([""], ["pods/log", "pods/status", "events", "endpoints", "serviceaccounts"], _READ),
        _rule([""], ["resourcequotas", "limitranges"], _READ),
        _rule(["batch"], ["jobs", "cronjobs"], verbs),
        _rule(["apps"], ["deployments", "statefulsets"], verbs),
        _rule(["apps"], ["deployments/scale", "statefulsets/scale"], verbs),
        _rule(["apps"], ["replicasets"], _READ),
        _rule(["autoscaling"], ["horizontalpodautoscalers"], verbs),
        # DRA: their own claims and templates; Kueue charges whatever they select (the largest
        # device of the class that matches), and the queue guard refuses what it cannot charge
        # (render/device_guard.py), so writing them spends nothing beyond the grant
        _rule(["resource.k8s.io"], ["resourceclaims", "resourceclaimtemplates"], verbs),
        _rule(["policy"], ["poddisruptionbudgets"], _READ),
        _rule(["networking.k8s.io"], ["networkpolicies"], _READ),
        _rule(["kueue.x-k8s.io"], ["workloads", "localqueues"], _READ),
        _rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], _READ),
        *(
            _rule([group], list(resources), _FRAMEWORK_WRITE if write else _READ)
            for group, resources in framework_apis
        ),
    ]
    if write:
        rules.insert(1, _rule([""], ["secrets"], verbs))  # the team's own, in its namespace
        if pod_exec:
            rules.append(_rule([""], ["pods/exec", "pods/attach", "pods/portforward"], ["create"]))
    return rules


def render_access(spec: TenantSpec, namespace: str) -> list[dict]:
    """The robot's ServiceAccount, the portal's two Roles, and one RoleBinding per portal role
    that has anyone in it."""
    objects: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(spec, ROBOT_SERVICE_ACCOUNT, namespace),
            "automountServiceAccountToken": False,
        }
    ]
    if spec.active:
        for name, write in ((WORKLOAD_ROLE, True), (VIEW_ROLE, False)):
            objects.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": _meta(spec, name, namespace),
                    "rules": role_rules(
                        write=write, pod_exec=spec.pod_exec, framework_apis=spec.framework_apis
                    ),
                }
            )
    for role, role_name in ROLE_FOR.items():
        subjects = []
        for m in sorted(spec.members, key=lambda m: (m.is_robot, m.username)):
            if m.role != role:
                continue
            if m.is_robot:
                subjects.append(
                    {
                        "kind": "ServiceAccount",
                        "name": ROBOT_SERVICE_ACCOUNT,
                        "namespace": namespace,
                    }
                )
            else:
                subjects.append(
                    {
                        "kind": "User",
                        "apiGroup": "rbac.authorization.k8s.io",
                        "name": f"{spec.user_prefix}{m.username}",
                    }
                )
        for group, group_role in sorted(spec.provider_groups):
            if group_role == role:
                subjects.append(
                    {
                        "kind": "Group",
                        "apiGroup": "rbac.authorization.k8s.io",
                        "name": f"{spec.group_prefix}{group}",
                    }
                )
        if not subjects or not spec.active:
            continue
        objects.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": _meta(spec, f"{ROLE_BINDING_PREFIX}{role}s", namespace),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": role_name,
                },
                "subjects": subjects,
            }
        )
    return [_finish(o) for o in objects]
