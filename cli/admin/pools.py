"""`gpu-portal admin pools` and `policy`: each resource class's pool (`/api/v1/pools/`) and its
auto-approval envelope (`/api/v1/auto-approval-rules/`), platform admins only."""

from __future__ import annotations

import click

from cli.admin.base import Nullable, admin_command, body_of, require_some
from cli.client import ApiError
from cli.output import emit, record, table
from cli.session import client

POOLS = [
    ("resource_class", "RESOURCE CLASS"),
    ("capacity", "CAPACITY"),
    ("overcommit_ratio", "OVERCOMMIT"),
    ("grantable", "GRANTABLE"),
    ("borrowing_limit", "BORROWING LIMIT"),
    ("lend_idle", "LENDS IDLE"),
    ("max_run_s", "MAX RUN (S)"),
    ("max_grant_days", "MAX GRANT (D)"),
    ("idle_threshold_pct", "IDLE BELOW %"),
]
RULES = [
    ("resource_class", "RESOURCE CLASS"),
    ("max_amount", "AUTO-APPROVE UP TO"),
    ("max_duration_hours", "FOR AT MOST (H)"),
]


@click.group()
def pools():
    """Pools: capacity, overcommit, borrowing and lending, limits, idle policy per class."""


@admin_command(pools, "list")
def pools_list(ctx, output):
    """Every pool."""
    rows = client(ctx).get_all("/api/v1/pools/")
    emit(ctx, output, rows, lambda: table(rows, POOLS, empty="no pools"))


@admin_command(pools, "show")
@click.argument("resource_class")
def pools_show(ctx, output, resource_class):
    """One class's pool, every field."""
    pool = client(ctx).get(f"/api/v1/pools/{resource_class}/")
    emit(ctx, output, pool, lambda: record(pool))


@admin_command(pools, "set")
@click.argument("resource_class")
@click.option("--capacity", type=int, help="units the pool has")
@click.option("--overcommit-ratio", help="grantable = capacity x this, e.g. 1.25")
@click.option(
    "--borrowing-limit",
    type=Nullable(click.INT),
    help="units a team may borrow beyond its grant (none: no limit)",
)
@click.option(
    "--lend-idle/--no-lend-idle", default=None, help="whether teams lend their idle units to others"
)
@click.option("--reclaim-grace-s", type=int, help="seconds a borrower gets to give units back")
@click.option(
    "--max-run-s",
    type=Nullable(click.INT),
    help="most seconds a job on the class runs (none: no limit)",
)
@click.option("--max-grant-days", type=int, help="longest grant an ask may get")
@click.option(
    "--idle-threshold-pct",
    type=Nullable(click.INT),
    help="below this % GPU use a workload is idle (none: off)",
)
@click.option("--idle-warn-after-s", type=int, help="seconds idle before the owners are warned")
@click.option("--idle-suspend-after-s", type=int, help="seconds idle before it is suspended")
@click.option("--idle-protect-s", type=int, help="seconds after a start left alone")
def pools_set(ctx, output, resource_class, **fields):  # fmt: skip
    """Set fields of a class's pool (created for the class when it has none yet). What the API
    refuses comes back with its reason, e.g. an idle suspension before the warning."""
    body = body_of(**fields)
    require_some(body, ", ".join(f"--{k.replace('_', '-')}" for k in fields))
    pool = client(ctx).patch(f"/api/v1/pools/{resource_class}/", body)
    emit(ctx, output, pool, lambda: record(pool))


@click.group()
def policy():
    """The auto-approval envelope per class: asks within it are approved at once."""


@admin_command(policy, "list")
def policy_list(ctx, output):
    """Every class's envelope."""
    rows = client(ctx).get_all("/api/v1/auto-approval-rules/")
    emit(ctx, output, rows, lambda: table(rows, RULES, empty="no auto-approval rules"))


@admin_command(policy, "show")
@click.argument("resource_class")
def policy_show(ctx, output, resource_class):
    """One class's envelope."""
    rule = client(ctx).get(f"/api/v1/auto-approval-rules/{resource_class}/")
    emit(ctx, output, rule, lambda: record(rule))


@admin_command(policy, "set")
@click.argument("resource_class")
@click.option("--max-amount", type=int, help="asks of up to this many units (0: none)")
@click.option("--max-duration-hours", type=int, help="lasting at most this long (0: none)")
def policy_set(ctx, output, resource_class, max_amount, max_duration_hours):
    """Set a class's envelope; a field not given keeps its value (both are needed for a class
    that has no envelope yet)."""
    api = client(ctx)
    body = body_of(max_amount=max_amount, max_duration_hours=max_duration_hours)
    require_some(body, "--max-amount, --max-duration-hours")
    if len(body) < 2:
        try:
            current = api.get(f"/api/v1/auto-approval-rules/{resource_class}/")
        except ApiError as exc:
            if exc.status != 404:
                raise
            current = {}  # none yet: the API says which field is missing
        body = {**{k: current[k] for k in ("max_amount", "max_duration_hours") if k in current},
                **body}  # fmt: skip
    rule = api.put(f"/api/v1/auto-approval-rules/{resource_class}/", body)
    emit(ctx, output, rule, lambda: record(rule))
