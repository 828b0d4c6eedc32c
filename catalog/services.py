"""Writes of the catalog: the resource classes (and their empty pools) a GPU model offers, and
the platform team's edits of them: a class's price and on/off, a pool's capacity, overcommit
and cohort policy. Each edit is one audit event, with what it was and what it became."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import TypedDict, Unpack

from django.core.exceptions import ValidationError
from django.db import transaction

from catalog import facts, hooks, idle_policy, run_limits
from catalog.models import MAX_GRANT_DAYS, Pool, ResourceClass
from core import audit
from core.errors import InvalidInput
from core.permissions import require_platform_admin

# What the platform team edits by hand; the rest of a class is the catalog's.
EDITABLE_FIELDS = ("price_per_hour", "active")
PRICE_FIELD = ResourceClass._meta.get_field("price_per_hour")
POOL_FIELDS = [
    "capacity",
    "overcommit_ratio",
    "source",
    "outside_use",
    "outside_namespaces",
    "borrowing_limit",
    "lend_idle",
    "reclaim_grace_s",
    "max_run_s",
    "max_grant_days",
    *idle_policy.FIELDS,
]


class PoolChanges(TypedDict, total=False):
    """What `set_pool` may change. A key left out (or None, where None means nothing else) stays
    as it is; for `borrowing_limit`, `max_run_s` and `idle_threshold_pct`, None is "no limit"
    (no idle policy)."""

    capacity: int | None
    overcommit_ratio: Decimal | None
    borrowing_limit: int | None
    lend_idle: bool | None
    reclaim_grace_s: int | None
    max_run_s: int | None
    max_grant_days: int | None
    idle_threshold_pct: int | None
    idle_warn_after_s: int | None
    idle_suspend_after_s: int | None
    idle_protect_s: int | None


MAX_RECLAIM_GRACE_S = 7 * 24 * 3600


def catalog_resource_classes(
    model: facts.GpuModel, shared_replicas: int = facts.SHARED_REPLICAS
) -> list[dict]:
    """The resource classes a GPU model offers, as field dicts (pure)."""
    price = model.default_price_per_hour or Decimal(0)
    classes = [
        dict(
            slug=facts.class_slug(model, ResourceClass.Kind.WHOLE),
            gpu_model=model.key,
            kind=ResourceClass.Kind.WHOLE,
            profile="",
            resource_name=facts.WHOLE_GPU_RESOURCE,
            gpu_fraction=Decimal(1),
            memory_gb=model.memory_gb,
            price_per_hour=price,
        ),
        dict(
            slug=facts.class_slug(model, ResourceClass.Kind.SHARED),
            gpu_model=model.key,
            kind=ResourceClass.Kind.SHARED,
            profile="",
            resource_name=facts.SHARED_GPU_RESOURCE,
            gpu_fraction=(Decimal(1) / shared_replicas).quantize(Decimal("0.0001")),
            memory_gb=model.memory_gb // shared_replicas,
            price_per_hour=(price / shared_replicas).quantize(Decimal("0.0001")),
        ),
    ]
    for profile in model.profiles.values():
        fraction = model.gpu_fraction(profile)
        classes.append(
            dict(
                slug=facts.class_slug(model, ResourceClass.Kind.MIG, profile.name),
                gpu_model=model.key,
                kind=ResourceClass.Kind.MIG,
                profile=profile.name,
                resource_name=profile.resource_name,
                gpu_fraction=fraction.quantize(Decimal("0.0001")),
                memory_gb=profile.memory_gb,
                price_per_hour=(price * fraction).quantize(Decimal("0.0001")),
            )
        )
    return classes


@transaction.atomic
def ensure_resource_classes(model_keys: list[str]) -> list[ResourceClass]:
    """Create the catalog's classes (and empty pools) for these models; existing rows keep the
    platform team's prices. Idempotent."""
    out = []
    for key in model_keys:
        model = facts.get_model(key)
        for fields in catalog_resource_classes(model):
            rc, _ = ResourceClass.objects.get_or_create(slug=fields["slug"], defaults=fields)
            Pool.objects.get_or_create(resource_class=rc)
            out.append(rc)
    return out


def update_resource_class(
    *,
    actor,
    resource_class: ResourceClass,
    price_per_hour: Decimal | str | int | None = None,
    active: bool | None = None,
) -> ResourceClass:
    """Set a class's price per unit-hour and/or whether teams may ask for it. None leaves a
    field as it is; a call that changes nothing writes nothing (and no event)."""
    require_platform_admin(actor, "change resource classes")
    changes: dict[str, object] = {}
    if price_per_hour is not None:
        try:
            price = PRICE_FIELD.clean(Decimal(str(price_per_hour)), None)
        except (InvalidOperation, ValidationError) as exc:
            detail = "; ".join(getattr(exc, "messages", [])) or "price must be a number"
            raise InvalidInput(f"price: {detail}", field="price_per_hour") from None
        changes["price_per_hour"] = price
    if active is not None:
        if not isinstance(active, bool):
            raise InvalidInput("active must be true or false", field="active")
        changes["active"] = active
    with transaction.atomic():
        rc = ResourceClass.objects.select_for_update().get(pk=resource_class.pk)
        changed = [f for f, v in changes.items() if getattr(rc, f) != v]
        if changed:
            before = audit.snapshot(rc, changed)
            for f in changed:
                setattr(rc, f, changes[f])
            rc.save(update_fields=changed)
            rc.refresh_from_db(fields=changed)  # the stored (rounded) values, for the event
            audit.record(
                actor=actor,
                verb="resource_class.updated",
                obj=rc,
                tenant=None,
                before=before,
                after=audit.snapshot(rc, changed),
            )
    return rc


