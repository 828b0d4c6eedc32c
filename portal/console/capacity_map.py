"""The console's capacity map: each node's GPUs drawn as their layout, each block with what
holds it (a workload, a team, or use outside the portal), borrowing, health and reshapes; in a
fleet, grouped by cluster, the GPU models served through DRA said to be pinned to theirs."""

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db.models import OuterRef, Subquery
from django.urls import reverse

from catalog import facts
from metering.models import AllocationInterval
from portal import borrowing
from scheduler.cluster import node_offers
from scheduler.cluster.inventory import system_namespaces
from scheduler.cluster.models import Cluster, Node, PodAllocation, TenantSyncState
from scheduler.cluster.queues import lending
from scheduler.cluster.reconcile.specs import flavor_name
from scheduler.health import selectors as health_selectors
from scheduler.mig import layouts, proposals
from scheduler.workloads.kinds import topology


def held_by_node(
    cluster_id: int | None = None,
) -> dict[str, dict[str, list[tuple[str | layouts.Holder, int]]]]:
    """node -> resource -> [(holder, units)] from the pods the inventory saw (one query), on one
    cluster (None: all, a single-cluster install's): the team and, where metering saw the pod's
    workload label, its workload; a pod of no team by its namespace, said to be outside the
    portal unless the namespace is the platform's."""
    # the pod's workload as metering's ingest read it from the pod's label (and checked it is
    # the namespace's team's): the inventory keeps no labels
    interval = AllocationInterval.objects.filter(
        cluster_id=OuterRef("cluster_id"), pod_uid=OuterRef("uid"), workload__isnull=False
    ).order_by("-started_at")
    allocations = PodAllocation.objects.all()
    if cluster_id is not None:
        allocations = allocations.filter(cluster_id=cluster_id)
    pods = allocations.select_related("tenant").annotate(
        workload_id=Subquery(interval.values("workload_id")[:1]),
        workload_name=Subquery(interval.values("workload__name")[:1]),
    )
    system = system_namespaces()
    rows: list[tuple[str, str | layouts.Holder, str, int]] = []
    for a in pods:
        if a.tenant:
            holder = layouts.Holder(a.tenant.slug, a.workload_id, a.workload_name or "")
        else:
            outside = a.namespace not in system
            holder = layouts.Holder(a.namespace, namespace=a.namespace, outside=outside)
        rows.extend(
            (a.node_name, holder, resource, units) for resource, units in a.resources.items()
        )
    return layouts.group_held(rows)


def block_link(holder: layouts.Holder | None) -> tuple[str, str]:
    """A held block's link and what it says: the workload's page, or the team's page when the
    pod's workload is not known (a pod the portal did not make, or one not metered yet); none
    for a pod of no team (its namespace is said instead)."""
    if holder is None or holder.namespace:
        return "", ""
    if holder.workload is not None:
        name = holder.workload_name or f"#{holder.workload}"
        return reverse("scheduler:workload_detail", args=[holder.workload]), f"workload {name}"
    return reverse("team_detail", args=[holder.tenant]), f"team {holder.tenant}"


def holder_words(holder: layouts.Holder | None, tenant: str) -> str:
    """Who holds a block, in the block's title: the team, or a pod of no team's namespace."""
    if holder is None or not holder.namespace:
        return tenant or "free"
    where = "used outside the portal" if holder.outside else "the platform's"
    return f"namespace {holder.namespace} ({where})"


def draw_nodes(
    per_node: list[tuple[object, list[layouts.GpuDrawing]]],
    colours=None,
    lenders: dict[str, str] | None = None,
):
    """SVG geometry for nodes whose GPUs are drawn as bars of 7 compute slices; a block held
    on borrowed quota names the teams that lend that model's units (`lenders`, by flavor)."""
    lenders = lenders or {}
    colours = colours or layouts.tenant_colours(
        [b.tenant for _, gpus in per_node for g in gpus for b in g.blocks if b.tenant]
    )
    slice_px, left, row = 72, 60, 30  # one compute slice, the GPU label, one GPU's row
    drawn = []
    for node, gpus in per_node:
        held = [b.holder for g in gpus for b in g.blocks if b.holder]
        drawn.append(
            {
                "node": node,
                # links inside: a group of links, not one image (whose children are not read)
                "linked": any(block_link(h)[0] for h in held),
                "outside": sorted({h.namespace for h in held if h.outside}),
                "width": left + 7 * slice_px,
                "height": max(1, len(gpus)) * row,
                "left": left,
                "bar": 7 * slice_px,
                "gpus": [
                    {
                        "index": g.index,
                        "y": i * row,
                        "blocks": [
                            {
                                "px": left + b.x * slice_px,
                                "pw": b.width * slice_px - 2,
                                # a one-slice block has room for "1g" only (the tooltip says all)
                                "label": b.label if b.width > 1 else b.label.split(".")[0],
                                "title": b.label,
                                "tenant": b.tenant,
                                "borrowed": b.borrowed,
                                "lenders": lenders.get(
                                    flavor_name(getattr(node, "gpu_model", "")), ""
                                )
                                if b.borrowed
                                else "",
                                "colour": colours.get(b.tenant, ""),
                                "holder": holder_words(b.holder, b.tenant),
                                "href": link[0],
                                "link_words": link[1],
                                "outside": bool(b.holder and b.holder.outside),
                            }
                            for b in g.blocks
                            for link in [block_link(b.holder)]
                        ],
                    }
                    for i, g in enumerate(gpus)
                ],
            }
        )
    return drawn, colours


