"""The ownership guard: a ValidatingAdmissionPolicy that keeps a team's members (and the
ServiceAccounts of their namespace) from changing or deleting the Services, Ingresses and routes
the portal made there, such as a workspace's: repointed, they would carry the workspace's
signed-in path to somewhere else."""

from __future__ import annotations

from scheduler.cluster.render.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_ENFORCED_LABEL,
    _finish,
)

OWNERSHIP_GUARD = "gpu-portal-ownership-guard"
# Who is held to it: people (not system: users, whose controllers delete what an owner left,
# e.g. the garbage collector) and the ServiceAccounts of the namespace itself.
_A_MEMBER = (
    "!request.userInfo.username.startsWith('system:') || "
    "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':')"
)


def render_ownership_guard(trusted_users: tuple[str, ...]) -> list[dict]:
    """The policy and its binding for the portal's tenant namespaces."""
    trusted = ", ".join(f"'{u}'" for u in sorted(trusted_users))
    condition = f"!('system:masters' in request.userInfo.groups) && ({_A_MEMBER})"
    if trusted:
        condition += f" && !(request.userInfo.username in [{trusted}])"
    labels = "oldObject.metadata.labels"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": OWNERSHIP_GUARD, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}},
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE", "DELETE"],
                        "resources": ["services"],
                    },
                    {
                        "apiGroups": ["networking.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE", "DELETE"],
                        "resources": ["ingresses"],
                    },
                    {
                        "apiGroups": ["gateway.networking.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE", "DELETE"],
                        "resources": ["httproutes", "grpcroutes", "tlsroutes", "tcproutes"],
                    },
                ],
            },
            "matchConditions": [{"name": "a-member", "expression": condition}],
            "validations": [
                {
                    "expression": f"!has({labels}) || !('{MANAGED_BY_LABEL}' in {labels}) "
                    f"|| {labels}['{MANAGED_BY_LABEL}'] != '{MANAGED_BY}'",
                    "message": "the portal made this object (a workspace's or a workload's "
                    "Service, Ingress or route): change it through the portal, which keeps it "
                    "as the workspace or workload needs it",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": OWNERSHIP_GUARD, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"policyName": OWNERSHIP_GUARD, "validationActions": ["Deny"]},
    }
    return [_finish(policy), _finish(binding)]
