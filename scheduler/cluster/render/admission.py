"""A ValidatingAdmissionPolicy for the portal's tenant namespaces and its binding, as the
guards (`queue_guard`, `ownership_guard`) render them: the namespaces they hold and who they
never hold (cluster admins, Kueue's own accounts)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from scheduler.cluster.render.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_ENFORCED_LABEL,
    _finish,
)


def cel_list(values: Iterable[str]) -> str:
    """CEL: a list literal of `values`, sorted, each quoted."""
    return "[" + ", ".join(json.dumps(v) for v in sorted(values)) + "]"


def not_trusted(trusted_users: tuple[str, ...]) -> str:
    """CEL: the request comes from neither a cluster admin nor one of `trusted_users`."""
    trusted = ", ".join(f"'{u}'" for u in sorted(trusted_users))
    return "!('system:masters' in request.userInfo.groups)" + (
        f" && !(request.userInfo.username in [{trusted}])" if trusted else ""
    )


def tenant_policy(
    name: str, resource_rules: list[dict], conditions: list[dict], validations: list[dict]
) -> list[dict]:
    """The policy `name` over the tenant namespaces (failing closed) and its denying binding."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}},
                "resourceRules": resource_rules,
            },
            "matchConditions": conditions,
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [_finish(policy), _finish(binding)]
