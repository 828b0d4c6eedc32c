"""Reads of workloads: what each tenant's workloads hold (for other layers), a workload's env
as a given reader may see it, and why a waiting one waits (for the page, the API and the CLI
alike)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from catalog import facts as catalog_facts
from catalog import slices
from catalog.models import ResourceClass
from core.permissions import is_platform_admin
from scheduler.cluster import node_offers
from scheduler.cluster.models import Node, PodAllocation
from scheduler.cluster.node_offers import class_units
from scheduler.workloads.models import Workload
from scheduler.workloads.queue import waiting
from scheduler.workloads.queue.counting import Facts, Holder, Offer, PoolPolicy, Shape, TeamUse
from scheduler.workloads.queue.outlook import Ahead, Ending, Outlook, outlook
from tenants import hooks
from tenants.models import Membership, QuotaGrant, Tenant
from tenants.models.priority_classes import PRIORITY_CLASS_DEFS
from tenants.permissions import WRITE_ROLES, can_ask


def usage_by_tenant(
    tenant_ids: list[int],
) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
    """(tenant id -> {resource class slug -> units its workloads hold}, tenant id -> {slug ->
    units of its pods running now}). Held: what admitted work takes of the quota. Running: what
    "in use" means on a page (issue 49, 4), pods placed on nodes and running, not admitted work
    on its way; read from the inventory (each pod by its node's model) once it has a node,
    else from the workloads the portal saw running. One query, two with an inventory."""
    held: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    seen_running: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    inventory = False
    # A row per team, state and shape of workload, as held_by_class reads them: a model
    # instance per holding workload made a team page grow with the team's running work (41 ms
    # for 2,000 of them at 50,000 workloads: issue 55).
    shapes = (
        Workload.objects.holding()
        .filter(tenant_id__in=tenant_ids)
        .values("tenant_id", "state", "replicas", "max_replicas", "held_replicas", "resources")
        .annotate(
            count=Count("pk"),
            inventory=Exists(Node.objects.filter(cluster__archived_at__isnull=True)),
        )
        .order_by()
    )
    for shape in shapes:
        tenant_id, state, count = shape.pop("tenant_id"), shape.pop("state"), shape.pop("count")
        inventory = shape.pop("inventory")
        for slug, units in Workload(**shape).units_held().items():
            held[tenant_id][slug] += units * count
            if state == Workload.State.RUNNING:
                seen_running[tenant_id][slug] += units * count
    return held, (_pods_running(tenant_ids) if inventory else seen_running)


def _pods_running(tenant_ids: list[int]) -> dict[int, dict[str, int]]:
    """The pods the inventory saw placed on a GPU node and running, by their node's model, with
    the node's facts read in the same query."""
    node = Node.objects.filter(cluster_id=OuterRef("cluster_id"), name=OuterRef("node_name"))
    pods = (
        PodAllocation.objects.filter(
            cluster__archived_at__isnull=True, tenant_id__in=tenant_ids, phase="Running"
        )
        .annotate(
            model=Subquery(node.values("gpu_model")[:1]),
            product=Subquery(node.values("gpu_product")[:1]),
            sharing=Subquery(node.values("sharing_strategy")[:1]),
        )
        .values_list("tenant_id", "resources", "model", "product", "sharing")
    )
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for tenant_id, resources, model, product, sharing in pods:
        if not model:
            continue
        facts = Node(gpu_model=model, gpu_product=product or "", sharing_strategy=sharing or "")
        for slug, units in _node_units(facts, resources or {}).items():
            out[tenant_id][slug] += units
    return out


def held_by_class() -> dict[str, int]:
    """resource class slug -> units every team's workloads hold together (one query): what of a
    pool is taken now."""
    out: dict[str, int] = defaultdict(int)
    # Grouped by what `units_held` reads: a row per shape of workload, not per workload (every
    # team page reads this; one model instance per holding workload made it grow with the
    # fleet's work: issue 55).
    shapes = (
        Workload.objects.holding()
        .values("replicas", "max_replicas", "held_replicas", "resources")
        .annotate(count=Count("pk"))
        .order_by()
    )
    for shape in shapes:
        count = shape.pop("count")
        for slug, units in Workload(**shape).units_held().items():
            out[slug] += units * count
    return dict(out)


def can_read_env_values(user, tenant: Tenant) -> bool:
    """Those who may submit the team's workloads (members, owners, platform admins) read the
    values of their env; viewers read only the names."""
    return can_ask(user, tenant)


def env_values_readable(user) -> Callable[[int], bool]:
    """`can_read_env_values` for many workloads at once, by tenant id: at most two queries
    however many tenants a list shows."""
    if is_platform_admin(user):
        return lambda tenant_id: True
    if not getattr(user, "is_authenticated", False):
        return lambda tenant_id: False
    writable = set(
        Membership.objects.filter(user=user, role__in=WRITE_ROLES).values_list(
            "tenant_id", flat=True
        )
    )
    return writable.__contains__


def env_shown(env: Mapping[str, Any], *, values: bool) -> dict[str, Any]:
    """A workload's env for a reader: every name, with its plain value or its Secret reference
    ({"secret", "key"}) when `values`, else None (the value is hidden, not empty)."""
    return {name: (value if values else None) for name, value in env.items()}


# --- why a waiting workload waits ------------------------------------------------------------


def waiting_for(workload: Workload) -> waiting.Waiting | None:
    """Why `workload` waits and what would get it in sooner, or None when it is not waiting
    (then no query at all). Only the workload's own team is read by name: other teams of the
    cohort count as anonymous numbers, so whoever may read the workload reads the answer."""
    if not waiting.is_waiting(workload.state, workload.reason):
        return None
    return waiting.explain(waiting_facts(workload))


def waiting_outlook(workload: Workload, now: datetime | None = None) -> Outlook | None:
    """What the waiting workload waits behind in its team's queue and an estimate of when it
    may start (two queries), or None when it does not wait."""
    if not waiting.is_waiting(workload.state, workload.reason):
        return None
    team = Workload.objects.filter(tenant_id=workload.tenant_id).exclude(pk=workload.pk)
    ahead = []
    if workload.queue_position:
        rows = team.filter(
            state__in=waiting.WAITING_STATES, queue_position__lt=workload.queue_position
        ).values_list("name", "queue_position")
        ahead = [Ahead(name, position) for name, position in rows if position is not None]
    running = list(
        team.filter(state=Workload.State.RUNNING, gpu_model=workload.gpu_model).only(
            "name", "state", "started_at", "max_run_s"
        )
    )
    endings = [Ending(w.name, w.run_ends_at) for w in running if w.run_ends_at]
    return outlook(ahead=ahead, endings=endings, holders=len(running), now=now or timezone.now())


def waiting_facts(workload: Workload) -> Facts:
    """The explanation's inputs in six queries whatever the size of the fleet or the team (the
    tenant unless the workload carries it, the classes with their pools, the grants in force,
    the work holding quota, the nodes and their pods), plus metering's budget check while
    budgets are enforced (`hooks.queue_holds`)."""
    tenant = _tenant_of(workload)
    resources = workload.resources if isinstance(workload.resources, dict) else {}
    # units as admission wrote them (whole numbers); anything else a hand edit left is skipped
    ask = {str(k): n for k, n in resources.items() if type(n) is int and n > 0}
    model = workload.gpu_model
    classes = list(
        ResourceClass.objects.filter(Q(active=True) | Q(slug__in=list(ask))).select_related("pool")
    )
    slug_of = {rc.pk: rc.slug for rc in classes}
    granted: dict[int, Counter] = defaultdict(Counter)
    others_active = Q(tenant__status=Tenant.Status.ACTIVE, resource_class__gpu_model=model)
    rows = (
        QuotaGrant.objects.effective()
        .filter(Q(tenant_id=tenant.pk) | others_active)
        .values("tenant_id", "resource_class_id")
        .annotate(total=Sum("amount"))
    )
    for row in rows:
        if row["resource_class_id"] in slug_of:
            granted[row["tenant_id"]][slug_of[row["resource_class_id"]]] += row["total"]
    holders, used = _holding(workload, tenant, model)
    others = [
        TeamUse(granted.get(t, Counter()), used.get(t, Counter()))
        for t in set(granted) | set(used)
        if t != tenant.pk
    ]
    active = tenant.status == Tenant.Status.ACTIVE
    return Facts(
        state=workload.state,
        ask=ask,
        pods=workload.max_pods,
        priority=workload.priority_class,
        shapes={rc.slug: _shape(rc) for rc in classes if rc.active or rc.slug in ask},
        granted=dict(granted.get(tenant.pk, {})),
        holders=holders,
        pools={
            rc.slug: PoolPolicy(getattr(pool, "borrowing_limit", 0), pool.lend_idle)
            for rc in classes
            if (pool := getattr(rc, "pool", None)) is not None
        },
        others=others,
        fleet=fleet_offers(),
        unit=getattr(settings, "GPU_QUOTA_UNIT", slices.UNIT_SLICES),
        position=workload.queue_position,
        kueue_reason=workload.reason,
        kueue_message=workload.message,
        team_active=active,
        queue_held=active and tenant.pk in hooks.queue_holds([tenant.pk]),
        priority_values={pc.name: pc.value for pc in PRIORITY_CLASS_DEFS},
        allowed_priorities=tuple(tenant.allowed_priority_classes or ()),
        kind=workload.kind,
    )


def _tenant_of(workload: Workload) -> Tenant:
    if Workload.tenant.is_cached(workload):
        return workload.tenant
    return Tenant.objects.only("status", "allowed_priority_classes").get(pk=workload.tenant_id)


def _shape(rc: ResourceClass) -> Shape:
    return Shape(
        rc.slug, rc.gpu_model, rc.kind, rc.profile, slices.slices_per_unit(rc), rc.display_name
    )


def _holding(
    workload: Workload, tenant: Tenant, model: str
) -> tuple[list[Holder], dict[int, Counter]]:
    """The team's own work that holds quota (by name), and what every team's work of the
    model holds (by tenant id, for the cohort's numbers). The workload itself is left out."""
    holders: list[Holder] = []
    used: dict[int, Counter] = defaultdict(Counter)
    rows = (
        Workload.objects.holding()
        .filter(Q(tenant_id=tenant.pk) | Q(gpu_model=model, tenant__status=Tenant.Status.ACTIVE))
        .exclude(pk=workload.pk)
        .only(
            "tenant_id",
            "name",
            "kind",
            "replicas",
            "max_replicas",
            "held_replicas",
            "resources",
            "priority_class",
        )
        .order_by("created_at", "id")
    )
    for w in rows:
        held = w.units_held()
        used[w.tenant_id].update(held)
        if w.tenant_id == tenant.pk:
            holders.append(Holder(w.name, w.priority_class, held))
    return holders, used


def fleet_offers() -> dict[str, Offer] | None:
    """Resource class slug -> what the fleet's schedulable, ready nodes have free of it now
    (their units less what the pods on them hold, as the last inventory sync saw them); None
    while the inventory has no node at all (nothing is known, so nothing is said)."""
    nodes = list(
        Node.objects.filter(cluster__archived_at__isnull=True).only(
            "cluster_id", "name", "gpu_model", "gpu_product", "sharing_strategy", "allocatable",
            "schedulable", "ready", "mig_strategy", "gpu_count",
        )
    )  # fmt: skip
    if not nodes:
        return None
    held: dict[tuple[int, str], Counter] = defaultdict(Counter)
    pods = PodAllocation.objects.filter(cluster__archived_at__isnull=True)
    for cluster_id, node_name, resources in pods.values_list(
        "cluster_id", "node_name", "resources"
    ):
        for name, n in (resources or {}).items():
            held[(cluster_id, node_name)][name] += int(n) if str(n).isdigit() else 0
    free: dict[str, list[int]] = defaultdict(list)
    total: Counter = Counter()
    for node in nodes:
        if not (node.schedulable and node.ready and node.gpu_model):
            continue
        pods_hold: Mapping[str, int] = held.get((node.cluster_id, node.name), {})
        if node.mig_strategy == node_offers.DRA:  # placements cut on demand, not a layout
            units = node_offers.dra_units(node.gpu_model, node.gpu_count)
            for slug, n in node_offers.dra_free(node.gpu_model, node.gpu_count, pods_hold).items():
                free[slug].append(n)
                total[slug] += units[slug]
            continue
        units = _node_units(node, node.allocatable or {})
        taken = _node_units(node, pods_hold)
        for slug, n in units.items():
            free[slug].append(max(0, n - taken.get(slug, 0)))
            total[slug] += n
    return {slug: Offer(tuple(units), total[slug]) for slug, units in free.items()}


def _node_units(node: Node, resources: Mapping[str, Any]) -> dict[str, int]:
    counts = {k: int(v) for k, v in resources.items() if str(v).isdigit()}
    try:
        return class_units(node.gpu_model, counts, node.sharing_strategy, node.gpu_product)
    except catalog_facts.UnknownModel:
        return {}
