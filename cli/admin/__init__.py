"""`gpu-portal admin …`: the platform team's work through the same REST API as the portal,
with a platform admin's token that has the `admin` scope (docs/api.md): approvals, departments,
tenants and members, pools and policy, statements and the chargeback export, queues and why work
waits. A department's admin decides its teams' asks with `departments` and an approve token.

Every command takes `--output json|table` (table by default), and exits 0 when done, 5 when the
API refused the call (its code, `detail` and each field's messages on stderr), 2 on a usage
error."""

from __future__ import annotations

import click

from cli.admin.approvals import approvals
from cli.admin.departments import departments
from cli.admin.pools import policy, pools
from cli.admin.queues import queues, why
from cli.admin.statements import statements
from cli.admin.tenants import members, tenants


@click.group()
def admin():
    """The platform team's work (a platform admin's token with the admin scope)."""


for command in (
    approvals, departments, tenants, members, pools, policy, statements, queues, why
):  # fmt: skip
    admin.add_command(command)
