"""The capacity check of every ask, booking, extension and direct grant: which resource
classes and amounts are valid, which dates, how much of a pool is still free at every instant
of the asked window, and the tenant's ceiling. The arithmetic over time is the pure
`tenants.capacity_time`; this module reads the grants that overlap a window into it. Read
without locks for display and early checks, and again under the pools' and tenant's locks
(`tenants.services.locks`) when a grant is made."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import cast

from django.db.models import Q, QuerySet
from django.utils import timezone

from catalog import gpu_serving, slices
from catalog.models import Pool, ResourceClass
from core.errors import CapacityExceeded, InvalidInput, QuotaExceeded
from tenants import capacity_time
from tenants.capacity_time import Hold, Number, Window
from tenants.models import QuotaGrant, Tenant


def resolve_items(items: Mapping) -> list[tuple[ResourceClass, int]]:
    if not items:
        raise InvalidInput("ask for at least one resource class", field="items")
    resolved: list[tuple[ResourceClass, int]] = []
    slugs = [k.slug if isinstance(k, ResourceClass) else str(k) for k in items]
    known = {rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=slugs, active=True)}
    for key, amount in items.items():
        slug = key.slug if isinstance(key, ResourceClass) else str(key)
        if slug not in known:
            raise InvalidInput(
                f"unknown resource class {slug!r}; see /api/v1/resource-classes/", field="items"
            )
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise InvalidInput(f"{slug}: amount must be a whole number", field="items")
        if amount <= 0:
            raise InvalidInput(f"{slug}: amount must be at least 1, not {amount}", field="items")
        resolved.append((known[slug], amount))
    return resolved


def check_dates(starts_at: datetime, ends_at: datetime | None, now: datetime) -> None:
    if starts_at < now - timedelta(minutes=5):
        raise InvalidInput(
            "start must not be in the past: choose now or a later start", field="starts_at"
        )
    if ends_at is not None:
        if ends_at <= now:
            raise InvalidInput("end must be in the future", field="ends_at")
        if ends_at <= starts_at:
            raise InvalidInput("end must be after the start: move the end later", field="ends_at")


def check_horizon(
    resource_classes: list[ResourceClass],
    ends_at: datetime | None,
    now: datetime,
    *,
    starts_at: datetime | None = None,
) -> None:
    """Refuse a window its classes' pools do not allow (`Pool.max_grant_days`, the longest a
    grant may be asked for): a start further ahead than that, counted from now (the horizon of
    booking ahead), or a window longer than that (a mistyped year is an error at the date, not
    a grant for decades). A class without a pool has nothing to grant (`check_capacity`)."""
    start = max(starts_at or now, now)
    pools = Pool.objects.filter(resource_class__in=resource_classes).select_related(
        "resource_class"
    )
    for pool in sorted(pools, key=lambda p: p.max_grant_days):
        days, name = pool.max_grant_days, pool.resource_class.display_name
        horizon = now + timedelta(days=days)
        if start > horizon:
            raise InvalidInput(
                f"{name} is booked at most {days} days ahead: choose a start on or before "
                f"{horizon:%Y-%m-%d %H:%M %Z}",
                field="starts_at",
            )
        limit = start + timedelta(days=days)
        if ends_at is not None and ends_at > limit:
            raise InvalidInput(
                f"{name} is granted for at most {days} days at a time: choose an end on or "
                f"before {limit:%Y-%m-%d %H:%M %Z}",
                field="ends_at",
            )


def latest_end(resource_class: ResourceClass, now: datetime) -> datetime | None:
    """The furthest end an ask of this class made at `now` may have (None: it has no pool)."""
    pool = Pool.objects.filter(resource_class=resource_class).only("max_grant_days").first()
    return now + timedelta(days=pool.max_grant_days) if pool else None


def window_words(window: Window) -> str:
    """ "from 2026-12-03 00:00 UTC until 2026-12-06 00:00 UTC", as messages say a window."""
    end = "on (open-ended)" if window.ends_at is None else f"until {when(window.ends_at)}"
    return f"from {when(window.starts_at)} {end}"


def when(at: datetime) -> str:
    return f"{timezone.localtime(at):%Y-%m-%d %H:%M %Z}"


def grant_holds(grants: QuerySet[QuotaGrant], window: Window) -> list[Hold]:
    """The active grants of `grants` that hold units at some instant of `window`, as plain
    holds keyed by resource class id (one query; the caller re-keys them as it counts)."""
    qs = grants.filter(state=QuotaGrant.State.ACTIVE).filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=window.starts_at)
    )
    if window.ends_at is not None:
        qs = qs.filter(starts_at__lt=window.ends_at)
    rows = qs.order_by().values_list(
        "pk", "resource_class_id", "amount", "starts_at", "ends_at", "tenant__slug"
    )
    return [Hold(rc, n, s, e, slug, pk) for pk, rc, n, s, e, slug in rows]


def granted_units(resource_class_id: int, now: datetime, window: Window | None = None) -> int:
    """The most units of the class granted at any instant of `window` (from `now` on)."""
    window = window or Window(now)
    holds = grant_holds(QuotaGrant.objects.filter(resource_class_id=resource_class_id), window)
    return int(capacity_time.profile(holds).peak(window.starts_at, window.ends_at))


def free_capacity(
    resource_class: ResourceClass, now: datetime | None = None, window: Window | None = None
) -> int:
    """Units approvals may still hand out at every instant of `window` (from now on when
    none): read without a lock, for display and early checks."""
    now = now or timezone.now()
    pool = Pool.objects.filter(resource_class=resource_class).first()
    grantable = pool.grantable if pool else 0
    return max(0, grantable - granted_units(resource_class.pk, now, window))


def tenant_gpu_equivalents(tenant: Tenant, now: datetime, window: Window | None = None) -> Decimal:
    """The most GPU-equivalents the tenant holds at any instant of `window` (from now on)."""
    window = window or Window(now)
    holds = grant_holds(QuotaGrant.objects.filter(tenant=tenant), window)
    fractions = dict(
        ResourceClass.objects.filter(pk__in={h.key for h in holds}).values_list(
            "pk", "gpu_fraction"
        )
    )
    as_gpus = [replace(h, key="gpu", amount=fractions[cast(int, h.key)] * h.amount) for h in holds]
    return Decimal(capacity_time.profile(as_gpus).peak(window.starts_at, window.ends_at))


def plain_number(number: Decimal) -> Decimal:
    """12.00 as 12, 0.50 as 0.5: how a message shows a number read from a decimal column."""
    return number.quantize(Decimal(1)) if number == number.to_integral() else number.normalize()


def check_ceiling(
    tenant: Tenant,
    items: list[tuple[ResourceClass, int]],
    now: datetime,
    window: Window | None = None,
) -> None:
    """Refuse what would take the tenant above its ceiling at some instant of `window` (from
    now on when none): its own, or the platform's default where it has none
    (`Tenant.effective_gpu_ceiling`)."""
    window = window or Window(now)
    ceiling = tenant.effective_gpu_ceiling
    held = tenant_gpu_equivalents(tenant, now, window)
    asked = sum((rc.gpu_fraction * n for rc, n in items), Decimal(0))
    if held + asked > ceiling:
        room = plain_number(max(Decimal(0), ceiling - held))
        ceiling, held, asked = plain_number(ceiling), plain_number(held), plain_number(asked)
        if tenant.gpu_ceiling is None:
            whose = " (the platform's default ceiling)"
            fix = f"ask the platform team to set a ceiling for {tenant.slug}"
        else:
            whose, fix = "", f"ask the platform team to raise {tenant.slug}'s ceiling"
        busiest = f" at its busiest {window_words(window)}" if window.starts_at > now + _NOW else ""
        raise QuotaExceeded(
            f"{tenant.slug} may hold at most {ceiling:g} GPU-equivalents{whose}; it holds "
            f"{held:g}{busiest} and this asks for {asked:g} more (room left: {room:g}); ask for "
            f"less, or {fix}",
            field="items",
        )


_NOW = timedelta(minutes=5)  # a start this close to now is "now", as `check_dates` takes it


def check_capacity(
    items: list[tuple[ResourceClass, int]],
    now: datetime,
    *,
    pools: Mapping[int, Pool] | None = None,
    window: Window | None = None,
    extending: int | None = None,
) -> None:
    """Refuse when any class would be granted beyond capacity × overcommit at some instant of
    `window` (from now on when none): the interval sweep of `tenants.capacity_time`. Pass the
    pools that `lock_rows` locked (first, in resource-class order) and the check holds until
    the transaction commits, so concurrent approvals serialise; without them it reads the
    pools unlocked (an early check, made again under the locks). `extending`: the grant an
    extension moves, whose own units are not counted against it."""
    window = window or Window(now)
    ids = sorted(rc.pk for rc, _ in items)
    if pools is None:
        pools = {p.resource_class_id: p for p in Pool.objects.filter(resource_class_id__in=ids)}
    grants = QuotaGrant.objects.filter(resource_class_id__in=ids)
    if extending is not None:
        grants = grants.exclude(pk=extending)
    holds = grant_holds(grants, window)
    limits: dict[Hashable, Number] = {rc_id: pool.grantable for rc_id, pool in pools.items()}
    asked: dict[Hashable, Number] = {rc.pk: n for rc, n in items}
    holds += _dra_slices(items, pools, window, limits, asked, extending)
    over = capacity_time.overruns(limits, holds, asked, window.starts_at, window.ends_at)
    if over and isinstance(over[0].key, tuple):  # a DRA model's slices
        raise CapacityExceeded(_slices_refusal(over[0], window, now), field="items")
    if over:
        rc_id = cast(int, over[0].key)  # keyed by resource class id, as `grant_holds` reads
        classes = {rc.pk: rc for rc, _ in items}
        raise CapacityExceeded(
            refusal(over[0], classes[rc_id], pools.get(rc_id), window, now), field="items"
        )


DRA_SLICES = "dra-slices"


def _dra_slices(
    items: list[tuple[ResourceClass, int]],
    pools: Mapping[int, Pool],
    window: Window,
    limits: dict[Hashable, Number],
    asked: dict[Hashable, Number],
    extending: int | None,
) -> list[Hold]:
    """A model served through DRA has no layout: any class of it is cut from the same GPUs, so
    its grants together may not pass its GPUs' compute slices (each class alone is bounded by
    its pool, what the GPUs could be cut into). Adds the model's limit and ask under
    (DRA_SLICES, model) and returns the holds of every grant of the model's classes."""
    models = sorted({rc.gpu_model for rc, _ in items if gpu_serving.through_dra(rc.gpu_model)})
    if not models:
        return []
    classes = {rc.pk: rc for rc in ResourceClass.objects.filter(gpu_model__in=models)}
    grants = QuotaGrant.objects.filter(resource_class_id__in=classes)
    if extending is not None:
        grants = grants.exclude(pk=extending)
    out = []
    for h in grant_holds(grants, window):
        rc = classes[cast(int, h.key)]
        out.append(
            replace(h, key=(DRA_SLICES, rc.gpu_model), amount=h.amount * slices.slices_per_unit(rc))
        )
    for model in models:
        whole = [rc for rc in classes.values() if rc.gpu_model == model and rc.kind == "whole"]
        pool = (
            (pools.get(whole[0].pk) or Pool.objects.filter(resource_class=whole[0]).first())
            if whole
            else None
        )
        limits[(DRA_SLICES, model)] = (pool.grantable if pool else 0) * slices.SLICES_PER_GPU
        asked[(DRA_SLICES, model)] = sum(
            n * slices.slices_per_unit(rc) for rc, n in items if rc.gpu_model == model
        )
    return out


