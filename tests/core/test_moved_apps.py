"""The catalog and workspaces left `scheduler/` for top-level apps (issue 45) without a data
migration: their models keep the app labels and tables they were born with, so a database made
by the previous layout needs nothing applied and reads and writes them as before."""

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.state import ProjectState

# model -> (app label, table), as the previous layout's migrations made them
BORN = {
    "catalog.models.ResourceClass": ("scheduler", "scheduler_resourceclass"),
    "catalog.models.Pool": ("scheduler", "scheduler_pool"),
    "workspaces.models.Workspace": ("workspaces", "workspaces_workspace"),
    "workspaces.models.WorkspacePolicy": ("workspaces", "workspaces_workspacepolicy"),
}


def test_the_moved_models_keep_their_labels_and_tables():
    moved = {
        f"{m.__module__}.{m.__name__}": (m._meta.app_label, m._meta.db_table)
        for m in apps.get_models()
        if m.__module__.split(".")[0] in ("catalog", "workspaces")
    }
    assert {k: moved[k] for k in BORN} == BORN


@pytest.mark.django_db
def test_a_database_of_the_previous_layout_needs_nothing_applied():
    executor = MigrationExecutor(connection)
    # everything the migrations hold is applied, and nothing the models say is missing from them
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    changes = MigrationAutodetector(
        executor.loader.project_state(), ProjectState.from_apps(apps)
    ).changes(graph=executor.loader.graph)
    assert changes == {}
    tables = set(connection.introspection.table_names())
    assert {table for _, table in BORN.values()} <= tables
