"""Why a waiting workload waits, in words a person reads, and what would get it in sooner (pure).

Kueue says why it has not admitted a workload in its own terms ("couldn't assign flavors to pod
set main: … 6 more needed"). `explain` says it from what the portal knows: the team's quota of
the model (or resource class) and which of the team's own workloads hold it, what its pool lets
it borrow and what the other teams of the cohort leave idle, which shapes the fleet has free
now, and whether the team's queue is held (over budget) or the team is suspended. Counted in
compute slices per GPU model or in units per resource class, as GPU_QUOTA_UNIT says.

Where Kueue names the cause itself (v0.19's reasons on `QuotaReserved=False`, with its
UnadmittedWorkloadsObservability gate on: `KUEUE_REASONS`), the code follows Kueue's reason; the
portal's numbers still name the team's holders, and what Kueue cannot know (a budget hold, a
suspended team, the department's quota) stays in the portal's words.

Other teams appear only as anonymous numbers (`counting.TeamUse`): a reason names the
team's own workloads, never another team's. Kueue's message stays as `details`, never as the
only words.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from scheduler.workloads.kinds import gang
from scheduler.workloads.kinds.gang import PODS_READY_TIMEOUT
from scheduler.workloads.kinds.manifests import CONTAINER_START_ERRORS
from scheduler.workloads.queue import pod_reasons
from scheduler.workloads.queue.counting import Facts, Line, Shape, Units, line_of, placeable

WAITING_STATES = frozenset({"queued", "preempted"})
# A pending workload is on its way to the cluster unless the cluster says it cannot place its
# pod (the scheduler) or create it (the namespace's ResourceQuota): then it waits too.
STUCK_PENDING_REASONS = frozenset(
    {
        "Unschedulable",
        "FailedCreate",
        gang.INCOMPLETE,
        *CONTAINER_START_ERRORS,
    }
)

MAX_NAMED = 5  # holders named in a reason; the rest are counted
MAX_SHAPE_HINTS = 2


def is_waiting(state: str, reason: str) -> bool:
    return state in WAITING_STATES or (state == "pending" and reason in STUCK_PENDING_REASONS)


# Kueue v0.19's reasons for a workload it has not admitted (QuotaReserved=False) -> the code the
# portal says. `WaitingForQuota` goes through the portal's quota lines first (they name the
# team's own holders); the deprecated catch-all `Pending` (the gate off, or Kueue < 0.19) through
# the portal's reading of Kueue's message.
KUEUE_REASONS = {
    "WaitingForQuota": "quota",
    "ExceedsMaxQuota": "exceeds_max",
    "NoMatchingFlavor": "no_flavor",
    "TopologyPlacementFailed": "no_placement",  # said as no_shape
    "WaitingForPodsReady": "pods_ready",
    "WaitingForPreemptedWorkloads": "making_room",
    "Suspended": "queue_inactive",
    "Misconfigured": "misconfigured",
}


@dataclass(frozen=True)
class Waiting:
    code: str  # suspended, over_budget, quota_full, borrowing_capped, nothing_idle, no_shape,
    # quota, queue_inactive, in_queue, and from Kueue's own reasons: exceeds_max, no_flavor,
    # pods_ready, making_room, misconfigured
    reason: str
    position: int | None
    hints: list[str]
    details: str  # Kueue's (or the cluster's) own words

    def as_dict(self) -> dict:
        return asdict(self)


QUOTA_CODES = frozenset({"quota_full", "borrowing_capped", "nothing_idle", "quota"})


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _holders_text(u: Units, key: str) -> str:
    named = []
    for h in u.f.holders:
        parts = [u.held(s, n) for s, n in sorted(h.units.items()) if u.key(s) == key and n]
        if parts:
            named.append(f"{h.name} ({', '.join(parts)})")
    if len(named) > MAX_NAMED:
        named = [*named[:MAX_NAMED], f"{len(named) - MAX_NAMED} more"]
    return _join(named)


def _quota_reason(u: Units, line: Line) -> tuple[str, str]:
    label, count = u.label(line.key), (lambda n: u.count(n, line.key))
    holders = _holders_text(u, line.key)
    by = f" in use by {holders}" if holders else " in use"
    if line.granted == 0:
        head = f"The team has no {label} quota of its own"
        if line.used:
            head += f" and already borrows {count(line.used)}"
    elif line.own_free == 0:
        head = f"The team's {label} quota is full: {line.used} of {count(line.granted)}{by}"
    else:
        head = (
            f"The team's {label} quota has {line.own_free} of {count(line.granted)} free and "
            f"this asks for {line.need}: {line.used}{by}"
        )
    short = line.need - line.own_free
    if line.limit == 0:
        return "quota_full", f"{head}; its pool lets no team borrow beyond its grant."
    room = None if line.limit is None else max(0, line.limit - line.borrowed)
    if room is not None and room < short and room <= line.idle:
        already = f" and already borrows {line.borrowed}" if line.borrowed else ""
        return "borrowing_capped", (
            f"{head}; borrowing is capped: the team may borrow {count(line.limit)} beyond its "
            f"grant{already}, and this needs {short} more."
        )
    if line.idle == 0:
        return "nothing_idle", (
            f"{head}; nothing is idle to borrow in the cohort: the other teams use their quota."
        )
    return "nothing_idle", (
        f"{head}; the other teams leave only {count(line.idle)} idle to borrow, and this needs "
        f"{short} more."
    )


def _thing(shape: Shape | None, slug: str, n: int) -> str:
    """`A100-80GB MIG 4g.40gb instance`, `A100-80GB GPUs`, `A100-80GB shared replica`."""
    if shape is None:
        return f"{slug} unit" + ("s" if n != 1 else "")
    if shape.kind == "mig":
        return f"{shape.label} instance" + ("s" if n != 1 else "")
    if shape.kind == "shared":
        return f"{shape.gpu_model} shared replica" + ("s" if n != 1 else "")
    return f"{shape.gpu_model} GPU" + ("s" if n != 1 else "")


def _shape_reason(u: Units, slug: str, per_pod: int) -> str:
    offer = (u.f.fleet or {}).get(slug)
    shape = u.shape(slug)
    if offer is None or offer.total == 0:
        return f"The fleet has no {_thing(shape, slug, 1)} now: no node offers that shape."
    if not any(offer.free):
        taken = "the only one is" if offer.total == 1 else f"all {offer.total} are"
        return f"No free {_thing(shape, slug, 1)} exists now in the fleet: {taken} in use."
    best = max(offer.free)
    if best < per_pod:
        return (
            f"No node has {per_pod} {_thing(shape, slug, per_pod)} free at once (a pod runs on "
            f"one node): the most free on one node is {best}."
        )
    fit = sum(free // per_pod for free in offer.free)
    things = _thing(shape, slug, per_pod)
    return f"Only {fit} of its {u.f.pods} pods find a node with {per_pod} {things} free now."


# --- what Kueue's message adds -----------------------------------------------------------------

_INSUFFICIENT = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>\S+?),? "
    r"(?P<more>\d+) more needed"
)

_INACTIVE = re.compile(r"\b(inactive|stopped|held|on hold)\b")


def _kueue_says(message: str) -> str:
    text = (message or "").lower()
    if "borrowing limit" in text:
        return "borrowing_capped"
    if _INSUFFICIENT.search(text) or "insufficient quota" in text:
        return "quota"
    if _INACTIVE.search(text):
        return "queue_inactive"
    return ""


# --- hints -------------------------------------------------------------------------------------


def _smaller_ask(u: Units, line: Line) -> str | None:
    f = u.f
    if len(f.ask) != 1:
        return None
    slug, per_pod = next(iter(f.ask.items()))

    def fits(units: int, pods: int) -> bool:
        need = u.amount(slug, units * pods)
        placed = f.fleet is None or placeable(f.fleet, slug, units, pods)
        return need <= line.room and placed

    borrowed = " (partly on units other teams lend, which they take back when they need them)"
    if f.pods > 1:
        pods = next((p for p in range(f.pods - 1, 0, -1) if fits(per_pod, p)), 0)
        if pods:
            lent = borrowed if u.amount(slug, per_pod * pods) > line.own_free else ""
            noun = "pods" if f.kind == "job" else "replicas"  # a job of N pods is a gang
            return f"A smaller ask fits now: {pods} {noun} instead of {f.pods}{lent}."
        return None
    units = next((n for n in range(per_pod - 1, 0, -1) if fits(n, 1)), 0)
    if not units:
        return None
    lent = borrowed if u.amount(slug, units) > line.own_free else ""
    return f"A smaller ask fits now: {u.ask(slug, units)} instead of {per_pod}{lent}."


def _free_shapes(u: Units, line: Line) -> list[str]:
    """Other shapes free now that the team's quota covers: another profile of the same model,
    or another model the team has free quota of. Closest in size to the ask first."""
    f = u.f
    if f.fleet is None or len(f.ask) != 1:
        return []
    slug, per_pod = next(iter(f.ask.items()))
    asked = u.shape(slug)
    if asked is None:
        return []
    found = []
    for other in f.shapes.values():
        if other.slug == slug or not placeable(f.fleet, other.slug, per_pod, f.pods):
            continue
        need = u.amount(other.slug, per_pod * f.pods)
        key = u.key(other.slug)
        same_model = other.gpu_model == asked.gpu_model
        if key == line.key:
            room = line.room
        else:
            theirs = line_of(u, key, need)
            room = theirs.room if same_model else theirs.own_free
        if need > room:
            continue
        size = abs(other.slices - asked.slices)
        found.append((not same_model, size, other.slices < asked.slices, other.label, other))
    hints = []
    for _, _, _, _, other in sorted(found)[:MAX_SHAPE_HINTS]:
        where = "of the same model" if other.gpu_model == asked.gpu_model else "another model"
        hints.append(
            f"Free now, and within the team's quota: {u.ask(other.slug, per_pod)} per pod "
            f"({where}); asking for that shape instead would start sooner."
        )
    return hints


def _priority_hint(u: Units, line: Line | None) -> str | None:
    """Kueue lets the team's higher-priority work take the place of its lower-priority work
    (and orders its queue by priority): a higher priority the team may use gets it in sooner."""
    f = u.f
    values = f.priority_values
    mine = values.get(f.priority)
    if mine is None:
        return None
    higher = sorted(
        (values[p], p) for p in f.allowed_priorities if p in values and values[p] > mine
    )
    for value, name in higher:
        if line is None:  # waiting its turn: the queue goes by priority, then age
            return f"At {name} it would go before the team's {f.priority} work in the queue."
        # Work below its own priority Kueue preempts already; name only what the raise adds.
        now = sum(u.total(h.units, line.key) for h in f.holders if values.get(h.priority, 0) < mine)
        below = [h for h in f.holders if mine <= values.get(h.priority, 0) < value]
        freed = sum(u.total(h.units, line.key) for h in below)
        if line.room + now < line.need and freed and line.room + now + freed >= line.need:
            names = _join([h.name for h in below if u.total(h.units, line.key)][:MAX_NAMED])
            return (
                f"At {name} it would take the place of the team's lower-priority work "
                f"({names}), which would wait instead."
            )
    return None


# --- the explanation ---------------------------------------------------------------------------

# What is said when the numbers alone do not tell (Kueue's message or the cluster's does).
_SAID = {
    "suspended": "The team is suspended: its queue admits nothing until a platform admin "
    "resumes it.",
    "over_budget": "The team is over its budget for this month: its queue is held, so new work "
    "waits (work already running goes on).",
    "quota": "The team's queue has no room for it yet: Kueue counts less {label} free in the "
    "team's quota and the cohort than it asks for (the portal's numbers may lag a few seconds).",
    "queue_inactive": "The team's queue is not admitting work right now (it is being set up or "
    "held).",
    "exceeds_max": "It asks for more {label} than the team's queue can ever admit, even with "
    "everything it may borrow: it will not start as it is, whatever the team frees.",
    "no_flavor": "No GPU model or shape of the team's grant matches it: its node selector, "
    "tolerations or the resources it asks for point at none of the team's flavors.",
    "no_placement": "Kueue finds no place in the fleet's topology for all its pods together.",
    "pods_ready": "Kueue admits nothing more until the pods of the work it admitted last are all "
    "running: it is next once they are.",
    "making_room": "Kueue is making room for it: the work it preempted is stopping, and it "
    "starts once that work has left.",
    "misconfigured": "The team's queue is missing or misconfigured in the cluster: the portal "
    "repairs it at its next reconcile.",
    "refused": "The team's namespace quota refused its pod for now: it is created once the "
    "team's work frees room.",
    "unschedulable": "The cluster finds no node for its pod yet: the nodes of its model are busy "
    "or do not offer its shape.",
    "behind": "It is number {position} in the team's queue: work of higher priority, or of the "
    "same priority that came first, goes before it.",
    "next": "The team's quota and the fleet have room for it: it is next in the team's queue, "
    "and Kueue admits it at its next pass.",
}
_HINTS = {
    "suspended": "Ask the platform team to resume the team.",
    "over_budget": "The team's owners can ask for a higher budget; the hold lifts when it is "
    "raised or the month turns.",
    "exceeds_max": "Ask for less, or ask for a larger grant.",
    "no_flavor": "Ask for a GPU model the team's grant covers, and drop a node selector or "
    "toleration that points elsewhere.",
}


def explain(f: Facts) -> Waiting | None:
    """Why the workload waits and what would get it in sooner; None when it is not waiting."""
    if not is_waiting(f.state, f.kueue_reason):
        return None
    position = f.position if f.state == "queued" else None
    u = Units(f)
    held = "suspended" if not f.team_active else "over_budget" if f.queue_held else ""
    if held:
        return Waiting(held, _SAID[held], position, [_HINTS[held]], f.kueue_message)
    # admitted, and its pods say what holds them: read that before any guess from the numbers
    said = pod_reasons.read(f.kueue_reason, f.kueue_message) if f.state == "pending" else None
    if said is not None:
        return Waiting(said.code, said.reason, None, [said.hint], f.kueue_message)
    code, reason, line = _why(u)
    hints: list[str] = []
    if code == "exceeds_max" and line is not None:
        hints += [h for h in [_smaller_ask(u, line)] if h]
    if code in _HINTS:
        hints.append(_HINTS[code])
    if code in QUOTA_CODES or code == "no_shape":
        if line is not None:
            hints += [h for h in [_smaller_ask(u, line)] if h]
            hints += _free_shapes(u, line)
        if code in QUOTA_CODES:
            hints += [h for h in [_priority_hint(u, line)] if h]
    elif code == "in_queue" and (position or 0) > 1:
        hints += [h for h in [_priority_hint(u, None)] if h]
    if f.state == "preempted" or f.kueue_reason == "Preempted":
        reason = f"It was preempted (its units were taken back) and waits again. {reason}"
    elif f.kueue_reason == PODS_READY_TIMEOUT:
        reason = (
            "Not all its pods were running within the ready timeout, so every pod was stopped "
            f"and its units freed; it waits again. {reason}"
        )
    return Waiting(code, reason, position, hints, f.kueue_message)


def _why(u: Units) -> tuple[str, str, Line | None]:
    """The first thing that keeps it waiting: its quota line, then the fleet's shapes, then
    what Kueue's message or the cluster's reason adds, then its turn in the queue."""
    f = u.f
    lines = {}
    for slug, per_pod in f.ask.items():
        key = u.key(slug)
        lines[key] = line_of(u, key, u.amount(slug, per_pod * f.pods) + _asked(u, key, slug))
    first = next(iter(lines.values()), None)
    label = u.label(first.key) if first else "GPU"
    kueue = KUEUE_REASONS.get(f.kueue_reason, "")
    if kueue == "exceeds_max":  # no freeing helps: said before the team's holders
        return kueue, _SAID[kueue].format(label=label), first
    if kueue == "no_placement":
        return "no_shape", _SAID[kueue], first
    if kueue and kueue != "quota":
        return kueue, _SAID[kueue], None
    for line in lines.values():
        if not line.fits:
            code, reason = _quota_reason(u, line)
            return code, reason, line
    if f.fleet is not None:
        for slug, per_pod in f.ask.items():
            if not placeable(f.fleet, slug, per_pod, f.pods):
                return "no_shape", _shape_reason(u, slug, per_pod), lines[u.key(slug)]
    says = _kueue_says(f.kueue_message) or kueue
    if says == "borrowing_capped" and first is not None:
        return says, _quota_reason(u, first)[1], first
    if says == "quota":
        return says, _SAID["quota"].format(label=label), first
    if says == "queue_inactive":
        return says, _SAID[says], None
    if f.state == "pending":
        refused = f.kueue_reason == "FailedCreate"
        code, said = ("quota", "refused") if refused else ("no_shape", "unschedulable")
        return code, _SAID[said], first
    if (f.position or 0) > 1:
        return "in_queue", _SAID["behind"].format(position=f.position), None
    return "in_queue", _SAID["next"], None


def _asked(u: Units, key: str, slug: str) -> int:
    """The other classes of the same ask that count in the same line (slices of one model)."""
    return sum(
        u.amount(s, n * u.f.pods) for s, n in u.f.ask.items() if s != slug and u.key(s) == key
    )
