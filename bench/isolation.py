"""What a benchmark on the local cluster stands on, away from everything else: a database of
its own (created and dropped around the run), a platform admin to act as, and a clean-up that
runs however the run ends."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection

from localcluster import cluster, fleet


def run_of_its_own(name: str) -> None:
    """An instance label and a namespace prefix no earlier run used: what a run killed half-way
    left on the cluster (its Jobs, its queues lending to the cohort) never counts in this one."""
    run = f"{name}-{uuid.uuid4().hex[:6]}"
    settings.PORTAL_INSTANCE = run
    settings.TENANT_NAMESPACE_PREFIX = f"{run}-"


@contextmanager
def throwaway_database(name: str) -> Iterator[None]:
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = name
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def platform_admin(username: str):
    admin = get_user_model().objects.create_superuser(username, "", None)
    group, _ = Group.objects.get_or_create(name=settings.PLATFORM_ADMIN_GROUP)
    admin.groups.add(group)
    return admin


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def cleaned_up_after(cleanup: Callable[[], None]) -> Iterator[None]:
    """Run the body, then `cleanup`, also when Ctrl-C or a `kill` (SIGTERM, which Python
    otherwise dies of without running any `finally`) stopped it; neither stops the clean-up
    itself (thousands of namespaces left behind would weigh on every run after it)."""
    handlers = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig in handlers:
            signal.signal(sig, signal.SIG_IGN)
        try:
            cleanup()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)


def cluster_as_it_runs(*, bench_nodes: int | None = None) -> None:
    """The local cluster as it runs, started only if it is down, with `bench_nodes` KWOK
    bench nodes (0 removes them). Not `cluster.up()` on a running cluster: from another
    checkout (a worktree) it reads the paths in the components' command lines as a changed
    configuration and restarts every component under whoever else is using the cluster."""
    if not cluster.apiserver_ready():
        cluster.up()
    if bench_nodes is None:
        return
    api = cluster.api_client()
    try:
        fleet.wait_nodes_ready(api, fleet.ensure_nodes(api, bench_nodes), 300)
    finally:
        api.close()
