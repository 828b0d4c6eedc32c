"""Borrowing that adds up on the pages (issue 35, 8): a lender's queue lines say to whom they
lend, and the Queues page sums up who borrows what and whose idle units it is. Kueue counts
what each queue borrows, not whom from: the borrowers of a GPU model's units are whom its
lenders lend to (scheduler.cluster.queues.lending)."""

from __future__ import annotations

from catalog.slices import SLICE_RESOURCE
from scheduler.cluster.models import TenantSyncState
from scheduler.cluster.queues import lending

Lending = dict[tuple[str, str], dict[str, dict[str, int]]]


def every_queue() -> dict[str, dict]:
    """tenant slug -> its stored queue summary (one query)."""
    return {
        slug: status or {}
        for slug, status in TenantSyncState.objects.values_list("tenant__slug", "queue_status")
    }


def _names(units: dict[str, int]) -> str:
    parts = [f"{slug} ({n})" if len(units) > 1 else slug for slug, n in units.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# A lender's line names this many borrowers, then counts the rest: naming every one on every
# lender's line made the Queues page grow as the square of the teams (2 MB and 5.6 s at 1,000
# teams: issue 55). The cohort's sentences name as many of each side: the page's Borrowing and
# Lending filters list them all, a page at a time.
LENT_TO_NAMED = 5


def _some_names(units: dict[str, int]) -> str:
    if len(units) <= LENT_TO_NAMED:
        return _names(units)
    named = list(units.items())[:LENT_TO_NAMED]
    rest = len(units) - LENT_TO_NAMED
    left = sum(units.values()) - sum(n for _, n in named)
    return ", ".join(f"{slug} ({n})" for slug, n in named) + f" and {rest} more teams ({left})"


def with_lent_to(queue: dict, cohort: Lending) -> dict:
    """The queue summary with each line's `lent_to`: the teams that borrow those units."""
    lines = []
    for line in queue.get("lines") or []:
        borrowers = cohort.get((line["flavor"], line["resource"]), {}).get("borrowers", {})
        lines.append({**line, "lent_to": _some_names(borrowers) if line.get("lent") else ""})
    return {**queue, "lines": lines}


def team_queue(queue: dict) -> dict:
    """A team's queue for its page: `lent_to` read only when it lends something."""
    if not any(line.get("lent") for line in queue.get("lines") or []):
        return with_lent_to(queue, {})
    return with_lent_to(queue, lending(every_queue()))


def cohort_lines(cohort: Lending) -> list[str]:
    """One sentence per GPU model and resource where something is borrowed, the borrowed and
    lent figures side by side (units no team lends are capacity no team holds)."""
    out = []
    for (flavor, resource), sides in sorted(cohort.items()):
        borrowed = sum(sides["borrowers"].values())
        if not borrowed:
            continue
        lent = sum(sides["lenders"].values())
        what = "compute slices" if resource == SLICE_RESOURCE else resource
        verb = "borrows" if len(sides["borrowers"]) == 1 else "borrow"
        said = f"{flavor} {what}: {_some_names(sides['borrowers'])} {verb} {borrowed}"
        if lent:
            said += f", lent by {_some_names(sides['lenders'])}"
        if borrowed > lent:
            said += f"; {borrowed - lent} of it is capacity no team holds"
        out.append(said + ".")
    return out
