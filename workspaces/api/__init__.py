"""The workspaces REST API."""
