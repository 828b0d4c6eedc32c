"""What the inventory sync reads of a cluster, built from the manifests the API server would
give (the simulated fleet's nodes, plain pods): `inventory.record_inventory` writes it as it
writes a real reading, with no cluster and no stand-in gateway."""

from localcluster.fleet import node_manifest
from scheduler.cluster import node_offers
from scheduler.cluster.inventory import ClusterReading


def gpu_node(name: str, model: str = "H200-141GB", gpus: int = 8, **spec) -> dict:
    """A ready node of the local fleet's kind (`localcluster/fleet.yaml`)."""
    manifest = node_manifest({"name": name, "model": model, "gpus": gpus, **spec})
    manifest["metadata"]["uid"] = f"uid-{name}"
    manifest["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return manifest


def gpu_pod(namespace: str, name: str, node: str, resources: dict, phase="Running") -> dict:
    return {
        "metadata": {"uid": f"{namespace}/{name}", "namespace": namespace, "name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {k: str(v) for k, v in resources.items()}},
                }
            ],
        },
        "status": {"phase": phase, "startTime": "2026-01-05T10:00:00Z"},
    }


def reading(nodes: list[dict], pods: list[dict], teams: dict[str, str] | None = None):
    """`teams`: tenant namespace -> tenant slug (the namespaces' tenant label)."""
    return ClusterReading(
        nodes=[n for n in map(node_offers.parse_node, nodes) if n.gpu_model],
        pods=[p for p in map(node_offers.parse_gpu_pod, pods) if p is not None],
        namespaces=dict(teams or {}),
        api_server="https://127.0.0.1:6443",
        server_version="v1.33.0",
    )
