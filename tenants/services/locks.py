"""The one place that takes row locks on the governance core's shared rows.

Order: **pools → tenant → request → grants**. Every transaction that locks more than one of
these takes them through `lock_rows`, in this order, in one call:

- pools, ordered by resource class id: approvals and direct grants that compete for the last
  units serialise here first, so no pool is ever granted beyond capacity × overcommit (and
  the inventory sync takes pools in the same order);
- the tenant: its status (active, suspended, archived) and its ceiling hold for the rest of
  the transaction, and every change to one tenant's grants queues behind it;
- the capacity request: its state machine moves once (no double approval, no cancel of an
  expired request);
- its grants, ordered by primary key: what is ended is ended once;
- last, the team's department (`tenants.services.departments.lock_department`, taken after
  these): two approvals in one department cannot both see its quota free.

When every transaction that waits for a second lock already holds only locks earlier in this
order, no two can wait for each other: there is no deadlock. (Before this order, cancelling a
request locked it and then its grants while the expiry locked a grant and then its request;
the two deadlocked.) A transaction that needs only one row may lock it directly."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q, QuerySet
from django.db.transaction import TransactionManagementError

from catalog import gpu_serving
from catalog.models import Pool, ResourceClass
from tenants.models import CapacityRequest, QuotaGrant, Tenant

LOCK_ORDER = ("pools", "tenant", "request", "grants")


@dataclass(frozen=True)
class LockedRows:
    """The rows `lock_rows` locked, fresh from the database; held until the commit."""

    pools: dict[int, Pool] = field(default_factory=dict)  # by resource class id, in that order
    tenant_row: Tenant | None = None
    request_row: CapacityRequest | None = None
    grants: list[QuotaGrant] = field(default_factory=list)  # by primary key

    @property
    def tenant(self) -> Tenant:
        """The locked tenant (LookupError when none was asked for)."""
        if self.tenant_row is None:
            raise LookupError("lock_rows() was not given a tenant")
        return self.tenant_row

    @property
    def request(self) -> CapacityRequest:
        """The locked request (LookupError when none was asked for; see `request_row`)."""
        if self.request_row is None:
            raise LookupError("lock_rows() was not given a request")
        return self.request_row


def _pk(obj) -> int:
    return obj.pk if hasattr(obj, "pk") else int(obj)


def _pools_wanted(ids: list[int]) -> Q:
    """The asked classes' pools and, for a model served through DRA, every class of it: one
    model's classes share its GPUs' slices (tenants/services/capacity.py), so an approval of any
    of them locks them all. Subqueries, not a join: only pool rows are locked."""
    wanted = Q(resource_class_id__in=ids)
    models = gpu_serving.dra_models()
    if models:
        asked = ResourceClass.objects.filter(pk__in=ids, gpu_model__in=models).values("gpu_model")
        wanted |= Q(
            resource_class_id__in=ResourceClass.objects.filter(gpu_model__in=asked).values("pk")
        )
    return wanted


def lock_rows(
    *,
    pools: Iterable[int] = (),
    tenant: Tenant | int | None = None,
    request: CapacityRequest | int | None = None,
    grants: QuerySet[QuotaGrant] | Iterable[int] | None = None,
) -> LockedRows:
    """Lock (SELECT … FOR UPDATE) the given rows in the order pools → tenant → request →
    grants, and return them re-read under their locks. Call inside `transaction.atomic()`.

    pools: resource class ids; their pools are locked ordered by resource class id (a class
        without a pool locks nothing and is missing from the result).
    tenant, request: an instance or a primary key; `.get()` raises DoesNotExist if gone.
    grants: a QuotaGrant queryset (filters are re-checked under the lock, so a grant ended
        meanwhile drops out) or primary keys; locked ordered by primary key."""
    if not transaction.get_connection().in_atomic_block:
        raise TransactionManagementError("lock_rows() holds its locks only inside atomic()")
    locked_pools: dict[int, Pool] = {}
    ids = sorted(set(pools))
    if ids:
        locked_pools = {
            p.resource_class_id: p
            for p in Pool.objects.select_for_update()
            .filter(_pools_wanted(ids))
            .order_by("resource_class_id")
        }
    locked_tenant = (
        Tenant.objects.select_for_update().get(pk=_pk(tenant)) if tenant is not None else None
    )
    locked_request = (
        CapacityRequest.objects.select_for_update().get(pk=_pk(request))
        if request is not None
        else None
    )
    locked_grants: list[QuotaGrant] = []
    if grants is not None:
        qs = (
            grants
            if isinstance(grants, QuerySet)
            else QuotaGrant.objects.filter(pk__in=[_pk(g) for g in grants])
        )
        locked_grants = list(qs.select_for_update(of=("self",)).order_by("pk"))
    if locked_request is not None and locked_tenant is not None:
        if locked_request.tenant_id == locked_tenant.pk:
            locked_request.tenant = locked_tenant
    return LockedRows(
        pools=locked_pools,
        tenant_row=locked_tenant,
        request_row=locked_request,
        grants=locked_grants,
    )
