"""GPUs used outside the portal (issue 48, 4): pods in namespaces that are neither a team's nor
the platform's own hold units the nodes' allocatable counts, and the pools leave them out.
Pure: nodes and pods as the API server gives them, read by node_offers."""

from catalog import facts
from scheduler.cluster import node_offers
from scheduler.cluster.outside_use import PoolSize, held_outside, pool_sizes

TEAMS = {"tenant-vision"}
SYSTEM = {"kube-system", "gpu-operator", "gpu-portal-system"}


def gpu_node(name, model, allocatable, *, sharing="none", product=None, cordoned=False):
    labels = {
        "nvidia.com/gpu.product": product or facts.product_label(model),
        "nvidia.com/gpu.sharing-strategy": sharing,
    }
    return node_offers.parse_node(
        {
            "metadata": {"name": name, "uid": name, "labels": labels},
            "spec": {"unschedulable": cordoned},
            "status": {
                "allocatable": {k: str(v) for k, v in allocatable.items()},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        {},
    )


def pod(namespace, node, resources, *, phase="Running", name="p"):
    parsed = node_offers.parse_gpu_pod(
        {
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
            "status": {"phase": phase},
        }
    )
    return [parsed] if parsed is not None else []


def sizes(nodes, pods):
    return pool_sizes(nodes, pods, tenant_namespaces=TEAMS, system_namespaces=SYSTEM)


H200 = gpu_node("h200", "H200-141GB", {"nvidia.com/gpu": 8})


def test_whole_gpus_held_outside_leave_the_pool():
    pods = pod("serving", "h200", {"nvidia.com/gpu": 2}) + pod(
        "not-onboarded", "h200", {"nvidia.com/gpu": 1}, name="q"
    )
    assert sizes([H200], pods) == {
        "h200-141gb": PoolSize(8, {"not-onboarded": 1, "serving": 2}),
    }
    size = sizes([H200], pods)["h200-141gb"]
    assert (size.offered, size.outside_units, size.capacity) == (8, 3, 5)


def test_mig_profiles_count_in_their_own_pools():
    a100 = gpu_node(
        "a100",
        "A100-80GB",
        {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 1},
    )
    pods = pod("serving", "a100", {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2})
    found = sizes([a100], pods)
    assert found["a100-80gb-mig-3g.40gb"] == PoolSize(2, {"serving": 1})
    assert found["a100-80gb-mig-1g.10gb"] == PoolSize(7, {"serving": 2})
    assert found["a100-80gb"] == PoolSize(1)  # the whole GPU nobody outside holds
    assert found["a100-80gb-mig-3g.40gb"].capacity == 1


def test_a_whole_gpu_request_on_a_single_strategy_mig_node_is_its_profile():
    h100 = gpu_node(
        "h100", "H100-80GB", {"nvidia.com/gpu": 56}, product="NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    )
    pods = pod("serving", "h100", {"nvidia.com/gpu": 3})
    assert held_outside(pods, [h100], tenant_namespaces=TEAMS, system_namespaces=SYSTEM) == {
        "h100-80gb-mig-1g.10gb": {"serving": 3}
    }


def test_shared_replicas_whether_renamed_or_not():
    renamed = gpu_node("l40s-a", "L40S-48GB", {"nvidia.com/gpu.shared": 16}, sharing="time-slicing")
    plain = gpu_node("l40s-b", "L40S-48GB", {"nvidia.com/gpu": 16}, sharing="time-slicing")
    pods = pod("serving", "l40s-a", {"nvidia.com/gpu.shared": 1}) + pod(
        "serving", "l40s-b", {"nvidia.com/gpu": 2}, name="q"
    )
    assert sizes([renamed, plain], pods) == {"l40s-48gb-shared": PoolSize(32, {"serving": 3})}


def test_pods_of_teams_and_of_the_platform_are_not_outside():
    pods = (
        pod("tenant-vision", "h200", {"nvidia.com/gpu": 4})
        + pod("gpu-operator", "h200", {"nvidia.com/gpu": 1}, name="cuda-validator")
        + pod("kube-system", "h200", {"nvidia.com/gpu": 1}, name="k")
        + pod("gpu-portal-system", "h200", {"nvidia.com/gpu": 1}, name="s")
    )
    assert sizes([H200], pods) == {"h200-141gb": PoolSize(8)}


def test_pods_that_hold_no_device_are_not_counted():
    unbound = node_offers.parse_gpu_pod(
        {
            "metadata": {"namespace": "serving", "name": "waits"},
            "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"},
        }
    )
    assert unbound is None  # the inventory never sees it
    finished = pod("serving", "h200", {"nvidia.com/gpu": 1}, phase="Succeeded") + pod(
        "serving", "h200", {"nvidia.com/gpu": 1}, phase="Failed", name="q"
    )
    assert finished == []
    # bound but still starting: its devices are allocated, so it counts
    starting = pod("serving", "h200", {"nvidia.com/gpu": 1}, phase="Pending")
    assert sizes([H200], finished + starting)["h200-141gb"].capacity == 7


def test_pods_on_nodes_outside_the_pools_take_nothing_from_them():
    cordoned = gpu_node("h200-off", "H200-141GB", {"nvidia.com/gpu": 8}, cordoned=True)
    pods = pod("serving", "h200-off", {"nvidia.com/gpu": 2}) + pod(
        "serving", "cpu-node", {"nvidia.com/gpu": 1}, name="q"
    )
    assert sizes([H200, cordoned], pods) == {"h200-141gb": PoolSize(8)}


def test_never_more_is_taken_than_the_nodes_offer():
    # the device plugin may report fewer devices than pods still hold (a GPU fell off the bus)
    shrunk = gpu_node("h200", "H200-141GB", {"nvidia.com/gpu": 1})
    size = sizes([shrunk], pod("serving", "h200", {"nvidia.com/gpu": 3}))["h200-141gb"]
    assert (size.offered, size.outside_units, size.capacity) == (1, 1, 0)
    assert size.outside == {"serving": 3}  # what the pods hold, said as it is