def set_pool(*, actor, resource_class: ResourceClass, **changes: Unpack[PoolChanges]) -> Pool:
    """Change a pool's capacity, overcommit, cohort policy (borrowing, lending, the grace
    before borrowed units are taken back) or the maximum run time of its jobs: one audit event;
    the reconciler then writes the new limits into every team's ClusterQueue.
    `borrowing_limit=None` is "no limit", and so is `max_run_s=None` (jobs already submitted
    keep the limit they were told); `idle_threshold_pct=None` turns the idle policy off."""
    require_platform_admin(actor, "change pools")
    unknown = set(changes) - set(PoolChanges.__annotations__)
    if unknown:
        raise InvalidInput(f"a pool has no {', '.join(sorted(unknown))} to change")
    capacity = changes.get("capacity")
    overcommit_ratio = changes.get("overcommit_ratio")
    lend_idle = changes.get("lend_idle")
    reclaim_grace_s = changes.get("reclaim_grace_s")
    max_grant_days = changes.get("max_grant_days")
    if capacity is not None and (isinstance(capacity, bool) or capacity < 0):
        raise InvalidInput("capacity must be a whole number ≥ 0", field="capacity")
    if overcommit_ratio is not None and overcommit_ratio < 0:
        raise InvalidInput("overcommit ratio must be ≥ 0", field="overcommit_ratio")
    borrowing_limit = changes.get("borrowing_limit")
    if borrowing_limit is not None and (
        isinstance(borrowing_limit, bool)
        or not isinstance(borrowing_limit, int)
        or borrowing_limit < 0
    ):
        raise InvalidInput(
            "borrowing limit must be a whole number ≥ 0, or empty for no limit",
            field="borrowing_limit",
        )
    if reclaim_grace_s is not None and (
        isinstance(reclaim_grace_s, bool)
        or not isinstance(reclaim_grace_s, int)
        or not 0 <= reclaim_grace_s <= MAX_RECLAIM_GRACE_S
    ):
        raise InvalidInput(
            f"reclaim grace must be whole seconds from 0 to {MAX_RECLAIM_GRACE_S}",
            field="reclaim_grace_s",
        )
    if max_grant_days is not None and (
        isinstance(max_grant_days, bool)
        or not isinstance(max_grant_days, int)
        or not 1 <= max_grant_days <= MAX_GRANT_DAYS
    ):
        raise InvalidInput(
            f"the longest grant must be whole days from 1 to {MAX_GRANT_DAYS}",
            field="max_grant_days",
        )
    if lend_idle is not None and not isinstance(lend_idle, bool):
        raise InvalidInput("lend_idle must be true or false", field="lend_idle")
    max_run_s = changes.get("max_run_s")
    if "max_run_s" in changes:
        max_run_s = run_limits.check_max_run_s(max_run_s)
    with transaction.atomic():
        pool, _ = Pool.objects.select_for_update().get_or_create(resource_class=resource_class)
        before = audit.snapshot(pool, POOL_FIELDS)
        if capacity is not None:
            # a capacity set by hand is the whole of it (the next inventory sync sets it again)
            pool.capacity, pool.outside_use, pool.outside_namespaces = capacity, 0, {}
            pool.source = Pool.Source.MANUAL
        if overcommit_ratio is not None:
            pool.overcommit_ratio = overcommit_ratio
        if "borrowing_limit" in changes:
            pool.borrowing_limit = borrowing_limit
        if reclaim_grace_s is not None:
            pool.reclaim_grace_s = reclaim_grace_s
        if lend_idle is not None:
            pool.lend_idle = lend_idle
        if "max_run_s" in changes:
            pool.max_run_s = max_run_s
        if max_grant_days is not None:
            pool.max_grant_days = max_grant_days
        if "idle_threshold_pct" in changes:
            pool.idle_threshold_pct = changes["idle_threshold_pct"]  # type: ignore[assignment]
        for field in ("idle_warn_after_s", "idle_suspend_after_s", "idle_protect_s"):
            if changes.get(field) is not None:
                setattr(pool, field, changes[field])  # type: ignore[literal-required]
        # the policy is checked whole, as it will be in force (a new warning time against the
        # suspension time already set): a refusal rolls the whole change back
        idle_policy.check_idle_policy(*(getattr(pool, f) for f in idle_policy.FIELDS))
        pool.save()
        policy = ("borrowing_limit", "lend_idle", "reclaim_grace_s")
        if any(before[f] != getattr(pool, f) for f in policy):
            # every tenant's queues follow a pool's lending: reconcile all (portal/wiring.py)
            transaction.on_commit(hooks.fleet_policy_changed)
        audit.record(
            actor=actor,
            verb="pool.changed",
            obj=pool,
            tenant=None,
            before=before,
            after=audit.snapshot(pool, POOL_FIELDS),
        )
    return pool
