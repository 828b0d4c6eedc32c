"""GPU health: read DCGM's signals through Prometheus, open and close events by the policy, and
keep the cluster in step (level-triggered): a node with an open taint or drain event carries the
portal's NoSchedule taint, a drain evicts its GPU pods lowest priority first through the Eviction
API (PodDisruptionBudgets hold), and a node without one carries no such taint of this portal.

Prometheus unreachable changes nothing: nodes read "health unknown", no taint is added or removed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput, InvalidTransition, NotFound
from core.prometheus import PrometheusUnavailable, instant_query
from scheduler.catalog.product_labels import configured_product_labels
from scheduler.cluster import inventory, inventory_sync
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.cluster.render.labels import INSTANCE_LABEL, TENANT_LABEL
from scheduler.health import policy
from scheduler.health.models import HealthEvent, HealthImpact, HealthRule, NodeHealth
from scheduler.mig.rollout import drain_order
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.pod_template import WORKLOAD_LABEL
from tenants import audit
from tenants.models import Tenant
from tenants.notifications import notify
from tenants.permissions import require_platform_admin

log = logging.getLogger(__name__)

TAINT_KEY = inventory.HEALTH_TAINT_KEY
TAINT_EFFECT = "NoSchedule"


# --- reading the signals ---------------------------------------------------------------------


def queries(window: str | None = None) -> dict[str, str]:
    """One PromQL query per DCGM signal, grouped by node, GPU index and UUID (label names and
    metric names are settings)."""
    w = window or settings.GPU_HEALTH_WINDOW
    m = settings.GPU_HEALTH_METRICS
    by = ", ".join((settings.DCGM_NODE_LABEL, settings.DCGM_GPU_LABEL, settings.DCGM_UUID_LABEL))
    return {
        "xid": f"max by ({by}) ({m['xid']})",
        "gpu_temp": f"max by ({by}) ({m['gpu_temp']})",
        "memory_temp": f"max by ({by}) ({m['memory_temp']})",
        "ecc_uncorrectable": f"max by ({by}) (increase({m['ecc_uncorrectable']}[{w}]))",
        "row_remap_failure": f"max by ({by}) ({m['row_remap_failure']})",
        # DCGM counts microseconds of throttling: the rate is microseconds per second.
        "power_throttle": f"max by ({by}) (rate({m['power_throttle']}[{w}])) / 1000000",
        "nvlink_errors": f"max by ({by}) (increase({m['nvlink_errors']}[{w}]))",
    }


def read_signals(base_url: str, *, timeout: float = 10.0) -> list[policy.Reading]:
    """Every GPU's readings; raises PrometheusUnavailable when any query fails (a partial read
    would look like signals clearing)."""
    readings = []
    for signal, query in queries().items():
        for row in instant_query(base_url, query, timeout):
            metric = row.get("metric") or {}
            node = metric.get(settings.DCGM_NODE_LABEL, "")
            gpu = metric.get(settings.DCGM_GPU_LABEL, "")
            value = policy.parse_value((row.get("value") or [None, None])[1])
            if not node or gpu == "" or value is None:
                continue
            readings.append(
                policy.Reading(
                    node, str(gpu), metric.get(settings.DCGM_UUID_LABEL, ""), signal, value
                )
            )
    return readings


def node_readings(gpu_nodes: list[inventory.NodeInfo]) -> list[policy.Reading]:
    """What the API server says: GPUs a node's labels count but its allocatable lacks."""
    out = []
    for info in gpu_nodes:
        missing = policy.missing_gpus(info.labels, info.allocatable)
        if missing is not None:
            out.append(policy.Reading(info.name, "", "", "gpu_missing", Decimal(missing)))
    return out


# --- the policy --------------------------------------------------------------------------------


def ensure_default_rules() -> int:
    """The default policy where there is none yet (a fresh install); returns rules created."""
    if HealthRule.objects.exists():
        return 0
    HealthRule.objects.bulk_create([HealthRule(**rule) for rule in policy.default_rules()])
    return len(policy.default_rules())


