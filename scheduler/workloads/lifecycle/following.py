"""Work a team made outside the portal — with kubectl, Helm or a framework — followed as one
of its workloads. Kueue gives every object it queues a Workload, whatever made it; the sync
(`watching.py`) hands the Kueue Workloads no live row accounts for to `follow_new`, which
records a row for each top-level object (a Deployment once, though Kueue keeps a Workload per
pod). From then on the row is synced, listed, cancelled, suspended for idleness and stopped at
its maximum run time like the portal's own (`sync.py`, `suspending.py`), through its own
object. What is pure (owners, asks, pods) is `kinds/owners.py`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog import run_limits
from catalog.models import ResourceClass
from catalog.product_labels import configured_product_labels
from core import audit
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.kinds import owners
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL, Observation
from scheduler.workloads.lifecycle.reading import NamespaceReading
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants.models import Tenant

log = logging.getLogger(__name__)


def _tenants_by_namespace(namespaces: Iterable[str]) -> dict[str, Tenant]:
    wanted = set(namespaces)
    return {t.namespace: t for t in Tenant.objects.all() if t.namespace in wanted}


def _not_the_portals(queue_workloads: list[dict]) -> list[dict]:
    """Those that are not the portal's own: a pod template's workload label is believed only
    where the portal's row it names is that object (`owners.believed`), so a member's kubectl Job
    wearing the label is followed like any other."""
    claims = {w_id for w in queue_workloads if (w_id := owners.portal_claim(w)) is not None}
    rows = {
        pk: (namespace, name, uid)
        for pk, namespace, name, uid in Workload.objects.filter(
            pk__in=claims, owner_kind=""
        ).values_list("pk", "namespace", "k8s_name", "k8s_uid")
    }
    return [
        w
        for w in queue_workloads
        if (claim := owners.portal_claim(w)) is None
        or claim not in rows
        or not owners.believed(w, *rows[claim])
    ]


def follow_new(
    kube: KubeGateway,
    queue_workloads: Iterable[dict],
    readings: Mapping[str, NamespaceReading] | None = None,
) -> list[int]:
    """Record a workload for each top-level object behind these Kueue Workloads that lives in
    a team's namespace, was not made by the portal, has not finished and is not followed yet;
    returns the new rows' ids. Pods and objects come from `readings` where the run read the
    cluster already, else a list a namespace and a GET an object. Safe to run twice: a
    followed object is found by its uid."""
    readings = readings or {}
    candidates = [w for w in queue_workloads if not owners.is_finished(w) and w.get("metadata")]
    candidates = _not_the_portals(candidates)
    if not candidates:
        return []
    tenants = _tenants_by_namespace(w["metadata"].get("namespace", "") for w in candidates)
    candidates = [w for w in candidates if w["metadata"].get("namespace") in tenants]
    # what is followed already is found in PostgreSQL, not by reading its owner again
    known = set(
        Workload.objects.exclude(owner_kind="")
        .filter(k8s_uid__in=[uid for w in candidates if (uid := owners.owner_uid(w))])
        .values_list("k8s_uid", flat=True)
    )
    live = set(
        Workload.objects.live()
        .exclude(owner_kind="")
        .filter(namespace__in={w["metadata"]["namespace"] for w in candidates})
        .values_list("namespace", "owner_kind", "k8s_name")
    )
    product_labels = configured_product_labels()
    pods_read: dict[str, dict[str, dict]] = {}
    made: list[int] = []
    for queue_workload in candidates:
        if owners.owner_uid(queue_workload) in known:
            continue
        namespace = queue_workload["metadata"]["namespace"]
        if namespace not in pods_read:
            pods = readings[namespace].all_pods if namespace in readings else None
            pods_read[namespace] = {
                p["metadata"]["name"]: p
                for p in (kube.list("Pod", namespace) if pods is None else pods)
            }
        owner = owners.owner_of(queue_workload, pods_read[namespace])
        if owner is None or (namespace, owner.kind, owner.name) in live:
            continue
        live.add((namespace, owner.kind, owner.name))
        # made before its Kueue Workload: a reading older than that vouches for its absence
        before = parse_datetime(queue_workload["metadata"].get("creationTimestamp") or "")
        obj = (
            readings[namespace].object(kube, owner.kind, owner.name, namespace, made=before)
            if namespace in readings
            else kube.get(owner.kind, owner.name, namespace)
        )
        if obj is None:
            continue
        uid = obj["metadata"].get("uid", "")
        if Workload.objects.filter(
            namespace=namespace, owner_kind=owner.kind, k8s_uid=uid
        ).exists():
            continue
        asked = owners.asked(queue_workload, product_labels)
        pk = _record(tenants[namespace], owner, uid, obj, asked)
        if pk is not None:
            made.append(pk)
    return made


def _replicas(owner_kind: str, obj: dict, asked: owners.Asked) -> int:
    """Pods it runs: a serving object's replicas (Kueue keeps a Workload per pod), else what
    Kueue's Workload counts."""
    if owners.OWNER_KINDS[owner_kind].row_kind == owners.DEPLOYMENT:
        replicas = (obj.get("spec") or {}).get("replicas")
        if isinstance(replicas, int) and replicas >= 1:
            return replicas
    return max(asked.pods, 1)


