"""`gpu-portal calendar`: the free, granted and booked units of each class day by day over the
coming weeks (`/api/v1/capacity-calendar/`), with the team's own units given `--tenant`: where
a booking fits before asking for it."""

from __future__ import annotations

import json

import click

from cli.client import ApiError
from cli.output import fail
from cli.session import client


def lines(data: dict, tenant: str | None) -> str:
    """One block a class: a line a day, `Mon 07 Dec  free 4  granted 2  booked 4`."""
    out = []
    for cal in data["calendars"]:
        out.append(f"{cal['resource_class']} ({cal['grantable']} grantable at any instant)")
        if cal["open_ended"]:
            out.append(f"  open-ended, holding every day: {', '.join(cal['open_ended'])}")
        for d in cal["days"]:
            own = f"  yours {d['own']}" if tenant else ""
            out.append(
                f"  {d['date']}  free {d['free']:>4}  granted {d['granted']:>4}  "
                f"booked {d['booked']:>4}{own}"
            )
    return "\n".join(out) or "no pooled classes"


@click.command()
@click.option("--class", "resource_class", help="one resource class (slug)")
@click.option("--tenant", help="a team: its own units too")
@click.option("--weeks", type=int, default=8, show_default=True, help="1 to 26")
@click.pass_context
def calendar(ctx, resource_class, tenant, weeks):
    """Free, granted and booked units per class and day."""
    query = {"weeks": weeks}
    if resource_class:
        query["resource_class"] = resource_class
    if tenant:
        query["tenant"] = tenant
    try:
        data = client(ctx).get("/api/v1/capacity-calendar/", **query)
    except ApiError as exc:
        fail(exc)
    click.echo(json.dumps(data, indent=2) if ctx.obj.as_json else lines(data, tenant))