RULE_FIELDS = (
    "signal",
    "xid_code",
    "threshold",
    "clear_below",
    "action",
    "auto_recover",
    "clear_after_s",
    "waive_billing",
    "enabled",
)


def validate_rule(values: dict, *, instance: HealthRule | None = None) -> None:
    """A rule that can fire and clear: XID rules name a code once (or are the one catch-all);
    threshold rules have a threshold and clear at or below it."""
    if values["signal"] == HealthRule.Signal.XID:
        if values.get("threshold") is not None:
            raise InvalidInput("an XID rule has a code, not a threshold: leave threshold empty")
        same = HealthRule.objects.filter(signal="xid", xid_code=values.get("xid_code"))
        if instance is not None:
            same = same.exclude(pk=instance.pk)
        if same.exists():
            code = values.get("xid_code")
            raise InvalidInput(
                f"a rule for XID {code} exists already: edit that one"
                if code is not None
                else "a rule for every other XID exists already: edit that one"
            )
        return
    if values.get("xid_code") is not None:
        raise InvalidInput("only XID rules have a code: leave the XID code empty")
    threshold, clear_below = values.get("threshold"), values.get("clear_below")
    if threshold is None:
        raise InvalidInput(f"a {values['signal']} rule needs a threshold")
    if clear_below is not None and clear_below > threshold:
        raise InvalidInput(
            f"clear below ({clear_below}) must be at most the threshold ({threshold}), "
            "or the signal would clear while it fires"
        )


def save_rule(*, actor, values: dict, rule: HealthRule | None = None) -> HealthRule:
    require_platform_admin(actor, "edit the GPU health policy")
    validate_rule(values, instance=rule)
    with transaction.atomic():
        before = None
        if rule is not None:
            rule = HealthRule.objects.select_for_update().get(pk=rule.pk)
            before = {f: _plain(getattr(rule, f)) for f in RULE_FIELDS}
        else:
            rule = HealthRule()
        for f in RULE_FIELDS:
            if f in values:
                setattr(rule, f, values[f])
        rule.save()
        audit.record(
            actor=actor,
            verb="health_rule.created" if before is None else "health_rule.changed",
            obj=rule,
            tenant=None,
            before=before,
            after={f: _plain(getattr(rule, f)) for f in RULE_FIELDS},
        )
    return rule


def _plain(value):
    return str(value) if isinstance(value, Decimal) else value


# --- one health check ------------------------------------------------------------------------


@dataclass
class HealthCheck:
    unknown: str = ""  # why health is unknown (Prometheus unreachable); empty: it was read
    opened: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    tainted: list[str] = field(default_factory=list)
    untainted: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


def check_health(
    kube: KubeGateway,
    *,
    prometheus_url: str | None = None,
    now: datetime | None = None,
    cluster_name: str = "local",
) -> HealthCheck:
    """One ingest: read, open and close events, then bring taints and drains in line."""
    now = now or timezone.now()
    url = settings.PROMETHEUS_URL if prometheus_url is None else prometheus_url
    result = HealthCheck()
    ensure_default_rules()
    cluster, _ = Cluster.objects.get_or_create(name=cluster_name)
    labels_by_model = configured_product_labels()
    nodes = kube.list("Node")  # read once: the readings and the taints both work from it
    gpu_nodes = [
        info for info in (inventory.parse_node(n, labels_by_model) for n in nodes) if info.gpu_model
    ]
    node_names = {info.name for info in gpu_nodes}
    if not url:
        # Health checks are off, not failing: no node is marked (the page says why).
        result.unknown = "no Prometheus configured (PROMETHEUS_URL)"
        return result
    try:
        readings = read_signals(url) + node_readings(gpu_nodes)
    except PrometheusUnavailable as exc:
        result.unknown = f"Prometheus unreachable: {exc}"[:400]
        log.warning("GPU health unknown, nothing changed: %s", exc)
        _mark_unknown(cluster, node_names, result.unknown, now)
        return result
    rules = {r.pk: r.as_rule() for r in HealthRule.objects.filter(enabled=True)}
    known = defaultdict(set)
    for node, gpu in (
        HealthEvent.objects.filter(cluster=cluster)
        .filter_open_or_latched()
        .values_list("node_name", "gpu")
    ):
        known[node].add(gpu)
    found = policy.evaluate(readings, list(rules.values()), known)
    # Pods of nodes that may turn sick now, read before the transaction (no lock waits on the
    # API server).
    firing_nodes = {
        node
        for (node, _, rule_id), st in found.statuses.items()
        if st is policy.Status.FIRING and rules[rule_id].action != "warn"
    }
    pods_by_node = {node: _gpu_pods(kube, node) for node in sorted(firing_nodes)}
    tenants_by_ns = _tenants_by_namespace(kube) if firing_nodes else {}
    with transaction.atomic():
        Cluster.objects.select_for_update().get(pk=cluster.pk)  # one check at a time
        _apply_steps(cluster, found, rules, pods_by_node, tenants_by_ns, now, result)
        _record_node_states(cluster, node_names, found, now)
    enforce(kube, cluster, result, now=now, nodes=nodes)
    return result


