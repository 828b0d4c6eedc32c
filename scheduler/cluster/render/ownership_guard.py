"""The ownership guard: a ValidatingAdmissionPolicy that keeps a team's members (and the
ServiceAccounts of their namespace) from changing or deleting the Services, Ingresses and routes
the portal made there, such as a workspace's (repointed, they would carry the workspace's
signed-in path to somewhere else), a workspace's run (only its owner stops it), and the team's
ResourceClaimTemplates (render/claims.py: the names the portal's pods and members' kubectl use;
their spec is immutable, but a deleted or relabelled one breaks the pods that name it until the
next reconcile)."""

from __future__ import annotations

from scheduler.cluster.render.admission import not_trusted, tenant_policy
from scheduler.cluster.render.labels import MANAGED_BY, MANAGED_BY_LABEL, WORKSPACE_LABEL

OWNERSHIP_GUARD = "gpu-portal-ownership-guard"
_A_JOB = "(request.resource.resource == 'jobs')"
# Who is held to it: people (not system: users, whose controllers delete what an owner left,
# e.g. the garbage collector) and the ServiceAccounts of the namespace itself.
_A_MEMBER = (
    "!request.userInfo.username.startsWith('system:') || "
    "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':')"
)


def render_ownership_guard(trusted_users: tuple[str, ...]) -> list[dict]:
    """The policy and its binding for the portal's tenant namespaces."""
    labels = "oldObject.metadata.labels"
    changes = ["UPDATE", "DELETE"]
    return tenant_policy(
        OWNERSHIP_GUARD,
        [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": changes,
                "resources": ["services"],
            },
            {
                "apiGroups": ["networking.k8s.io"],
                "apiVersions": ["v1"],
                "operations": changes,
                "resources": ["ingresses"],
            },
            {
                "apiGroups": ["gateway.networking.k8s.io"],
                "apiVersions": ["*"],
                "operations": changes,
                "resources": ["httproutes", "grpcroutes", "tlsroutes", "tcproutes"],
            },
            {
                "apiGroups": ["batch"],
                "apiVersions": ["v1"],
                "operations": changes,
                "resources": ["jobs"],
            },
            {
                "apiGroups": ["resource.k8s.io"],
                "apiVersions": ["v1"],
                "operations": changes,
                "resources": ["resourceclaimtemplates"],
            },
        ],
        [{"name": "a-member", "expression": f"{not_trusted(trusted_users)} && ({_A_MEMBER})"}],
        [
            {
                "expression": f"{_A_JOB} || !has({labels}) || !('{MANAGED_BY_LABEL}' in {labels}) "
                f"|| {labels}['{MANAGED_BY_LABEL}'] != '{MANAGED_BY}'",
                "message": "the portal made this object (a workspace's or a workload's "
                "Service, Ingress or route, or the team's ResourceClaimTemplate): change it "
                "through the portal, which keeps it as the workspace, workload or grant needs "
                "it; for other devices make a template of your own",
            },
            {
                # another member's workspace is theirs alone: only its owner stops it, in the
                # portal (the team's own Jobs stay the team's to delete with kubectl)
                "expression": f"!{_A_JOB} || !has({labels}) || !('{WORKSPACE_LABEL}' in {labels})",
                "message": "this Job is a workspace's run: only the workspace's owner stops or "
                "changes it, on the workspace's page or with `gpu-portal workspace`",
            },
        ],
    )
