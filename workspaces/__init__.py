"""Interactive workspaces (Jupyter, code-server) on a team's GPUs: docs/workspaces.md."""
