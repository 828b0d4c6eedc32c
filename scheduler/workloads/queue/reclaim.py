"""The portal's reclaim controller: lenders take borrowed units back once a borrower has had its
grace (`Pool.reclaim_grace_s`), choosing the least work lost (the decision: `reclaim.py`).

Kueue does not reclaim by itself where a pool has a grace (the ClusterQueues render
`reclaimWithinCohort: Never`), so this periodic task does: it reads the ClusterQueues and
Kueue's Workloads of this portal instance through the gateway, and evicts each victim through
Kueue by setting its Workload's `spec.active` to false. Kueue then evicts it (condition
`Evicted`, reason `Deactivated`), suspends its Job and releases its quota
(pkg/controller/core/workload_controller.go, jobframework/reconciler.go); a later run sets
`spec.active` back to true once the lender's workload holds the room, and Kueue requeues it
(`Requeued`, reason `Reactivated`). Level-triggered and idempotent: a run that
stopped half-way is finished by the next; a victim on its way out is never chosen again.
Each reclaim is audited, recorded on the workload's page and mailed to the team's owners.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog.models import Pool, ResourceClass
from catalog.slices import SLICE_RESOURCE, SLICES_PER_GPU
from core import audit
from core.errors import ClusterError
from core.locks import advisory_lock
from core.tasks import portal_task
from scheduler.cluster import kube as kube_module
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.converge import managed_selector
from scheduler.cluster.reconcile.specs import reclaim_graces
from scheduler.cluster.render.labels import (
    GPU_PRODUCT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_RESOURCES,
    TENANT_LABEL,
)
from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state, named_after
from scheduler.workloads.models import Workload
from scheduler.workloads.queue.grace import (
    Admitted,
    Key,
    Line,
    Queue,
    Victim,
    Waiting,
    choose_victims,
)
from tenants.models import Tenant
from tenants.notifications import notify

log = logging.getLogger(__name__)

# On a Kueue Workload the portal deactivated to reclaim its units: for which team and which of
# its workloads (namespace/name), and when. While they are there and `spec.active` is false,
# the controller reactivates it once its quota is released and the lender's workload holds the
# room (or is gone); requeued earlier, Kueue might give the room back to it.
RECLAIMED_FOR = "gpu-portal.io/reclaimed-for"
RECLAIMED_FOR_WORKLOAD = "gpu-portal.io/reclaimed-for-workload"
RECLAIMED_AT = "gpu-portal.io/reclaimed-at"
# A lender's workload that is still not admitted this long after the reclaim waits for something
# else: the victim goes back to its queue anyway rather than stay parked.
REQUEUE_ANYWAY_AFTER_S = 600
RECLAIM_LOCK = (0x6777, 2)  # advisory-lock key: one pass at a time (the sync's is (0x6777, 1))


# --- reading Kueue's objects into the decision's plain data (pure) ---------------------------


def _int(quantity) -> int | None:
    """GPU quantities are whole numbers; anything else (cpu's "500m") is not ours to count."""
    try:
        return int(str(quantity))
    except (TypeError, ValueError):
        return None


def _conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def _true(obj: dict, kind: str) -> dict | None:
    cond = _conditions(obj).get(kind)
    return cond if cond and cond.get("status") == "True" else None


def read_queue(cq: dict) -> Queue:
    spec = cq.get("spec") or {}
    lines = {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                nominal = _int(res.get("nominalQuota"))
                if res["name"] in NODE_RESOURCES or nominal is None:
                    continue
                lines[(flavor["name"], res["name"])] = Line(
                    nominal, lend=res.get("lendingLimit") != "0"
                )
    return Queue(
        name=cq["metadata"]["name"],
        cohort=spec.get("cohortName") or "",
        lines=lines,
        by_portal=(spec.get("preemption") or {}).get("reclaimWithinCohort") == "Never",
    )


def _usage(kw: dict) -> dict[Key, int]:
    out: dict[Key, int] = defaultdict(int)
    admission = (kw.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        for res, qty in (assignment.get("resourceUsage") or {}).items():
            n = _int(qty)
            if res not in NODE_RESOURCES and n and res in flavors:
                out[(flavors[res], res)] += n
    return dict(out)


def _requests(kw: dict, queue: Queue | None, flavor_of_product: dict[str, str]) -> dict[Key, int]:
    """What a waiting workload asks for per (flavor, resource): Kueue's `resourceRequests`
    (after its resource transformations, e.g. GPU slices) once it has tried to admit it, on
    the flavor its pods' GPU product selects (else the one flavor its queue lists for it)."""
    status = kw.get("status") or {}
    pod_sets = {p.get("name"): p for p in (kw.get("spec") or {}).get("podSets") or []}
    out: dict[Key, int] = defaultdict(int)
    for req in status.get("resourceRequests") or []:
        template = ((pod_sets.get(req.get("name")) or {}).get("template") or {}).get("spec") or {}
        product = (template.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
        for res, qty in (req.get("resources") or {}).items():
            n = _int(qty)
            if res in NODE_RESOURCES or not n:
                continue
            flavor = flavor_of_product.get(product or "")
            if flavor is None and queue is not None:
                listed = [f for f, r in queue.lines if r == res]
                flavor = listed[0] if len(listed) == 1 else None
            if flavor is None:
                return {}  # which units it waits for is unknown: not a lender's head
            out[(flavor, res)] += n
    return dict(out)


def read_workloads(
    kws: list[dict], queues: dict[str, Queue], flavor_of_product: dict[str, str]
) -> tuple[list[Admitted], list[Waiting]]:
    """Kueue's Workloads as admitted (holding quota) and waiting ones; finished ones neither.
    A waiting one's queue is its namespace's (the portal names each ClusterQueue so)."""
    admitted, waiting = [], []
    for kw in kws:
        meta, spec = kw["metadata"], kw.get("spec") or {}
        if _true(kw, "Finished"):
            continue
        leaving = spec.get("active") is False
        if _true(kw, "QuotaReserved"):
            admission = (kw.get("status") or {}).get("admission") or {}
            since = _true(kw, "Admitted") or _true(kw, "QuotaReserved") or {}
            at = parse_datetime(since.get("lastTransitionTime") or "") or timezone.now()
            admitted.append(
                Admitted(
                    queue=admission.get("clusterQueue") or meta["namespace"],
                    namespace=meta["namespace"],
                    name=meta["name"],
                    usage=_usage(kw),
                    since=at,
                    leaving=leaving,
                )
            )
        elif not leaving:
            queue = queues.get(meta["namespace"])
            waiting.append(
                Waiting(
                    queue=meta["namespace"],
                    namespace=meta["namespace"],
                    name=meta["name"],
                    requests=_requests(kw, queue, flavor_of_product),
                    priority=int(spec.get("priority") or 0),
                    created=meta.get("creationTimestamp") or "",
                )
            )
    return admitted, waiting


def to_reactivate(kws: list[dict], now: datetime) -> list[dict]:
    """Workloads the portal deactivated whose quota Kueue has released, once the lender's
    workload they made room for holds it (admitted, finished or gone): back to the queue."""
    by_key = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in kws}
    out = []
    for kw in kws:
        notes = kw["metadata"].get("annotations") or {}
        if (
            not notes.get(RECLAIMED_FOR)
            or (kw.get("spec") or {}).get("active") is not False
            or _true(kw, "QuotaReserved")
        ):
            continue
        ns, _, name = notes.get(RECLAIMED_FOR_WORKLOAD, "").partition("/")
        head = by_key.get((ns, name))
        at = parse_datetime(notes.get(RECLAIMED_AT) or "")
        if (
            head is None
            or _true(head, "QuotaReserved")
            or _true(head, "Finished")
            or at is None
            or (now - at).total_seconds() >= REQUEUE_ANYWAY_AFTER_S
        ):
            out.append(kw)
    return out


def grace_by_line() -> dict[Key, int]:
    """(flavor, resource) -> seconds of grace, as the queues were rendered from the pools."""
    classes = {rc.pk: rc for rc in ResourceClass.objects.all()}
    return reclaim_graces(classes, {p.resource_class_id: p for p in Pool.objects.all()})


# --- the run ----------------------------------------------------------------------------------


def reclaim_borrowed_units(kube: KubeGateway, *, now: datetime | None = None) -> list[str]:
    """One pass: requeue what earlier passes evicted, then evict what lenders need back now;
    returns the evicted Kueue Workloads as "namespace/name". Two passes at once would both
    choose before either evicts: a pass that finds another one running skips."""
    with advisory_lock(*RECLAIM_LOCK) as acquired:
        if not acquired:
            log.info("reclaim skipped: another pass holds the lock")
            return []
        return _reclaim(kube, now or timezone.now())


def _reclaim(kube: KubeGateway, now: datetime) -> list[str]:
    cqs = kube.list("ClusterQueue", label_selector=managed_selector())
    queues = {q.name: q for q in map(read_queue, cqs)}
    slugs = {
        cq["metadata"]["name"]: (cq["metadata"].get("labels") or {}).get(TENANT_LABEL, "")
        for cq in cqs
    }
    kws = [w for w in kube.list("KueueWorkload") if w["metadata"].get("namespace") in queues]
    for kw in to_reactivate(kws, now):
        _reactivate(
            kube, kw, Tenant.objects.filter(slug=slugs[kw["metadata"]["namespace"]]).first()
        )
    if not any(q.by_portal for q in queues.values()):
        return []
    flavors = {}  # GPU product label -> the portal's flavor of that model
    for f in kube.list("ResourceFlavor", label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"):
        if product := ((f.get("spec") or {}).get("nodeLabels") or {}).get(GPU_PRODUCT_LABEL):
            flavors[product] = f["metadata"]["name"]
    admitted, waiting = read_workloads(kws, queues, flavors)
    victims = choose_victims(list(queues.values()), admitted, waiting, grace_by_line(), now)
    evicted = []
    for victim in victims:
        try:
            if _evict(kube, victim, slugs, now):
                evicted.append(f"{victim.workload.namespace}/{victim.workload.name}")
        except ClusterError as exc:  # the next pass decides again from what is there then
            log.warning("could not reclaim %s: %s", victim.workload.name, exc)
    return evicted


def describe(victim: Victim, lender: str) -> str:
    """What the evicted workload's page says, e.g. "Given back to team ml after the 10 min
    grace: it ran 14 min on borrowed A100-80GB slices; chosen as the least work lost
    (2 GPU·min)"."""
    flavor, resource = victim.line
    minutes = victim.ran_s / 60
    if resource == SLICE_RESOURCE:
        what, gpus = f"{flavor.upper()} slices", victim.held / SLICES_PER_GPU
        lost = f"{gpus * minutes:.3g} GPU·min"
    else:
        what = f"{flavor.upper()} {resource}"
        lost = f"{victim.held * minutes:.3g} unit·min"
    grace = f"{victim.grace_s // 60} min" if victim.grace_s % 60 == 0 else f"{victim.grace_s} s"
    return (
        f"Given back to team {lender} after the {grace} grace: it ran {_span(victim.ran_s)} "
        f"on borrowed {what}; chosen as the least work lost ({lost})"
    )


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _portal_workload(namespace: str, kueue_owner: str) -> Workload | None:
    for w in Workload.objects.live().filter(namespace=namespace).select_related("tenant"):
        if named_after(kueue_owner, w.k8s_name):
            return w
    return None


def _evict(kube: KubeGateway, victim: Victim, slugs: dict[str, str], now: datetime) -> bool:
    lender = slugs.get(victim.lender) or victim.lender
    tenant = Tenant.objects.filter(slug=slugs.get(victim.workload.queue, "")).first()
    message = describe(victim, lender)
    live = kube.get("KueueWorkload", victim.workload.name, victim.workload.namespace)
    if live is None or (live.get("spec") or {}).get("active") is False:
        return False  # gone, or already on its way out
    owners = live["metadata"].get("ownerReferences") or [{}]
    workload = _portal_workload(victim.workload.namespace, owners[0].get("name", ""))
    with transaction.atomic():
        # the page and the audit first; the patch last, so a refused patch rolls them back
        if workload is not None:
            change_state(workload.pk, Observation(Workload.State.PREEMPTED, "Reclaimed", message))
        audit.record(
            actor=None,
            verb="workload.reclaimed",
            obj=workload,
            object_type="" if workload else "kueue.Workload",
            tenant=tenant,
            before={"kueue_workload": victim.workload.name, "active": True},
            after={"active": False, "lender": lender, "reason": message},
        )
        if tenant is not None:
            name = workload.name if workload else victim.workload.name
            notify(
                "workload.reclaimed",
                tenant,
                subject=f"[GPU Portal] {tenant.slug}/{name} gave borrowed GPUs back",
                text=f"{name}: {message}. It waits in the team's queue again and starts over "
                "when there is room.",
                data={"workload": workload.pk if workload else None, "lender": lender},
            )
        kube.merge_patch(
            "KueueWorkload",
            victim.workload.name,
            {
                "metadata": {
                    "annotations": {
                        RECLAIMED_FOR: lender,
                        RECLAIMED_FOR_WORKLOAD: f"{victim.lender}/{victim.for_workload}",
                        RECLAIMED_AT: now.isoformat(),
                    }
                },
                "spec": {"active": False},
            },
            victim.workload.namespace,
        )
    log.info("reclaimed %s for %s: %s", victim.workload.name, lender, message)
    return True


def _reactivate(kube: KubeGateway, kw: dict, tenant: Tenant | None) -> None:
    meta = kw["metadata"]
    owners = meta.get("ownerReferences") or [{}]
    workload = _portal_workload(meta["namespace"], owners[0].get("name", ""))
    try:
        with transaction.atomic():
            audit.record(
                actor=None,
                verb="workload.reclaim_requeued",
                obj=workload,
                object_type="" if workload else "kueue.Workload",
                tenant=tenant,
                before={"kueue_workload": meta["name"], "active": False},
                after={"active": True},
            )
            kube.merge_patch(
                "KueueWorkload",
                meta["name"],
                {
                    "metadata": {
                        "annotations": {
                            RECLAIMED_FOR: None,
                            RECLAIMED_FOR_WORKLOAD: None,
                            RECLAIMED_AT: None,
                        }
                    },
                    "spec": {"active": True},
                },
                meta["namespace"],
            )
    except ClusterError as exc:  # still deactivated: the next pass tries again
        log.warning("could not requeue %s: %s", meta["name"], exc)


@portal_task(name="scheduler.tasks.reclaim_borrowed_units")
def reclaim_borrowed_units_task() -> list[str]:
    return reclaim_borrowed_units(kube_module.gateway())