def _apply_steps(cluster, found, rules, pods_by_node, tenants_by_ns, now, result) -> None:
    events = {
        (e.node_name, e.gpu, e.rule_id): e
        for e in HealthEvent.objects.filter(cluster=cluster, rule_id__in=list(rules))
        .filter_open_or_latched()
        .order_by("opened_at")
    }
    for key, st in sorted(found.statuses.items()):
        rule = rules[key[2]]
        event = events.get(key)
        state = None
        if event is not None:
            state = policy.OpenEvent(
                key=key,
                action=event.action,
                opened_at=event.opened_at,
                clear_since=event.clear_since,
                closed=event.closed_at is not None,
                latched=event.latched,
            )
        step = policy.step(state, rule, st, now)
        reading = found.readings.get(key)
        if step is policy.Step.OPEN:
            _open(cluster, key, rule, reading, pods_by_node, tenants_by_ns, now, result)
        elif event is None:
            continue
        elif step is policy.Step.FIRING:
            event.last_seen_at, event.clear_since = now, None
            if reading is not None:
                event.value = reading.value
            event.save(update_fields=["last_seen_at", "clear_since", "value"])
        elif step is policy.Step.START_CLEAR:
            event.clear_since = now
            event.save(update_fields=["clear_since"])
        elif step is policy.Step.CLOSE:
            reason = (
                HealthEvent.CloseReason.CLEARED
                if event.action == "warn"
                else HealthEvent.CloseReason.RECOVERED
            )
            _close(event, reason=reason, actor=None, now=now)
            result.closed.append(str(event))
        elif step is policy.Step.UNLATCH:
            event.latched = False
            event.save(update_fields=["latched"])


def _open(cluster, key, rule, reading, pods_by_node, tenants_by_ns, now, result) -> None:
    node, gpu, _ = key
    event = HealthEvent.objects.create(
        cluster=cluster,
        node_name=node,
        gpu=gpu,
        gpu_uuid=reading.uuid if reading else "",
        rule_id=rule.id,
        signal=rule.signal,
        action=rule.action,
        value=reading.value if reading else None,
        description=policy.describe(rule, reading)[:200],
        waive_billing=rule.waive_billing,
        opened_at=now,
        last_seen_at=now,
    )
    result.opened.append(str(event))
    if rule.action != "warn":
        for pod in pods_by_node.get(node, []):
            meta = pod["metadata"]
            HealthImpact.objects.get_or_create(
                event=event,
                pod_uid=meta.get("uid", ""),
                defaults={
                    "namespace": meta.get("namespace", ""),
                    "pod_name": meta["name"],
                    "tenant": tenants_by_ns.get(meta.get("namespace", "")),
                    "workload": _workload_of(pod),
                    "priority": (pod.get("spec") or {}).get("priority") or 0,
                    "created_at": now,
                },
            )
    if rule.action != "warn":
        notify(
            "gpu.health",
            None,
            subject=f"GPU health: {event.where} reported {event.description}",
            text=(
                f"{event.where} reported {event.description}. The portal "
                + ("tainted and drains" if rule.action == "drain" else "tainted")
                + f" node {node} ({event.impacts.count()} GPU pod(s) on it); it stays out of "
                "service until a platform admin acknowledges it."
            ),
            data={"node": node, "gpu": gpu, "uuid": event.gpu_uuid, "action": rule.action,
                  "signal": rule.signal, "value": _plain(event.value)},
        )  # fmt: skip
    audit.record(
        actor=None,
        verb="gpu_health.event_opened",
        obj=event,
        tenant=None,
        after={
            "node": node,
            "gpu": gpu,
            "uuid": event.gpu_uuid,
            "signal": rule.signal,
            "value": _plain(event.value),
            "action": rule.action,
            "rule": rule.id,
            "pods_on_node": event.impacts.count(),
        },
    )


