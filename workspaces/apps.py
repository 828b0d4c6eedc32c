"""Workspaces as a Django app (label `workspaces`, as before it left `scheduler/`)."""

from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    """Interactive workspaces (Jupyter, code-server) on a team's GPUs: docs/workspaces.md."""

    name = "workspaces"
    label = "workspaces"
    default_auto_field = "django.db.models.BigAutoField"