def _slices_refusal(over: capacity_time.Overrun, window: Window, now: datetime) -> str:
    model = cast(tuple, over.key)[1]
    room, limit = int(over.room), int(over.limit)
    words = (
        f"{model} is served through DRA, its classes cut from the same GPUs: asked for "
        f"{over.asked} compute slices but only {room} of its {limit} can still be granted"
    )
    if window.ends_at is not None or window.starts_at > now + _NOW:
        words += (
            f" at every instant {window_words(window)} (at {when(over.at)} {over.held} are held)"
        )
    return words + f"; ask for {room} slices or fewer, or ask the platform team for more capacity"


def refusal(
    over: capacity_time.Overrun,
    rc: ResourceClass,
    pool: Pool | None,
    window: Window,
    now: datetime,
) -> str:
    """What a refused ask is told: how many fit the window, the earliest window of the same
    length that fits, and the open-ended grants that block it for ever (which only the
    platform team can give an end)."""
    room, limit = int(over.room), int(over.limit)
    words = f"{rc.slug}: asked for {over.asked} but only {room} of {limit} can still be granted"
    if window.ends_at is not None or window.starts_at > now + _NOW:
        busy = f"at {when(over.at)} {over.held} are held"
        words += f" at every instant {window_words(window)} ({busy})"
    fit = earliest_window(rc, int(over.asked), window, now, pool) if pool else None
    if fit is not None:
        words += f"; the earliest window of the same length that fits is {window_words(fit)}"
    if over.open_ended:
        # by grant number, not by team: the requester may be another team (the console
        # finds the grant by its number)
        named = ", ".join(f"grant #{h.ref}: {h.amount} units" for h in over.open_ended)
        words += (
            f"; open-ended grants hold every instant from their start ({named}): the platform "
            "team may give them an end"
        )
    return words + f"; ask for {room} or fewer, or ask the platform team for more capacity"


def earliest_window(
    rc: ResourceClass, amount: int, window: Window, now: datetime, pool: Pool
) -> Window | None:
    """The earliest window of `window`'s length, from its start on, in which `amount` units
    of the class fit at every instant, starting within the pool's horizon (None: none does)."""
    latest_start = now + timedelta(days=pool.max_grant_days)
    reach = Window(
        window.starts_at, None if window.length is None else latest_start + window.length
    )
    holds = grant_holds(QuotaGrant.objects.filter(resource_class=rc), reach)
    start = capacity_time.earliest_fit(
        pool.grantable,
        holds,
        amount,
        not_before=window.starts_at,
        length=window.length,
        latest_start=latest_start,
    )
    if start is None:
        return None
    return Window(start, None if window.length is None else start + window.length)
