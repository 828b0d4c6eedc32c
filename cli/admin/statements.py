"""`gpu-portal admin statements`: a team's statement for a month, every team's totals, and the
chargeback export as CSV or JSON (`/api/v1/usage/statements/`, the page's numbers)."""

from __future__ import annotations

from pathlib import Path

import click

from cli.admin.base import admin_command
from cli.output import emit, record, resolve_output, table, to_json
from cli.session import client

LINES = [
    ("resource_class", "RESOURCE CLASS"),
    ("allocated_gpu_hours", "ALLOCATED GPU-H"),
    ("allocated_cost", "ALLOCATED"),
    ("quota_gpu_hours", "QUOTA GPU-H"),
    ("quota_cost", "QUOTA"),
    ("idle_hours", "IDLE H"),
    ("idle_cost", "IDLE"),
    ("waived_cost", "WAIVED"),
    ("billed_cost", "BILLED"),
]
TEAMS = [
    ("tenant", "TENANT"),
    ("cost_centre", "COST CENTRE"),
    ("month", "MONTH"),
    ("basis", "BASIS"),
    ("totals.allocated_gpu_hours", "GPU-HOURS"),
    ("totals.idle_cost", "IDLE"),
    ("totals.total", "TOTAL"),
    ("currency", "CURRENCY"),
    ("budget", "BUDGET"),
]
EXPORT_LINES = [("tenant", "TENANT"), ("cost_centre", "COST CENTRE"), *LINES]

month_option = click.option("--month", help="YYYY-MM (default: this month)")
basis_option = click.option("--basis", help="allocation, quota or max (default: the setting)")


def statement_text(st: dict) -> str:
    head = " · ".join(
        str(part)
        for part in (st["tenant"], st["month"], f"basis {st['basis']}", st.get("currency"),
                     st.get("mode"))
        if part
    )  # fmt: skip
    totals = {**(st.get("totals") or {}), "budget": st.get("budget")}
    parts = [
        head,
        "",
        table(st.get("lines") or [], LINES, empty="nothing held or used this month"),
        "",
        record(totals, [(k, k.replace("_", " ")) for k in totals]),
    ]
    return "\n".join(parts)


@click.group()
def statements():
    """Statements and the chargeback export."""


@admin_command(statements, "show")
@click.argument("tenant")
@month_option
@basis_option
def show(ctx, output, tenant, month, basis):
    """A team's statement for a month: per class, and its totals."""
    st = client(ctx).get(f"/api/v1/usage/statements/{tenant}/", month=month, basis=basis)
    emit(ctx, output, st, lambda: statement_text(st))


@admin_command(statements, "list")
@month_option
@basis_option
def list_(ctx, output, month, basis):
    """Every team's totals for a month."""
    rows = client(ctx).get_all("/api/v1/usage/statements/", month=month, basis=basis)
    emit(ctx, output, rows, lambda: table(rows, TEAMS, empty="no tenants"))


def _flat_lines(rows: list[dict]) -> list[dict]:
    return [
        {"tenant": st["tenant"], "cost_centre": st["cost_centre"], **line}
        for st in rows
        for line in st.get("lines") or []
    ]


@admin_command(statements, "export", outputs=("csv", "json", "table"), fallback="csv")
@click.option("--tenant", help="one team's statement (default: every team, the chargeback)")
@month_option
@basis_option
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="write it there (default: stdout)",
)
def export(ctx, output, tenant, month, basis, path):
    """The chargeback export: one line per team and resource class, as the portal's CSV
    (default) or its statements as JSON."""
    api = client(ctx)
    output = resolve_output(ctx, output, fallback="csv")
    base = f"/api/v1/usage/statements/{tenant}/" if tenant else "/api/v1/usage/statements/"
    if output == "csv":
        text = api.get_text(f"{base}csv/", month=month, basis=basis)
    else:
        rows = (
            [api.get(base, month=month, basis=basis)]
            if tenant
            else api.get_all(base, month=month, basis=basis)
        )
        if output == "json":
            text = to_json(rows) + "\n"
        else:
            text = table(_flat_lines(rows), EXPORT_LINES, empty="no statement lines") + "\n"
    if path is None:  # as the portal sent it, byte for byte (the CSV's lines end in CRLF)
        click.echo(text.encode(), nl=False)
        return
    path.write_bytes(text.encode())
    click.echo(f"wrote {path} ({output}, {len(text.splitlines())} lines)", err=True)
