"""`gpu-portal admin tenants` and `members`: onboard a team (`/api/v1/tenants/`, its people by
`/api/v1/members/`), change what a platform admin may change of it, suspend, resume, archive."""

from __future__ import annotations

import click

from cli.admin.base import NotFound, Nullable, admin_command, body_of, require_some
from cli.client import ApiError
from cli.output import emit, record, table
from cli.session import client

ROLES = ("owner", "member", "viewer")

COLUMNS = [
    ("slug", "TENANT"),
    ("name", "NAME"),
    ("status", "STATUS"),
    ("cost_centre", "COST CENTRE"),
    ("monthly_budget", "BUDGET"),
    ("gpu_ceiling", "GPU CEILING"),
    ("namespace", "NAMESPACE"),
    ("reconcile_status", "RECONCILE"),
]
FIELDS = [
    ("slug", "tenant"),
    ("name", "name"),
    ("status", "status"),
    ("cost_centre", "cost centre"),
    ("monthly_budget", "monthly budget"),
    ("gpu_ceiling", "GPU ceiling"),
    ("allowed_priority_classes", "priority classes"),
    ("critical_gpu_quota", "critical GPU quota"),
    ("fair_share_weight", "fair-share weight"),
    ("max_run_s", "max run (s)"),
    ("namespace", "namespace"),
    ("reconcile_status", "reconcile"),
    ("created_at", "created"),
]
QUOTA = [
    ("resource_class", "RESOURCE CLASS"),
    ("granted", "GRANTED"),
    ("in_use", "IN USE"),
    ("free", "FREE"),
]
MEMBERS = [
    ("id", "ID"),
    ("tenant", "TENANT"),
    ("username", "USER"),
    ("role", "ROLE"),
    ("source", "SOURCE"),
    ("created_at", "SINCE"),
]


def tenant_text(t: dict) -> str:
    lines = [record(t, FIELDS), "", table(t.get("quota") or [], QUOTA, empty="no quota")]
    lines += [f"  {m['summary']}" for m in t.get("slices") or []]
    return "\n".join(lines)


@click.group()
def tenants():
    """Teams: list, show, create (onboard with its people), set, suspend, resume, archive."""


@admin_command(tenants, "list")
@click.option("--status", type=click.Choice(["active", "suspended", "archived"]))
def list_(ctx, output, status):
    """Every team (a platform admin sees all)."""
    rows = client(ctx).get_all("/api/v1/tenants/", status=status, ordering="slug")
    emit(ctx, output, rows, lambda: table(rows, COLUMNS, empty="no tenants"))


@admin_command(tenants, "show")
@click.argument("slug")
def show(ctx, output, slug):
    """A team: its settings, namespace and quota (granted, in use, free)."""
    t = client(ctx).get(f"/api/v1/tenants/{slug}/")
    emit(ctx, output, t, lambda: tenant_text(t))


def _common_options(f):
    for option in reversed(
        [
            click.option("--cost-centre", help="for the chargeback export"),
            click.option("--budget", "monthly_budget", type=Nullable(click.STRING),
                         help="monthly budget, e.g. 5000.00 (none: no budget)"),
            click.option("--gpu-ceiling", type=Nullable(click.STRING),
                         help="most GPU-equivalents it may hold (none: no ceiling)"),
            click.option("--priority-class", "allowed_priority_classes", multiple=True,
                         help="a priority class it may use (repeatable)"),
        ]
    ):  # fmt: skip
        f = option(f)
    return f


@admin_command(tenants, "create")
@click.argument("slug")
@click.option("--name", required=True, help="the team's name in words")
@_common_options
@click.option("--owner", "owners", multiple=True, help="USERNAME: an owner (repeatable)")
@click.option("--member", "members_", multiple=True, help="USERNAME: a member (repeatable)")
@click.option("--viewer", "viewers", multiple=True, help="USERNAME: a viewer (repeatable)")
def create(ctx, output, slug, name, cost_centre, monthly_budget, gpu_ceiling,
           allowed_priority_classes, owners, members_, viewers):  # fmt: skip
    """Onboard a team: the tenant (its namespace, quotas and CI robot follow from the
    reconciler), then its people, each an audited call of the API."""
    api = client(ctx)
    body = {"slug": slug, "name": name}
    body.update(
        body_of(
            cost_centre=cost_centre,
            monthly_budget=monthly_budget,
            gpu_ceiling=gpu_ceiling,
            allowed_priority_classes=allowed_priority_classes,
        )
    )
    tenant = api.post("/api/v1/tenants/", body)
    people = [("owner", u) for u in owners] + [("member", u) for u in members_]
    people += [("viewer", u) for u in viewers]
    added = []
    for role, username in people:
        try:
            added.append(
                api.post("/api/v1/members/", {"tenant": slug, "username": username, "role": role})
            )
        except ApiError:
            click.echo(f"tenant {slug} was created; adding {username} as {role} failed:", err=True)
            raise
    emit(
        ctx,
        output,
        {"tenant": tenant, "members": added},
        lambda: "\n".join(
            [f"tenant {tenant['slug']} created ({tenant['status']}, namespace "
             f"{tenant['namespace']})"]
            + [f"  {m['username']}: {m['role']}" for m in added]
        ),
    )  # fmt: skip