def _close(event: HealthEvent, *, reason: str, actor, now: datetime) -> None:
    event.closed_at, event.close_reason = now, reason
    event.closed_by = actor if getattr(actor, "is_authenticated", False) else None
    # Acknowledged while still firing: the gauge keeps its value until the GPU is reset.
    event.latched = reason == HealthEvent.CloseReason.ACKNOWLEDGED and event.clear_since is None
    event.save(update_fields=["closed_at", "close_reason", "closed_by", "latched"])
    audit.record(
        actor=actor,
        verb="gpu_health.event_closed",
        obj=event,
        tenant=None,
        after={"reason": reason, "latched": event.latched, "action": event.action},
    )


def _record_node_states(cluster, node_names, found, now) -> None:
    open_by_node = defaultdict(set)
    for node, action in (
        HealthEvent.objects.filter(cluster=cluster).open().values_list("node_name", "action")
    ):
        open_by_node[node].add(action)
    for name in node_names | set(open_by_node):
        actions = open_by_node.get(name, set())
        read = name in found.nodes_read
        if actions & {"taint", "drain"}:
            state, message = NodeHealth.State.SICK, "tainted until a platform admin acknowledges"
        elif actions:
            state, message = NodeHealth.State.WARNING, "warnings open"
        elif read:
            state, message = NodeHealth.State.HEALTHY, ""
        else:
            state, message = NodeHealth.State.UNKNOWN, "no DCGM series for this node"
        NodeHealth.objects.update_or_create(
            cluster=cluster,
            node_name=name,
            defaults={"state": state, "message": message, "checked_at": now},
        )


def _mark_unknown(cluster, node_names, why: str, now) -> None:
    """Health unknown: say so, keep every taint and event as it is."""
    for name in node_names | set(
        NodeHealth.objects.filter(cluster=cluster).values_list("node_name", flat=True)
    ):
        NodeHealth.objects.update_or_create(
            cluster=cluster,
            node_name=name,
            defaults={"state": NodeHealth.State.UNKNOWN, "message": why[:500]},
        )


# --- the cluster in step -----------------------------------------------------------------------


def _gpu_pods(kube: KubeGateway, node: str) -> list[dict]:
    return drain_order(kube.list("Pod", field_selector=f"spec.nodeName={node}"))


def _tenants_by_namespace(kube: KubeGateway) -> dict[str, Tenant]:
    slugs = {
        ns["metadata"]["name"]: (ns["metadata"].get("labels") or {}).get(TENANT_LABEL)
        for ns in kube.list("Namespace", label_selector=TENANT_LABEL)
    }
    tenants = Tenant.objects.in_bulk([s for s in slugs.values() if s], field_name="slug")
    return {ns: tenants[slug] for ns, slug in slugs.items() if slug in tenants}


