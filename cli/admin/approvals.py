"""`gpu-portal admin approvals`: the asks for capacity waiting for the platform team, and the
decision on each (`/api/v1/capacity-requests/`; approving needs a token that may approve)."""

from __future__ import annotations

import click

from cli.admin.base import admin_command
from cli.output import emit, record, table
from cli.session import client

STATES = ("submitted", "approved", "provisioned", "rejected", "cancelled", "expired", "all")

COLUMNS = [
    ("id", "ID"),
    ("tenant", "TENANT"),
    ("requester", "REQUESTER"),
    ("items", "ITEMS"),
    ("ends_at", "ENDS"),
    ("state", "STATE"),
    ("policy_reasons", "WHY NOT AUTO-APPROVED"),
    ("justification", "JUSTIFICATION"),
]
FIELDS = [
    ("id", "request"),
    ("tenant", "tenant"),
    ("requester", "requester"),
    ("items", "items"),
    ("starts_at", "starts"),
    ("ends_at", "ends"),
    ("justification", "justification"),
    ("state", "state"),
    ("auto_approved", "auto-approved"),
    ("policy_reasons", "policy"),
    ("decided_by", "decided by"),
    ("decided_at", "decided at"),
    ("decision_comment", "note"),
    ("extends", "extends grant"),
    ("created_at", "asked at"),
]


def decision_line(req: dict) -> str:
    """`request #12 (team-a): approved by platform: h100-80gb=2, until 2027-01-31T00:00:00Z`."""
    by = f" by {req['decided_by']}" if req.get("decided_by") else ""
    items = ", ".join(f"{k}={v}" for k, v in (req.get("items") or {}).items())
    until = f", until {req['ends_at']}" if req.get("ends_at") else ", open-ended"
    note = f" ({req['decision_comment']})" if req.get("decision_comment") else ""
    return f"request #{req['id']} ({req['tenant']}): {req['state']}{by}: {items}{until}{note}"


@click.group()
def approvals():
    """Asks for capacity: list them, approve or reject them with a note."""


@admin_command(approvals, "list")
@click.option(
    "--state",
    type=click.Choice(STATES),
    default="submitted",
    show_default=True,
    help="submitted: waiting for a decision",
)
@click.option("--tenant", help="one team's asks (its slug)")
def list_(ctx, output, state, tenant):
    """The asks waiting for a decision (or in another state), oldest first."""
    rows = client(ctx).get_all(
        "/api/v1/capacity-requests/",
        state=None if state == "all" else state,
        tenant=tenant,
        ordering="created_at",
    )
    emit(ctx, output, rows, lambda: table(rows, COLUMNS, empty=f"no {state} requests"))


@admin_command(approvals, "show")
@click.argument("request_id", type=int)
def show(ctx, output, request_id):
    """One ask: what, until when, why, and the decision."""
    req = client(ctx).get(f"/api/v1/capacity-requests/{request_id}/")
    emit(ctx, output, req, lambda: record(req, FIELDS))


def _decide(ctx, output, request_id: int, action: str, note: str | None) -> None:
    req = client(ctx).post(
        f"/api/v1/capacity-requests/{request_id}/{action}/", {"comment": note or ""}
    )
    emit(ctx, output, req, lambda: decision_line(req))


@admin_command(approvals, "approve")
@click.argument("request_id", type=int)
@click.option("--note", help="why (kept with the decision and in the audit)")
def approve(ctx, output, request_id, note):
    """Approve an ask: the grant follows (within the pool's grantable capacity)."""
    _decide(ctx, output, request_id, "approve", note)


@admin_command(approvals, "reject")
@click.argument("request_id", type=int)
@click.option("--note", help="why it is rejected (the API requires one; the team reads it)")
def reject(ctx, output, request_id, note):
    """Reject an ask, saying why."""
    _decide(ctx, output, request_id, "reject", note)
