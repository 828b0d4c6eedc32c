"""`gpu-portal admin departments`: departments over teams (`/api/v1/departments/`): create one,
set its budget, policy, quota per GPU model, envelope, admins and teams (platform admins); list
its teams' waiting asks and decide them (its admins too, within its quota)."""

from __future__ import annotations

import click

from cli.admin.approvals import COLUMNS as ASK_COLUMNS
from cli.admin.approvals import decision_line
from cli.admin.base import NULL, Nullable, admin_command, body_of, require_some
from cli.output import emit, record, table
from cli.session import client

COLUMNS = [
    ("slug", "DEPARTMENT"),
    ("name", "NAME"),
    ("teams", "TEAMS"),
    ("quota_line", "QUOTA: HELD/SLICES"),
    ("monthly_budget", "MONTHLY BUDGET"),
    ("auto_approve", "AUTO-APPROVE"),
    ("admins", "ADMINS"),
]
FIELDS = [
    ("slug", "department"),
    ("name", "name"),
    ("cost_centre", "cost centre"),
    ("monthly_budget", "monthly budget"),
    ("auto_approve", "auto-approve"),
    ("admins", "admins"),
    ("teams", "teams"),
    ("quota_line", "quota (held/slices)"),
]


def shown(d: dict) -> dict:
    """The department with its quota in one line: `A100-80GB 6/9; H100-80GB 0/14`."""
    quota = "; ".join(f"{q['gpu_model']} {q['held']}/{q['slices']}" for q in d.get("quota") or [])
    return {**d, "quota_line": quota or "none"}


def _path(slug: str, action: str = "") -> str:
    return f"/api/v1/departments/{slug}/" + (f"{action}/" if action else "")


@click.group()
def departments():
    """Departments: a quota, budget, policy and admins over a set of teams."""


@admin_command(departments, "list")
def departments_list(ctx, output):
    """Every department the token's user sees."""
    rows = [shown(d) for d in client(ctx).get_all("/api/v1/departments/")]
    emit(ctx, output, rows, lambda: table(rows, COLUMNS, empty="no departments"))


@admin_command(departments, "show")
@click.argument("slug")
def departments_show(ctx, output, slug):
    """One department: its settings, admins, teams and quota."""
    d = shown(client(ctx).get(_path(slug)))
    emit(ctx, output, d, lambda: record(d, FIELDS))


_SETTINGS = [
    click.option("--cost-centre", help="what finance books its teams under"),
    click.option(
        "--budget", "monthly_budget", type=Nullable(click.STRING), help="per month (none: none)"
    ),
    click.option(
        "--auto-approve/--admins-decide",
        "auto_approve",
        default=None,
        help="asks inside the envelope approved at once, or every ask to its admins",
    ),
]


def _with_settings(f):
    for option in reversed(_SETTINGS):
        f = option(f)
    return f


@admin_command(departments, "create")
@click.argument("slug")
@click.option("--name", required=True)
@_with_settings
def departments_create(ctx, output, slug, name, **settings):
    """A new department (no quota yet: its admins approve nothing until it has one)."""
    d = shown(client(ctx).post("/api/v1/departments/", {"slug": slug, "name": name,
                                                         **body_of(**settings)}))  # fmt: skip
    emit(ctx, output, d, lambda: f"department {d['slug']} created")


@admin_command(departments, "set")
@click.argument("slug")
@click.option("--name")
@_with_settings
def departments_set(ctx, output, slug, **settings):
    """Change a department's name, cost centre, budget or policy."""
    body = body_of(**settings)
    require_some(body, "--name, --cost-centre, --budget, --auto-approve/--admins-decide")
    d = shown(client(ctx).patch(_path(slug), body))
    emit(ctx, output, d, lambda: record(d, FIELDS))


@admin_command(departments, "quota")
@click.argument("slug")
@click.argument("gpu_model")
@click.argument("slices", type=int)
@click.option("--lending-limit", type=Nullable(click.INT), help="slices others may borrow")
@click.option("--borrowing-limit", type=Nullable(click.INT), help="slices it may borrow")
def departments_quota(ctx, output, slug, gpu_model, slices, lending_limit, borrowing_limit):
    """Its quota of GPU_MODEL in compute slices (a whole GPU is 7; 0: remove it)."""
    body = {"gpu_model": gpu_model, "slices": slices,
            **body_of(lending_limit=lending_limit, borrowing_limit=borrowing_limit)}  # fmt: skip
    d = shown(client(ctx).post(_path(slug, "quota"), body))
    emit(ctx, output, d, lambda: record(d, FIELDS))