def _workload_of(pod: dict) -> Workload | None:
    labels = pod["metadata"].get("labels") or {}
    value = labels.get(WORKLOAD_LABEL, "")
    if labels.get(INSTANCE_LABEL) != settings.PORTAL_INSTANCE or not value.isdigit():
        return None
    return Workload.objects.filter(pk=int(value)).first()


def _own_taint(node: dict) -> bool:
    return any(
        t.get("key") == TAINT_KEY and t.get("value") == settings.PORTAL_INSTANCE
        for t in (node.get("spec") or {}).get("taints") or []
    )


def enforce(
    kube: KubeGateway,
    cluster: Cluster,
    result: HealthCheck | None = None,
    *,
    now=None,
    nodes: list[dict] | None = None,
) -> HealthCheck:
    """Taints and drains in line with the open events (what a lost message or a `kubectl edit`
    left behind is repaired here). Pools are re-read when a taint changed. `nodes`: the nodes
    the caller has just listed (else they are listed here)."""
    result = result or HealthCheck()
    now = now or timezone.now()
    causes: dict[str, list[str]] = defaultdict(list)
    for node_name, gpu, description in (
        HealthEvent.objects.filter(cluster=cluster)
        .sickening()
        .values_list("node_name", "gpu", "description")
    ):
        causes[node_name].append(f"{policy.where(node_name, gpu)}: {description}")
    sick = set(causes)
    changed = False
    for node in kube.list("Node") if nodes is None else nodes:
        name = node["metadata"]["name"]
        has = _own_taint(node)
        if (name in sick) == has:
            continue
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if not _is_own(t)]
        if name in sick:
            taints.append(
                {"key": TAINT_KEY, "value": settings.PORTAL_INSTANCE, "effect": TAINT_EFFECT}
            )
        # The resourceVersion makes the patch fail rather than drop a taint added meanwhile.
        kube.merge_patch(
            "Node",
            name,
            {
                "metadata": {"resourceVersion": node["metadata"].get("resourceVersion")},
                "spec": {"taints": taints or None},
            },
        )
        changed = True
        (result.tainted if name in sick else result.untainted).append(name)
        audit.record(
            actor=None,
            verb="node.health_tainted" if name in sick else "node.health_untainted",
            obj=None,
            object_type="node",
            tenant=None,
            after={
                "node": name,
                "taint": f"{TAINT_KEY}={settings.PORTAL_INSTANCE}:{TAINT_EFFECT}",
                # the signals that keep it sick; none left when the taint goes
                "because": causes.get(name, []),
            },
        )
    NodeHealth.objects.filter(cluster=cluster).update(tainted=False)
    NodeHealth.objects.filter(cluster=cluster, node_name__in=sick).update(tainted=True)
    _drain(kube, cluster, result, now)
    if changed:
        inventory_sync.sync_inventory(kube, cluster_name=cluster.name)
    return result


def _is_own(taint: dict) -> bool:
    return taint.get("key") == TAINT_KEY and taint.get("value") == settings.PORTAL_INSTANCE


