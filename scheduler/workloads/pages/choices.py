"""The GPU picker of the submit and workspace forms: only what the team has quota of, each
shape with a human label and what the team has free of it (issue 49, 5 and 6).

In slices (GPU_QUOTA_UNIT=slices) a grant of a model runs any shape of it that fits its slices
(a 7 × 1g grant runs a 3g): those are offered beside the granted classes, each saying its size
in slices. A shape the grant alone cannot hold, but borrowing can (`slices.model_allowance`,
the rule admission applies), is offered under its own heading, never as the team's quota; a
whole GPU the team cannot reach either way is not offered at all."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from catalog import slices
from catalog.models import ResourceClass
from tenants.models import Tenant
from tenants.selectors import quota_lines, slice_lines

OWN = "own"  # granted, or drawn on the team's own slices
BORROWED = "borrowed"  # only with units other teams leave idle


@dataclass(frozen=True)
class GpuChoice:
    rc: ResourceClass
    label: str
    source: str  # OWN | BORROWED
    size: int  # slices of one unit (1 in class units): the picker's order, smallest first


def gpu_offer(tenant: Tenant) -> list[GpuChoice]:
    """What the team may run one unit of, smallest first within each source."""
    every = quota_lines(tenant)
    lines = [line for line in every if line.granted]
    if not lines:
        return []
    if settings.GPU_QUOTA_UNIT != slices.UNIT_SLICES:
        return [
            GpuChoice(
                line.resource_class,
                f"{line.resource_class.display_name} · {line.free} of {line.granted} free",
                OWN,
                1,
            )
            for line in lines
        ]
    by_model = {s.gpu_model: s for s in slice_lines(every)}
    granted_by_class = {line.resource_class.pk: line.granted for line in lines}
    classes = list(
        ResourceClass.objects.filter(
            active=True, gpu_model__in=[m for m, s in by_model.items() if s.granted]
        ).select_related("pool")
    )
    out = []
    for rc in classes:
        model = by_model[rc.gpu_model]
        size = slices.slices_per_unit(rc)
        of_model = [c for c in classes if c.gpu_model == rc.gpu_model]
        granted, borrow = slices.model_allowance(of_model, granted_by_class)
        pool = getattr(rc, "pool", None)
        offered = rc.pk in granted_by_class or (pool is not None and pool.capacity > 0)
        if not offered or size > granted + borrow:
            continue
        if size <= granted:  # free as instances of this shape, in the one unit of the pages
            free = slices.units_in_slices(max(model.free, 0) // size, rc, model.granted)
            out.append(GpuChoice(rc, f"{rc.display_name} · {free} free", OWN, size))
        else:
            each = slices.units_in_slices(1, rc)
            beyond = f"{rc.display_name} · {each}, more than the team's {granted} slices"
            out.append(GpuChoice(rc, beyond, BORROWED, size))
    return sorted(out, key=lambda c: (c.source != OWN, c.size, c.rc.gpu_model, c.rc.slug))


def gpu_choices(tenant: Tenant) -> list[tuple[str, list[tuple[str, str]]]]:
    """The picker's groups: the team's quota first, then what only borrowing reaches."""
    offer = gpu_offer(tenant)
    own = [(c.rc.slug, c.label) for c in offer if c.source == OWN]
    borrowed = [(c.rc.slug, c.label) for c in offer if c.source == BORROWED]
    return [
        *([(f"{tenant.name}'s quota", own)] if own else []),
        *(
            [("Only on borrowed capacity: waits for other teams' idle GPUs", borrowed)]
            if borrowed
            else []
        ),
    ]