@admin_command(departments, "envelope")
@click.argument("slug")
@click.argument("resource_class")
@click.option(
    "--max-amount",
    type=Nullable(click.INT),
    required=True,
    help="asks of up to this many units approved at once (none: the platform's)",
)
@click.option("--max-duration-hours", type=int, default=0, help="lasting at most this long")
def departments_envelope(ctx, output, slug, resource_class, max_amount, max_duration_hours):
    """Its own auto-approval envelope of a class, in place of the platform's."""
    body = {
        "resource_class": resource_class,
        "max_amount": None if max_amount is NULL else max_amount,
        "max_duration_hours": max_duration_hours,
    }
    d = shown(client(ctx).post(_path(slug, "envelope"), body))
    emit(ctx, output, d, lambda: f"{d['slug']}: envelope of {resource_class} set")


@admin_command(departments, "admins")
@click.argument("slug")
@click.argument("usernames", nargs=-1)
def departments_admins(ctx, output, slug, usernames):
    """Who decides its teams' asks within its quota (the whole list; none: nobody)."""
    d = shown(client(ctx).post(_path(slug, "admins"), {"admins": list(usernames)}))
    emit(ctx, output, d, lambda: f"{d['slug']} admins: {', '.join(d['admins']) or 'none'}")


@admin_command(departments, "add-team")
@click.argument("slug")
@click.argument("tenant")
def departments_add_team(ctx, output, slug, tenant):
    """Put a team in the department (refused when its grants do not fit its quota)."""
    d = shown(client(ctx).post(_path(slug, "add-team"), {"tenant": tenant}))
    emit(ctx, output, d, lambda: f"{tenant} is in {d['slug']}")


@admin_command(departments, "remove-team")
@click.argument("slug")
@click.argument("tenant")
def departments_remove_team(ctx, output, slug, tenant):
    """Take a team out of the department."""
    d = shown(client(ctx).post(_path(slug, "remove-team"), {"tenant": tenant}))
    emit(ctx, output, d, lambda: f"{tenant} is no longer in {d['slug']}")


SPEND = [
    ("tenant", "TEAM"),
    ("allocated_gpu_hours", "GPU-HOURS"),
    ("idle_cost", "IDLE"),
    ("total", "BILLED"),
]


@admin_command(departments, "spend")
@click.argument("slug")
@click.option("--month", help="YYYY-MM (default: this month)")
def departments_spend(ctx, output, slug, month):
    """Its teams' spend in a month against its budget, by team (its admins and the platform)."""
    spent = client(ctx).get(f"/api/v1/usage/departments/{slug}/", month=month)

    def text() -> str:
        cur, budget = spent["currency"], spent["budget"]
        against = f" of {budget} {cur} ({spent['percent']} %)" if budget else " (no budget)"
        head = (
            f"{spent['department']} · {spent['month']}: {spent['cost']} {cur}{against}; "
            f"at this rate the month ends at {spent['forecast']} {cur}"
        )
        return head + "\n" + table(spent["teams"], SPEND, empty="no teams")

    emit(ctx, output, spent, text)


@admin_command(departments, "asks")
@click.argument("slug")
def departments_asks(ctx, output, slug):
    """Its teams' asks waiting for a decision."""
    rows = client(ctx).get(_path(slug, "requests"))
    rows = rows["results"] if isinstance(rows, dict) else rows
    emit(ctx, output, rows, lambda: table(rows, ASK_COLUMNS, empty="nothing waits"))


def _decide(ctx, output, slug, request_id, note, decision):
    body = {"request": request_id, "comment": note}
    req = client(ctx).post(_path(slug, decision), body)
    emit(ctx, output, req, lambda: decision_line(req))


@admin_command(departments, "approve")
@click.argument("slug")
@click.argument("request_id", type=int)
@click.option("--note", default="", help="for the requester")
def departments_approve(ctx, output, slug, request_id, note):
    """Approve one of its teams' asks (a department admin: within its quota)."""
    _decide(ctx, output, slug, request_id, note, "approve")


@admin_command(departments, "reject")
@click.argument("slug")
@click.argument("request_id", type=int)
@click.option("--note", default="", help="why, for the requester (required by the API)")
def departments_reject(ctx, output, slug, request_id, note):
    """Reject one of its teams' asks, saying why."""
    _decide(ctx, output, slug, request_id, note, "reject")
