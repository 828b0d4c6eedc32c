"""`gpu-portal workspace`: a team's notebooks and dev boxes (`/api/v1/workspaces/`, a token
with the submit scope to open, stop and restart): open one on a class the team's grant covers,
list them with their links, stop and restart them."""

from __future__ import annotations

import click

from cli.admin.base import admin_command
from cli.output import emit, record, table
from cli.session import client

COLUMNS = [
    ("id", "ID"),
    ("tenant", "TENANT"),
    ("name", "NAME"),
    ("kind", "KIND"),
    ("resource_class", "CLASS"),
    ("state", "STATE"),
    ("owner", "OWNER"),
    ("link", "LINK"),
]


def line(ws: dict) -> str:
    """`workspace 7 (team-a/eda): running at https://…`."""
    at = f" at {ws['link']}" if ws.get("link") and ws.get("state") == "running" else ""
    return f"workspace {ws['id']} ({ws['tenant']}/{ws['name']}): {ws['state']}{at}"


@click.group()
def workspace():
    """Notebooks and dev boxes: open, list, stop, restart."""


def command(name: str):
    return admin_command(workspace, name, hint=None)


@command("list")
@click.option("--tenant", help="only this team's")
def workspace_list(ctx, output, tenant):
    """The workspaces the token's user sees, newest first."""
    rows = client(ctx).get_all("/api/v1/workspaces/", ordering="-created_at")
    rows = [r for r in rows if not tenant or r["tenant"] == tenant]
    emit(ctx, output, rows, lambda: table(rows, COLUMNS, empty="no workspaces"))


@command("show")
@click.argument("workspace_id", type=int)
def workspace_show(ctx, output, workspace_id):
    """One workspace, every field."""
    ws = client(ctx).get(f"/api/v1/workspaces/{workspace_id}/")
    emit(ctx, output, ws, lambda: record(ws))


@command("open")
@click.option("--tenant", required=True)
@click.option("--name", required=True)
@click.option("--class", "resource_class", required=True, help="a class the grant covers")
@click.option("--image", required=True)
@click.option("--hours", "time_limit_h", required=True, help="stopped after this long, e.g. 8")
@click.option("--kind", default="jupyter", help="jupyter (default) or code-server")
@click.option("--home-size", help="its home volume, e.g. 20Gi")
@click.option("--idempotency-key", help="reuse on a retried CI step")
def workspace_open(ctx, output, idempotency_key, **fields):
    """Open a workspace; the API says what to change when it refuses (a class without a grant,
    an image off the allow-list, the team's cap per person)."""
    body = {k: v for k, v in fields.items() if v is not None}
    ws = client(ctx).post("/api/v1/workspaces/", body, idempotency_key=idempotency_key)
    emit(ctx, output, ws, lambda: line(ws))


@command("stop")
@click.argument("workspace_id", type=int)
def workspace_stop(ctx, output, workspace_id):
    """Stop it: its GPUs go back to the team, its home volume stays."""
    ws = client(ctx).post(f"/api/v1/workspaces/{workspace_id}/stop/")
    emit(ctx, output, ws, lambda: line(ws))


@command("restart")
@click.argument("workspace_id", type=int)
def workspace_restart(ctx, output, workspace_id):
    """Start a stopped workspace again, with its home volume."""
    ws = client(ctx).post(f"/api/v1/workspaces/{workspace_id}/restart/")
    emit(ctx, output, ws, lambda: line(ws))
