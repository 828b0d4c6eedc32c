"""Layouts that follow the queue, acting: the periodic run reads what waits for a shape, the
fleet and each model's policy, lets `scheduler.mig.elastic.decide` choose, and applies a change
as a plan through the drained rollout (the console's manual plans stay as they are).

What waits for a shape: GPU pods Kueue let through (no scheduling gate: a Job's pods exist only
once admitted) that kube-scheduler marked `Unschedulable`; how long they waited counts from
their creation. Level-triggered: every run reads the cluster and the database afresh, a lost
run is the next run, and a plan whose rollout died is resumed by the next run (it holds no
person's authority: `rollout.begin(controller=...)` applies only the plans it made).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog import facts
from catalog.product_labels import model_for_product
from core import audit
from core.errors import InvalidInput
from core.permissions import require_platform_admin
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Node
from scheduler.cluster.render.labels import GPU_PRODUCT_LABEL
from scheduler.mig import elastic, proposals, rollout
from scheduler.mig import planner as pl
from scheduler.mig.models import ElasticLayout, Plan

CONTROLLER = "elastic layouts"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def policy_for(model_key: str) -> elastic.ElasticPolicy:
    row = ElasticLayout.objects.filter(gpu_model=model_key).first()
    if row is None:
        return elastic.ElasticPolicy(
            min_wait_s=settings.ELASTIC_LAYOUTS_MIN_WAIT_S,
            max_gpus_per_hour=settings.ELASTIC_LAYOUTS_MAX_GPUS_PER_HOUR,
            paused=not settings.ELASTIC_LAYOUTS_ON,
        )
    return elastic.ElasticPolicy(row.min_wait_s, row.max_gpus_per_hour, row.paused)


def set_policy(
    *, actor, gpu_model: str, paused: bool, min_wait_s: int, max_gpus_per_hour: int
) -> ElasticLayout:
    """A platform admin sets a model's elastic layouts; bad values change nothing (a 400 that
    names the field), every change is audited."""
    require_platform_admin(actor, "set elastic layouts")
    try:
        model = facts.get_model(gpu_model)
    except facts.UnknownModel:
        raise InvalidInput(
            f"no GPU model {gpu_model!r} in the catalog", field="gpu_model"
        ) from None
    for name, value in (("min_wait_s", min_wait_s), ("max_gpus_per_hour", max_gpus_per_hour)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31 - 1:
            raise InvalidInput(f"{name} must be a whole number from 0", field=name)
    wanted = elastic.ElasticPolicy(min_wait_s, max_gpus_per_hour, paused)
    for name, words in wanted.problems().items():
        raise InvalidInput(f"{name} {words}", field=name)
    row = ElasticLayout.objects.filter(gpu_model=model.key).first()
    before = None if row is None else _fields(row)
    row = row or ElasticLayout(gpu_model=model.key)
    row.paused, row.min_wait_s, row.max_gpus_per_hour = paused, min_wait_s, max_gpus_per_hour
    row.save()
    audit.record(
        actor=actor, verb="elastic_layout.set", obj=row, tenant=None, before=before,
        after=_fields(row),
    )  # fmt: skip
    return row


def _fields(row: ElasticLayout) -> dict:
    return {
        "gpu_model": row.gpu_model,
        "paused": row.paused,
        "min_wait_s": row.min_wait_s,
        "max_gpus_per_hour": row.max_gpus_per_hour,
    }


def _gpu_requests(pod: dict) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources", {})
        asked = {**res.get("requests", {}), **res.get("limits", {})}
        for name, value in asked.items():
            if name.startswith("nvidia.com/"):
                out[name] += int(value)
    return dict(out)


def _model_of(pod: dict, node_models: dict[str, str]) -> str | None:
    selector = pod.get("spec", {}).get("nodeSelector", {})
    if GPU_PRODUCT_LABEL in selector:
        model = model_for_product(selector[GPU_PRODUCT_LABEL])
        return model.key if model else None
    return node_models.get(selector.get(HOSTNAME_LABEL, ""))


def _unschedulable(pod: dict) -> bool:
    if pod.get("status", {}).get("phase") != "Pending" or pod["spec"].get("schedulingGates"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )


def waiting_asks(pods: list[dict], node_models: dict[str, str], now: datetime) -> dict:
    """Model key -> the asks that wait for a shape (pure over the pods read)."""
    out: dict[str, list[elastic.WaitingAsk]] = defaultdict(list)
    for pod in pods:
        if not _unschedulable(pod):
            continue
        key = _model_of(pod, node_models)
        if key is None:
            continue
        model = facts.get_model(key)
        created = parse_datetime(pod["metadata"].get("creationTimestamp", "")) or now
        for resource, units in _gpu_requests(pod).items():
            slug = proposals.class_of(model, resource, shared=False)
            out[key].append(elastic.WaitingAsk(slug, units, (now - created).total_seconds()))
    return dict(out)


def changed_last_hour(model_key: str, now: datetime) -> int:
    """GPUs this controller re-shaped (or is re-shaping) for the model in the last hour."""
    changed = Plan.objects.filter(
        created_at__gte=now - timedelta(hours=1),
        policy__controller=CONTROLLER,
        policy__gpu_model=model_key,
    ).values_list("summary__changed_gpus", flat=True)
    return sum(int(n or 0) for n in changed)


def run_once(kube: KubeGateway, *, now: datetime | None = None, nodes=None) -> list[Plan]:
    """One run: resume this controller's rollout if its worker died; otherwise, while no
    rollout is in progress, propose and apply the changes each model's queue needs. `nodes`
    limits it to those nodes (None: every node of the inventory)."""
    now = now or timezone.now()
    mine = Plan.objects.filter(status=Plan.Status.APPLYING, policy__controller=CONTROLLER)
    for plan in mine:
        if rollout.is_stuck(plan):
            rollout.apply_plan(kube, plan.pk, controller=CONTROLLER)
    if Plan.objects.filter(status=Plan.Status.APPLYING).exists():
        return []  # one rollout at a time: its nodes are changing
    configs, dp_configs = proposals.known_mig_configs(), proposals.known_device_plugin_configs()
    gpus, labels = proposals.fleet_from_inventory(configs, dp_configs)
    node_models = dict(Node.objects.exclude(gpu_model="").values_list("name", "gpu_model"))
    asks = waiting_asks(kube.list("Pod"), node_models, now)
    made = []
    for model_key, waiting in sorted(asks.items()):
        scope = frozenset(
            g.node for g in gpus if g.model == model_key and (nodes is None or g.node in nodes)
        )
        model_gpus = [g for g in gpus if g.node in scope]  # the pool's GPUs: all it sees
        decision = elastic.decide(
            model_gpus, waiting, policy_for(model_key), changed_last_hour(model_key, now)
        )
        if not decision.changes:
            continue
        plan = _propose(decision, model_key, (gpus, labels, configs, dp_configs))
        made.append(rollout.apply_plan(kube, plan.pk, controller=CONTROLLER))
    return made


def _propose(decision: elastic.Decision, model_key: str, fleet: proposals.Fleet) -> Plan:
    gpus = fleet[0]
    proposed = {(c.node, c.index): c.after for c in decision.changes}
    plan_result = pl.result_of("elastic", gpus, proposed, decision.demand)
    touched = frozenset(c.node for c in decision.changes)
    policy = pl.Policy(nodes=touched)
    reason = decision.reason(facts.get_model(model_key))
    plan = proposals.save_plan(
        actor=None,
        result=plan_result,
        policy=policy,
        policy_json={
            "controller": CONTROLLER,
            "gpu_model": model_key,
            "nodes": sorted(touched),
            "reason": reason,
            "drain": False,  # idle GPUs only: nothing on the node is evicted
        },
        fleet=fleet,
    )
    # The why, for the console and the audit log: "waiting for …: node GPU i: a → b".
    audit.record(
        actor=None, verb="plan.elastic_change", obj=plan, tenant=None,
        after={"gpu_model": model_key, "reason": reason, "gpus": len(decision.changes)},
    )  # fmt: skip
    return plan
