"""What every command shares: the portal's URL and token (checked when a call needs them, so
`gpu-portal completion` and `--help` run without either) and the group's `--json` flag."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from cli.client import Client


@dataclass
class Session:
    url: str | None
    token: str | None
    as_json: bool = False
    _client: Client | None = field(default=None, repr=False)

    @property
    def client(self) -> Client:
        if self._client is None:
            if not self.url:
                raise click.UsageError("Missing option '--url' (or set GPU_PORTAL_URL).")
            if not self.token:
                raise click.UsageError("Missing option '--token' (or set GPU_PORTAL_TOKEN).")
            self._client = Client(self.url, self.token)
        return self._client


def client(ctx: click.Context) -> Client:
    """The HTTP client of this invocation (a usage error, exit 2, without URL or token)."""
    return ctx.find_root().obj.client
