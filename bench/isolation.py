"""What a benchmark on the local cluster stands on, away from everything else: a database of
its own (created and dropped around the run) and a platform admin to act as."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection


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