def _max_run_s(tenant: Tenant, row_kind: str, asked: owners.Asked) -> int | None:
    """The run time the team's and its classes' pools allow, as for the portal's own jobs."""
    if row_kind != owners.JOB:  # a serving object runs until stopped
        return None
    classes = ResourceClass.objects.filter(slug__in=asked.resources).select_related("pool")
    return run_limits.job_limit(tenant.max_run_s, classes)


def _record(
    tenant: Tenant, owner: owners.Owner, uid: str, obj: dict, asked: owners.Asked
) -> int | None:
    kind = owners.OWNER_KINDS[owner.kind]
    max_run_s = _max_run_s(tenant, kind.row_kind, asked)
    created = obj["metadata"].get("creationTimestamp")
    names = [owner.name[:40], f"{owner.name[:30]}-{owner.kind.lower()[:9]}"]
    for name in names:  # the same name as a live workload of the team's: say the kind too
        try:
            with transaction.atomic():
                w = Workload.objects.create(
                    tenant=tenant,
                    name=name,
                    kind=kind.row_kind,
                    owner_kind=owner.kind,
                    image=asked.image[:300],
                    labels={k: v for k, v in asked.labels.items() if len(k) < 64},
                    resources=asked.resources,
                    gpu_model=asked.gpu_model,
                    priority_class=asked.priority_class[:40],
                    replicas=_replicas(owner.kind, obj, asked),
                    max_run_s=max_run_s,
                    namespace=owner.namespace,
                    k8s_name=owner.name,
                    k8s_uid=uid,
                    state=Workload.State.PENDING,
                    reason="Followed",
                    # when its object was made (by the API server's clock), not when followed
                    cluster_created_at=(created and parse_datetime(created)) or timezone.now(),
                )
                message = (
                    f"{owner.kind} {owner.namespace}/{owner.name}, made outside the portal,"
                    " queued by Kueue"
                    + (f" (created on the cluster at {created})" if created else "")
                )
                WorkloadEvent.objects.create(
                    workload=w, state=w.state, reason="Followed", message=message
                )
                audit.record(
                    actor=None,
                    verb="workload.followed",
                    obj=w,
                    tenant=tenant,
                    after={"origin": w.origin, "resources": w.resources, "pods": w.replicas},
                )
            log.info("following %s of %s as workload %s", w.origin, tenant.slug, w.pk)
            return w.pk
        except IntegrityError as exc:
            if "unique_live_workload_name" not in str(exc):
                raise
            continue
    log.warning(
        "cannot follow %s %s/%s: its names are taken", owner.kind, owner.namespace, owner.name
    )
    return None


def stop_past_their_run_time(kube: KubeGateway, now: datetime | None = None) -> list[int]:
    """Followed jobs running past their maximum run time, stopped as Kueue stops the portal's
    own (which carry Kueue's max-exec-time label from the start; a team's kubectl Job does not,
    and adding it later would make Kueue recreate the Workload): Kueue deactivates the Workload,
    the Job stays suspended with its spec, the quota is freed. Returns the ids stopped."""
    now = now or timezone.now()
    due = [
        w
        for w in Workload.objects.filter(
            state=Workload.State.RUNNING, kind=Workload.Kind.JOB, max_run_s__isnull=False
        ).exclude(owner_kind="")
        if w.run_ends_at is not None and w.run_ends_at <= now
    ]
    stopped = []
    for w in due:
        mine = [
            kw
            for kw in kube.list("KueueWorkload", w.namespace)
            if (kw["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL) == w.k8s_uid
        ]
        for kw in mine:
            kube.merge_patch(
                "KueueWorkload", kw["metadata"]["name"], {"spec": {"active": False}}, w.namespace
            )
        message = (
            f"stopped after its maximum run time of {run_limits.duration_words(w.max_run_s or 0)}:"
            " the portal deactivated it in Kueue, which suspended it and freed its quota"
        )
        if change_state(w.pk, Observation(Workload.State.FAILED, "MaxRunTimeExceeded", message)):
            stopped.append(w.pk)
    return stopped
