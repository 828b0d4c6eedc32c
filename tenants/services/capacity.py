"""The capacity check of every ask and direct grant: which resource classes and amounts are
valid, which dates, how much of a pool is still free, and the tenant's ceiling. Read without
locks for display and early checks, and again under the pools' and tenant's locks
(`tenants.services.locks`) when a grant is made."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from catalog.models import Pool, ResourceClass
from core.errors import CapacityExceeded, InvalidInput, QuotaExceeded
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
        raise InvalidInput("start must not be in the past", field="starts_at")
    if ends_at is not None:
        if ends_at <= now:
            raise InvalidInput("end must be in the future", field="ends_at")
        if ends_at <= starts_at:
            raise InvalidInput("end must be after the start", field="ends_at")


def check_horizon(
    resource_classes: list[ResourceClass], ends_at: datetime | None, now: datetime
) -> None:
    """Refuse an end further ahead than the classes' pools allow (`Pool.max_grant_days`, the
    longest a grant may be asked for): a mistyped year is an error at the date, not a grant
    for decades. A class without a pool has nothing to grant (`check_capacity` says so)."""
    if ends_at is None:
        return
    pools = Pool.objects.filter(resource_class__in=resource_classes).select_related(
        "resource_class"
    )
    for pool in sorted(pools, key=lambda p: p.max_grant_days):
        limit = now + timedelta(days=pool.max_grant_days)
        if ends_at > limit:
            raise InvalidInput(
                f"{pool.resource_class.display_name} is granted for at most "
                f"{pool.max_grant_days} days at a time: choose an end on or before "
                f"{limit:%Y-%m-%d %H:%M %Z}",
                field="ends_at",
            )


def latest_end(resource_class: ResourceClass, now: datetime) -> datetime | None:
    """The furthest end an ask of this class made at `now` may have (None: it has no pool)."""
    pool = Pool.objects.filter(resource_class=resource_class).only("max_grant_days").first()
    return now + timedelta(days=pool.max_grant_days) if pool else None


def granted_units(resource_class_id: int, now: datetime) -> int:
    total = (
        QuotaGrant.objects.holding(now)
        .filter(resource_class_id=resource_class_id)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or 0


def free_capacity(resource_class: ResourceClass, now: datetime | None = None) -> int:
    """Units approvals may still hand out (read without a lock: for display and early checks)."""
    pool = Pool.objects.filter(resource_class=resource_class).first()
    grantable = pool.grantable if pool else 0
    return max(0, grantable - granted_units(resource_class.pk, now or timezone.now()))


def tenant_gpu_equivalents(tenant: Tenant, now: datetime) -> Decimal:
    total = Decimal(0)
    rows = (
        QuotaGrant.objects.holding(now)
        .filter(tenant=tenant)
        .values("resource_class__gpu_fraction")
        .annotate(n=Sum("amount"))
    )
    for row in rows:
        total += row["resource_class__gpu_fraction"] * row["n"]
    return total


def plain_number(number: Decimal) -> Decimal:
    """12.00 as 12, 0.50 as 0.5: how a message shows a number read from a decimal column."""
    return number.quantize(Decimal(1)) if number == number.to_integral() else number.normalize()


def check_ceiling(tenant: Tenant, items: list[tuple[ResourceClass, int]], now: datetime) -> None:
    """Refuse what would take the tenant above its ceiling: its own, or the platform's default
    where it has none (`Tenant.effective_gpu_ceiling`)."""
    ceiling = tenant.effective_gpu_ceiling
    held = tenant_gpu_equivalents(tenant, now)
    asked = sum((rc.gpu_fraction * n for rc, n in items), Decimal(0))
    if held + asked > ceiling:
        room = plain_number(max(Decimal(0), ceiling - held))
        ceiling, held, asked = plain_number(ceiling), plain_number(held), plain_number(asked)
        if tenant.gpu_ceiling is None:
            whose = " (the platform's default ceiling)"
            fix = f"ask the platform team to set a ceiling for {tenant.slug}"
        else:
            whose, fix = "", f"ask the platform team to raise {tenant.slug}'s ceiling"
        raise QuotaExceeded(
            f"{tenant.slug} may hold at most {ceiling:g} GPU-equivalents{whose}; it holds "
            f"{held:g} and this asks for {asked:g} more (room left: {room:g}); ask for less, "
            f"or {fix}",
            field="items",
        )


def check_capacity(
    items: list[tuple[ResourceClass, int]],
    now: datetime,
    *,
    pools: Mapping[int, Pool] | None = None,
) -> None:
    """Refuse when any class would be granted beyond capacity × overcommit. Pass the pools
    that `lock_rows` locked (first, in resource-class order) and the check holds until the
    transaction commits, so concurrent approvals serialise; without them it reads the pools
    unlocked (an early check, made again under the locks)."""
    if pools is None:
        ids = sorted(rc.pk for rc, _ in items)
        pools = {p.resource_class_id: p for p in Pool.objects.filter(resource_class_id__in=ids)}
    for rc, amount in sorted(items, key=lambda i: i[0].pk):
        pool = pools.get(rc.pk)
        grantable = pool.grantable if pool else 0
        free = max(0, grantable - granted_units(rc.pk, now))
        if amount > free:
            raise CapacityExceeded(
                f"{rc.slug}: asked for {amount} but only {free} of {grantable} can still be "
                f"granted; ask for {free} or fewer, or ask the platform team for more capacity",
                field="items",
            )