@admin_command(tenants, "set")
@click.argument("slug")
@click.option("--name", help="the team's name in words")
@_common_options
@click.option("--critical-gpu-quota", type=int, help="units it may run at gpu-critical")
@click.option("--fair-share-weight", help="its share of idle capacity (1: even)")
@click.option("--max-run-s", type=Nullable(click.INT),
              help="most seconds any job of it runs (none: the pools' limits only)")  # fmt: skip
def set_(ctx, output, slug, name, cost_centre, monthly_budget, gpu_ceiling,
         allowed_priority_classes, critical_gpu_quota, fair_share_weight, max_run_s):  # fmt: skip
    """Change a team's settings (the fields the API allows a platform admin to change)."""
    body = body_of(
        name=name,
        cost_centre=cost_centre,
        monthly_budget=monthly_budget,
        gpu_ceiling=gpu_ceiling,
        allowed_priority_classes=allowed_priority_classes,
        critical_gpu_quota=critical_gpu_quota,
        fair_share_weight=fair_share_weight,
        max_run_s=max_run_s,
    )
    require_some(body, "--name, --cost-centre, --budget, --gpu-ceiling, --priority-class, "
                       "--critical-gpu-quota, --fair-share-weight, --max-run-s")  # fmt: skip
    t = client(ctx).patch(f"/api/v1/tenants/{slug}/", body)
    emit(ctx, output, t, lambda: record(t, FIELDS))


def _status_command(action: str, doc: str) -> None:
    @admin_command(tenants, action)
    @click.argument("slug")
    def command(ctx, output, slug):
        t = client(ctx).post(f"/api/v1/tenants/{slug}/{action}/")
        emit(ctx, output, t, lambda: f"tenant {t['slug']}: {t['status']}")

    command.help = doc


_status_command("suspend", "Suspend a team: its queue admits nothing new.")
_status_command("resume", "Resume a suspended team.")
_status_command("archive", "Archive a team (its grants end; it is kept for the records).")


# --- members -----------------------------------------------------------------------------------


@click.group()
def members():
    """A team's people: list, add, change a role, remove."""


def membership_of(ctx, tenant: str, username: str) -> dict:
    rows = client(ctx).get_all("/api/v1/members/", tenant=tenant)
    for m in rows:
        if m["username"] == username:
            return m
    raise NotFound(f"{username} is not a member of {tenant}")


@admin_command(members, "list")
@click.option("--tenant", help="one team (its slug)")
@click.option("--role", type=click.Choice(ROLES))
def members_list(ctx, output, tenant, role):
    """Memberships of the teams the token sees (a platform admin: all)."""
    rows = client(ctx).get_all("/api/v1/members/", tenant=tenant, role=role)
    emit(ctx, output, rows, lambda: table(rows, MEMBERS, empty="no members"))


@admin_command(members, "add")
@click.argument("tenant")
@click.argument("username")
@click.option("--role", type=click.Choice(ROLES), default="member", show_default=True)
def members_add(ctx, output, tenant, username, role):
    """Add a user to a team (users exist once they have signed in, or come with their group)."""
    m = client(ctx).post("/api/v1/members/", {"tenant": tenant, "username": username, "role": role})
    emit(ctx, output, m, lambda: f"{m['username']} is {m['role']} of {m['tenant']}")


@admin_command(members, "set-role")
@click.argument("tenant")
@click.argument("username")
@click.argument("role", type=click.Choice(ROLES))
def members_set_role(ctx, output, tenant, username, role):
    """Change someone's role in a team."""
    m = membership_of(ctx, tenant, username)
    m = client(ctx).patch(f"/api/v1/members/{m['id']}/", {"role": role})
    emit(ctx, output, m, lambda: f"{m['username']} is {m['role']} of {m['tenant']}")


@admin_command(members, "remove")
@click.argument("tenant")
@click.argument("username")
def members_remove(ctx, output, tenant, username):
    """Remove someone from a team (not its last owner)."""
    m = membership_of(ctx, tenant, username)
    client(ctx).delete(f"/api/v1/members/{m['id']}/")
    emit(ctx, output, {"removed": m}, lambda: f"{username} is no longer a member of {tenant}")
