"""Replaying a public GPU trace through the portal's policies (issue 16)."""
