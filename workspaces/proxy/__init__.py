"""The workspaces' auth proxy (issue 51, 4): a small process of its own (`python -m
workspaces.proxy`, the chart's workspace-proxy Deployment) that serves every workspace host
`w<id>.<WORKSPACE_DOMAIN>`. It exchanges the portal's one-time ticket for a host-only workspace
cookie, asks the portal about that cookie (cached a few seconds), strips every portal cookie and
the browser's own credentials, adds the server's secret, and passes HTTP and WebSocket traffic
to the workspace's Service. Standard library only: it imports neither Django nor the portal's
apps (an import-linter contract says so), so its image and its attack surface stay small."""
