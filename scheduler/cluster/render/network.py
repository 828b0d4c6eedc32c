"""A tenant namespace's NetworkPolicies: ingress from its own and the platform namespace, egress
to DNS, its own namespace, the portal's web pods and the configured CIDRs; and, where workspaces
are on, the ingress controller to the workspaces' servers only (their pods, their port)."""

from __future__ import annotations

import ipaddress

from scheduler.cluster.render.labels import WORKSPACE_LABEL, _finish
from scheduler.cluster.render.specs import TenantSpec, _meta

NETWORK_POLICY = "gpu-portal-isolation"
WORKSPACES_POLICY = "gpu-portal-workspaces"
# Where a workspace's server listens (workspaces): the one port the ingress controller may
# reach in a team's namespace, on the pods of a workspace's run (WORKSPACE_LABEL) only.
WORKSPACE_PORT = 8888


def _names_in(names: list[str]) -> dict:
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}
        ]
    }


def egress_blocks(allowed: tuple[str, ...], denied: tuple[str, ...]) -> list[dict]:
    """ipBlocks for the allowed CIDRs, each excepting the denied CIDRs it covers (the API server
    refuses an `except` outside its block, and the families must agree)."""
    blocks = []
    denied_nets = [ipaddress.ip_network(d, strict=False) for d in denied]
    for cidr in allowed:
        net = ipaddress.ip_network(cidr, strict=False)
        excepted = sorted(
            str(d)
            for d in denied_nets
            if d.version == net.version and d.subnet_of(net) and d != net  # type: ignore[arg-type]
        )
        if any(d.version == net.version and net.subnet_of(d) for d in denied_nets):  # type: ignore[arg-type]
            continue  # wholly denied
        block: dict = {"cidr": str(net)}
        if excepted:
            block["except"] = excepted
        blocks.append({"ipBlock": block})
    return blocks


def render_network_policy(spec: TenantSpec, namespace: str) -> dict:
    """Ingress from the team's own and the platform namespace only; egress to DNS, the team's
    own namespace, the portal's web port in the platform namespace and the configured CIDRs.
    Everything else, the cloud metadata address, the API server and the portal's database and
    broker included, is denied (where the CNI enforces NetworkPolicies)."""
    allowed = sorted({namespace, spec.platform_namespace})
    dns_ports = [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]
    egress: list[dict] = [
        {
            "to": [
                {
                    "namespaceSelector": _names_in([spec.dns_namespace]),
                    "podSelector": {"matchLabels": dict(spec.dns_pod_labels)},
                }
            ],
            "ports": dns_ports,
        },
        {"to": [{"namespaceSelector": _names_in([namespace])}]},
        {
            "to": [
                {
                    "namespaceSelector": _names_in([spec.platform_namespace]),
                    "podSelector": {"matchLabels": dict(spec.platform_web_pod_labels)},
                }
            ],
            "ports": [{"protocol": "TCP", "port": spec.platform_web_port}],
        },
    ]
    blocks = egress_blocks(spec.egress_allowed_cidrs, spec.egress_denied_cidrs)
    if blocks:
        egress.append({"to": blocks})
    ingress: list[dict] = [{"from": [{"namespaceSelector": _names_in(allowed)}]}]
    return _finish(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(spec, NETWORK_POLICY, namespace),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": ingress,
                "egress": egress,
            },
        }
    )


def render_network_policies(spec: TenantSpec, namespace: str) -> list[dict]:
    """The isolation policy, and the workspaces' where a workspace ingress namespace is set:
    policies add up, so the ingress controller reaches the workspace port of a workspace's pods
    and nothing else (a team's own pod listening on that port is not reached from outside)."""
    policies = [render_network_policy(spec, namespace)]
    if spec.workspace_ingress_namespace:
        policies.append(
            _finish(
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "NetworkPolicy",
                    "metadata": _meta(spec, WORKSPACES_POLICY, namespace),
                    "spec": {
                        "podSelector": {
                            "matchExpressions": [{"key": WORKSPACE_LABEL, "operator": "Exists"}]
                        },
                        "policyTypes": ["Ingress"],
                        "ingress": [
                            {
                                "from": [
                                    {
                                        "namespaceSelector": _names_in(
                                            [spec.workspace_ingress_namespace]
                                        )
                                    }
                                ],
                                "ports": [{"protocol": "TCP", "port": WORKSPACE_PORT}],
                            }
                        ],
                    },
                }
            )
        )
    return policies