def capacity_map_data():
    """Nodes with their GPUs drawn as bars of 7 compute slices, coloured by tenant (5 queries;
    one more per cluster in a fleet, whose node names may repeat from cluster to cluster)."""
    nodes = list(
        Node.objects.filter(cluster__archived_at__isnull=True)
        .select_related("cluster")
        .order_by("gpu_model", "name")
    )
    clusters = sorted({n.cluster_id for n in nodes})
    if len(clusters) > 1:
        by_cluster = {pk: held_by_node(pk) for pk in clusters}
    else:
        by_cluster = dict.fromkeys(clusters, held_by_node())
    configs = proposals.known_mig_configs()
    dp_configs = proposals.known_device_plugin_configs()
    borrowed = borrowed_units()
    per_node = []
    for node in nodes:
        # per GPU on non-MIG nodes: one may share only some GPUs (its device-plugin config
        # lists them); MIG nodes keep the node's count for the GPUs MIG leaves whole
        replicas: int | list[int] = node.sharing_replicas
        if node.gpu_model and not facts.get_model(node.gpu_model).mig_capable:
            replicas = [s.replicas for s in proposals.current_shapes(node, configs, dp_configs)]
        gpus = layouts.gpu_layouts(
            node.gpu_model, node.gpu_count, node.mig_config, replicas, configs
        )
        on_model = borrowed.setdefault(flavor_name(node.gpu_model), {})
        held = by_cluster[node.cluster_id].get(node.name, {})
        per_node.append((node, layouts.assign_tenants(gpus, held, on_model)))
    return draw_nodes(per_node, lenders=lenders_by_flavor())


DRA_STRATEGIES = (node_offers.DRA, node_offers.DRA_UNPUBLISHED)


@dataclass(frozen=True)
class ClusterGroup:
    """One cluster's part of the map: its drawn nodes, and the GPU models of them served through
    DRA, which work can use on this cluster only (MultiKueue copies no ResourceClaimTemplate or
    DeviceClass to a worker)."""

    cluster: Cluster
    nodes: list[dict]
    dra_models: list[str]


def group_by_cluster(drawn: list[dict]) -> list[ClusterGroup]:
    """The drawn nodes by cluster, the portal's own first, then the workers in the platform's
    order (pure: the nodes carry their cluster). One group for a single-cluster install."""
    groups: dict[int, list[dict]] = defaultdict(list)
    clusters: dict[int, Cluster] = {}
    for n in drawn:
        groups[n["node"].cluster_id].append(n)
        clusters[n["node"].cluster_id] = n["node"].cluster
    order = sorted(
        clusters.values(),
        key=lambda c: (c.role == Cluster.Role.WORKER, c.preference, c.name),
    )
    return [
        ClusterGroup(
            cluster=c,
            nodes=groups[c.pk],
            dra_models=sorted(
                {
                    n["node"].gpu_model
                    for n in groups[c.pk]
                    if n["node"].mig_strategy in DRA_STRATEGIES
                }
            ),
        )
        for c in order
    ]


def lenders_by_flavor() -> dict[str, str]:
    """flavor -> the teams whose idle units the cohort borrows of it, in words (one query)."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for (flavor, _resource), sides in lending(borrowing.every_queue()).items():
        for slug, units in sides["lenders"].items():
            out[flavor][slug] = out[flavor].get(slug, 0) + units
    return {flavor: ", ".join(sorted(units)) for flavor, units in out.items()}


def borrowed_units() -> dict[str, dict[tuple[str, str], int]]:
    """flavor -> (resource, tenant) -> units the tenant's Kueue queue borrows (one query)."""
    out: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    for slug, status in TenantSyncState.objects.values_list("tenant__slug", "queue_status"):
        for line in (status or {}).get("lines") or []:
            if line.get("borrowed"):
                out[line["flavor"]][(line["resource"], slug)] = int(line["borrowed"])
    return out


def mark_health(nodes: list[dict]) -> None:
    """GPU health on the drawn nodes: the node's state, and which GPUs keep it tainted."""
    states, sick = health_selectors.node_states(), health_selectors.sick_gpus()
    for drawn in nodes:
        name = drawn["node"].name
        drawn["health"] = states.get(name)
        for gpu in drawn["gpus"]:
            gpu["sick"] = str(gpu["index"]) in sick.get(name, set())


def mark_places(nodes: list[dict]) -> None:
    """Each drawn node's block and rack (GPU_TOPOLOGY_LEVELS): where a gang's pods landed."""
    for drawn in nodes:
        labels = drawn["node"].labels or {}
        drawn["place"] = topology.domain_of(labels, settings.GPU_TOPOLOGY_LEVELS)


def mark_reshapes(nodes: list[dict]) -> None:
    """MIG re-shaping on the drawn nodes: the plan changing (or that just changed) each node,
    by whom and why (elastic layouts say what waited), and which of its GPUs."""
    recent = proposals.recent_reshapes()
    for drawn in nodes:
        drawn["reshape"] = recent.get(drawn["node"].name)
        gpus = set(drawn["reshape"]["gpus"]) if drawn["reshape"] else set()
        for gpu in drawn["gpus"]:
            gpu["reshaping"] = gpu["index"] in gpus
