"""`gpu-portal admin queues` and `why`: each team's Kueue queue as the portal last read it (the
tenant's `queue`), the work waiting in it, and why a workload waits (its `waiting`)."""

from __future__ import annotations

import click

from cli.admin.base import admin_command
from cli.output import emit, table
from cli.session import client
from cli.waiting import status_line, waiting_lines

WAITING_STATES = ("queued", "preempted", "pending", "suspended")

TEAMS = [
    ("slug", "TENANT"),
    ("status", "STATUS"),
    ("queue.pending", "WAITING"),
    ("queue.admitted", "ADMITTED"),
    ("admitting", "ADMITTING"),
    ("gpu", "QUOTA: USED/OWN (BORROWED, LENT)"),
]
LINES = [
    ("flavor", "GPU MODEL"),
    ("resource", "RESOURCE"),
    ("nominal", "OWN QUOTA"),
    ("used", "IN USE"),
    ("borrowed", "BORROWED"),
    ("lent", "LENT"),
]
WAITING = [
    ("id", "ID"),
    ("name", "NAME"),
    ("state", "STATE"),
    ("queue_position", "POSITION"),
    ("priority", "PRIORITY"),
    ("resources", "ASKS"),
    ("reason", "REASON"),
    ("created_at", "SUBMITTED"),
]


def queue_row(t: dict) -> dict:
    """A team's queue in one row: its counts, whether it admits, and per GPU model line
    `used/own` with what it borrows and lends."""
    q = t.get("queue") or {}
    gpu = [
        f"{line['flavor']} {line['used']}/{line['nominal']}"
        + (f" (+{line['borrowed']} borrowed)" if line.get("borrowed") else "")
        + (f" ({line['lent']} lent)" if line.get("lent") else "")
        for line in q.get("lines") or []
    ]
    if not q:
        admitting = "not read yet"
    else:
        admitting = "yes" if q.get("active") else f"no: {q.get('reason') or 'inactive'}"
    return {**t, "admitting": admitting, "gpu": "; ".join(gpu)}


def waiting_of(ctx, tenant: str) -> list[dict]:
    api = client(ctx)
    rows = []
    for state in WAITING_STATES:
        rows += api.get_all("/api/v1/workloads/", tenant=tenant, state=state, ordering="created_at")
    # the queue's order first (position 1 = next), then the others as they came
    return sorted(rows, key=lambda w: (w.get("queue_position") or 10**9, w["created_at"]))


def team_queue_text(t: dict, waiting: list[dict]) -> str:
    row = queue_row(t)
    q = t.get("queue") or {}
    head = (
        f"{t['slug']}: {q.get('pending', 0)} waiting, {q.get('admitted', 0)} admitted; "
        f"admitting: {row['admitting']}"
    )
    return "\n".join(
        [
            head,
            "",
            table(q.get("lines") or [], LINES, empty="no GPU quota in the queue"),
            "",
            table(waiting, WAITING, empty="nothing waiting"),
        ]
    )


@admin_command(None, "queues")
@click.argument("tenant", required=False)
def queues(ctx, output, tenant):
    """Every team's queue: waiting, admitted, quota used/own, borrowed and lent; with TENANT,
    its queue per GPU model and the work waiting in it (`admin why ID` says why)."""
    api = client(ctx)
    if tenant is None:
        rows = api.get_all("/api/v1/tenants/", ordering="slug")
        rows = [queue_row(t) for t in rows if t["status"] != "archived"]
        emit(ctx, output, rows, lambda: table(rows, TEAMS, empty="no tenants"))
        return
    t = api.get(f"/api/v1/tenants/{tenant}/")
    waiting = waiting_of(ctx, tenant)
    emit(
        ctx,
        output,
        {"tenant": t["slug"], "queue": t.get("queue"), "waiting": waiting},
        lambda: team_queue_text(t, waiting),
    )


@admin_command(None, "why")
@click.argument("workload_id", type=int)
def why(ctx, output, workload_id):
    """Why a workload waits: the reason, its place in the queue, what would get it in sooner,
    and the cluster's own words (nothing to explain once it runs or has ended)."""
    w = client(ctx).get(f"/api/v1/workloads/{workload_id}/")
    data = {
        k: w.get(k)
        for k in ("id", "name", "tenant", "state", "queue_position", "reason", "message", "waiting")
    }

    def text() -> str:
        lines = [status_line(w, message=not w.get("waiting")), *waiting_lines(w)]
        if not w.get("waiting"):
            lines.append(f"  not waiting: it is {w['state']}")
        return "\n".join(lines)

    emit(ctx, output, data, text)
