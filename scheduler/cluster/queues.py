"""What Kueue says about each team's queue, kept in PostgreSQL for the pages.

`summarise` is pure: from the ClusterQueues of this portal instance it derives, per team and per
(GPU model flavor, resource), the nominal quota, what the team's admitted work uses, how much of
that is borrowed from others and how much of its own idle quota others are using (lent), plus
the pending and admitted workload counts. `sync_queue_status` reads the queues with one list call
and stores each team's summary on its TenantSyncState (pages never call the API server).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

from django.db import transaction

from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import TenantSyncState
from scheduler.cluster.render.labels import NODE_RESOURCES, TENANT_LABEL
from tenants.models import Tenant


@dataclass(frozen=True)
class QueueLine:
    flavor: str
    resource: str
    nominal: int
    used: int  # by the team's admitted work, borrowed units included
    borrowed: int  # of `used`, what is above its own nominal (others' idle units)
    lent: int  # of its own idle nominal, what borrowers use now (shared out pro rata)


def _units(quantity) -> int:
    """Kueue quantities of GPUs are whole numbers ("2"); cpu/memory are not shown."""
    try:
        return int(str(quantity or "0"))
    except ValueError:
        return 0


def _nominal(cq: dict) -> dict[tuple[str, str], int]:
    out = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res["name"] in NODE_RESOURCES:
                    continue
                out[(flavor["name"], res["name"])] = _units(res.get("nominalQuota"))
    return out


def _usage(cq: dict) -> dict[tuple[str, str], tuple[int, int]]:
    out = {}
    for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res["name"] in NODE_RESOURCES:
                continue
            out[(flavor["name"], res["name"])] = (
                _units(res.get("total")),
                _units(res.get("borrowed")),
            )
    return out


def shares(total: int, weights: dict[str, int]) -> dict[str, int]:
    """`total` shared out over `weights` in whole units, each at most its weight, adding up to
    min(total, sum of weights): largest remainders, ties to the larger weight, then by name."""
    whole = sum(weights.values())
    total = min(total, whole)
    if not total:
        return dict.fromkeys(weights, 0)
    out = {name: total * w // whole for name, w in weights.items()}
    left = {name: total * w % whole for name, w in weights.items()}  # exact remainders
    order = sorted(weights, key=lambda n: (-left[n], -weights[n], n))
    for name in order[: total - sum(out.values())]:
        out[name] += 1
    return out


def lending(statuses: dict[str, dict]) -> dict[tuple[str, str], dict[str, dict[str, int]]]:
    """(flavor, resource) -> {"borrowers": {slug: units}, "lenders": {slug: units}}, from the
    stored queue summaries of every team: who borrows what, and whose idle units it is."""
    out: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for slug, status in sorted(statuses.items()):
        for line in (status or {}).get("lines") or []:
            key = (line["flavor"], line["resource"])
            for side, field in (("borrowers", "borrowed"), ("lenders", "lent")):
                if line.get(field):
                    entry = out.setdefault(key, {"borrowers": {}, "lenders": {}})
                    entry[side][slug] = int(line[field])
    return out


def summarise(cluster_queues: list[dict]) -> dict[str, dict]:
    """tenant slug -> {"lines": [...], "pending": n, "admitted": n, "active": bool, "reason"}.
    Kueue counts what each queue borrows, not whom from: a lender's `lent` is the cohort's
    borrowed units of that (flavor, resource) shared out over the lenders by their idle units
    (exact when one team lends)."""
    nominal = {}
    usage = {}
    slugs = {}
    for cq in cluster_queues:
        name = cq["metadata"]["name"]
        slugs[name] = (cq["metadata"].get("labels") or {}).get(TENANT_LABEL, name)
        nominal[name] = _nominal(cq)
        usage[name] = _usage(cq)
    borrowed_total: dict[tuple[str, str], int] = defaultdict(int)
    lendable: dict[str, dict[tuple[str, str], int]] = {}  # idle own units a team lends
    for cq in cluster_queues:
        name = cq["metadata"]["name"]
        for key, (_total, borrowed) in usage[name].items():
            borrowed_total[key] += borrowed
        lends = {
            (flavor["name"], res["name"]): res.get("lendingLimit") != "0"
            for group in (cq.get("spec") or {}).get("resourceGroups") or []
            for flavor in group.get("flavors") or []
            for res in flavor.get("resources") or []
        }
        lendable[name] = {}
        for key, units in nominal[name].items():
            total, borrowed = usage[name].get(key, (0, 0))
            lendable[name][key] = max(0, units - (total - borrowed)) if lends.get(key) else 0
    # what each lender lends of each key: the borrowed units shared out over the lenders by
    # their idle units in whole units that add up (largest remainders), so the Queues page's
    # lent figures sum to what was borrowed (floors alone lost a unit per lender)
    lent_by: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    for key in {k for per_key in lendable.values() for k in per_key}:
        idle = {name: per_key[key] for name, per_key in lendable.items() if per_key.get(key)}
        for name, units in shares(borrowed_total[key], idle).items():
            lent_by[name][key] = units
    out = {}
    for cq in cluster_queues:
        name = cq["metadata"]["name"]
        lines = []
        for key in sorted(set(nominal[name]) | set(usage[name])):
            total, borrowed = usage[name].get(key, (0, 0))
            lent = lent_by[name].get(key, 0)
            if nominal[name].get(key, 0) or total or lent:
                lines.append(
                    QueueLine(key[0], key[1], nominal[name].get(key, 0), total, borrowed, lent)
                )
        status = cq.get("status") or {}
        active = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Active"), None
        )
        out[slugs[name]] = {
            "queue": name,
            "lines": [asdict(line) for line in lines],
            "pending": int(status.get("pendingWorkloads") or 0),
            "admitted": int(status.get("admittedWorkloads") or 0),
            "active": bool(active and active.get("status") == "True"),
            "reason": (active or {}).get("message", "") if active else "Kueue has not seen it",
        }
    return out


def sync_queue_status(kube: KubeGateway, selector: str) -> int:
    """Store every team's queue summary (one list call, then only the rows that changed:
    a beat task every 15 s must not rewrite a thousand unchanged rows); returns how many
    teams were seen."""
    summaries = summarise(kube.list("ClusterQueue", label_selector=selector))
    tenants = dict(Tenant.objects.filter(slug__in=list(summaries)).values_list("slug", "pk"))
    wanted = {tenants[slug]: summary for slug, summary in summaries.items() if slug in tenants}
    with transaction.atomic():
        states = {s.tenant_id: s for s in TenantSyncState.objects.filter(tenant_id__in=wanted)}
        changed = []
        for tenant_id, summary in wanted.items():
            state = states.get(tenant_id)
            if state is None:
                TenantSyncState.objects.create(tenant_id=tenant_id, queue_status=summary)
            elif state.queue_status != summary:
                state.queue_status = summary
                changed.append(state)
        TenantSyncState.objects.bulk_update(changed, ["queue_status"])
    return len(summaries)