def _drain(kube: KubeGateway, cluster: Cluster, result: HealthCheck, now) -> None:
    """Evict the GPU pods of nodes with an undrained drain event, lowest priority first; a pod
    a PodDisruptionBudget protects is tried again at the next check."""
    pending = (
        HealthEvent.objects.filter(cluster=cluster, action="drain", drained_at__isnull=True)
        .open()
        .order_by("opened_at")
    )
    by_node: dict[str, list[HealthEvent]] = defaultdict(list)
    for event in pending:
        by_node[event.node_name].append(event)
    tenants = _tenants_by_namespace(kube) if by_node else {}
    for node, events in by_node.items():
        first = events[0]
        blocked: list[str] = []
        stopped: list[HealthImpact] = []
        order = HealthImpact.objects.filter(event=first, evicted_at__isnull=False).count()
        for pod in _gpu_pods(kube, node):
            meta = pod["metadata"]
            impact, _ = HealthImpact.objects.get_or_create(
                event=first,
                pod_uid=meta.get("uid", ""),
                defaults={
                    "namespace": meta.get("namespace", ""),
                    "pod_name": meta["name"],
                    "tenant": tenants.get(meta.get("namespace", "")),
                    "workload": _workload_of(pod),
                    "priority": (pod.get("spec") or {}).get("priority") or 0,
                },
            )
            outcome = kube.evict(meta["name"], meta.get("namespace", ""))
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            if outcome == "blocked":
                blocked.append(key)
                impact.outcome = HealthImpact.Outcome.BLOCKED
                impact.save(update_fields=["outcome"])
                continue
            order += 1
            impact.outcome = (
                HealthImpact.Outcome.EVICTED if outcome == "evicted" else HealthImpact.Outcome.GONE
            )
            impact.evicted_at, impact.eviction_order = now, order
            impact.save(update_fields=["outcome", "evicted_at", "eviction_order"])
            if outcome == "evicted":
                result.evicted.append(key)
                stopped.append(impact)
                _tell_workload(impact, first)
        message = (
            f"a PodDisruptionBudget allows no disruption of {', '.join(blocked)}: tried again "
            "at the next check"
            if blocked
            else f"evicted {order} pod(s)"
        )
        result.blocked += blocked
        _tell_tenants(first, stopped)
        for event in events:
            event.drain_message = message[:500]
            if not blocked:
                event.drained_at = now
            event.save(update_fields=["drain_message", "drained_at"])
        audit.record(
            actor=None,
            verb="node.health_drained" if not blocked else "node.health_drain_blocked",
            obj=first,
            tenant=None,
            after={"node": node, "message": message[:500], "because": first.description},
        )


def _tell_tenants(event: HealthEvent, stopped: list[HealthImpact]) -> None:
    """Each team whose pods the drain stopped hears it on its channels and its owners' mail."""
    by_tenant: dict[int, list[HealthImpact]] = defaultdict(list)
    for impact in stopped:
        if impact.tenant_id is not None:
            by_tenant[impact.tenant_id].append(impact)
    for impacts in by_tenant.values():
        notify(
            "gpu.health",
            impacts[0].tenant,
            subject=f"{len(impacts)} of your pods stopped: {event.where} reported "
            f"{event.description}",
            text="\n".join(i.message for i in impacts),
            data={"node": event.node_name, "gpu": event.gpu, "pods": [i.pod_name for i in impacts]},
        )


def _tell_workload(impact: HealthImpact, event: HealthEvent) -> None:
    if impact.workload is None:
        return
    WorkloadEvent.objects.create(
        workload=impact.workload,
        reason="GPUHealth",
        message=f"stopped because {event.where} reported {event.description}",
    )


# --- acknowledging -----------------------------------------------------------------------------


def acknowledge_node(*, actor, node_name: str, cluster_name: str = "local") -> int:
    """A platform admin takes the node back: its open events close (the taint goes at the next
    enforce, which the caller hastens). Returns how many closed."""
    require_platform_admin(actor, "acknowledge GPU health events")
    now = timezone.now()
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().filter(name=cluster_name).first()
        if cluster is None:
            raise NotFound(f"no cluster named {cluster_name}")
        events = list(
            HealthEvent.objects.select_for_update()
            .filter(cluster=cluster, node_name=node_name)
            .open()
        )
        if not events:
            raise InvalidTransition(
                f"node {node_name} has no open health events: nothing to acknowledge"
            )
        for event in events:
            _close(event, reason=HealthEvent.CloseReason.ACKNOWLEDGED, actor=actor, now=now)
        NodeHealth.objects.filter(cluster=cluster, node_name=node_name).update(
            state=NodeHealth.State.HEALTHY, message=f"acknowledged by {actor.get_username()}"
        )
        notify(
            "gpu.health",
            None,
            subject=f"GPU health: node {node_name} back in service",
            text=f"{actor.get_username()} acknowledged node {node_name}: {len(events)} event(s) "
            "closed; its taint is removed and its capacity returns to the pools.",
            data={"node": node_name, "closed": len(events)},
        )
    return len(events)
