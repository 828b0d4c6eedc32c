"""Opening and closing GPU health events: each step the policy takes in a check (open, still
firing, clearing, close, unlatch), with the GPU pods a sick node held at the time, the platform
team told and one audit event; and a platform admin's acknowledgement, which closes a node's
open events (its taint goes at the next enforce)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core import audit
from core.errors import InvalidTransition, NotFound
from core.permissions import require_platform_admin
from scheduler.cluster.models import Cluster
from scheduler.health import policy
from scheduler.health.models import HealthEvent, HealthImpact, NodeHealth
from scheduler.health.pods import workload_of
from scheduler.health.rules import plain
from tenants.notifications import notify


def apply_steps(cluster, found, rules, pods_by_node, tenants_by_ns, now, result) -> None:
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
                    "workload": workload_of(pod),
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
                  "signal": rule.signal, "value": plain(event.value)},
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
            "value": plain(event.value),
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
