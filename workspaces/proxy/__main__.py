"""`python -m workspaces.proxy`: the workspaces' auth proxy, configured from its environment."""

import asyncio
import logging
import sys

from workspaces.proxy.config import ConfigError, from_env
from workspaces.proxy.server import serve


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        config = from_env()
    except ConfigError as exc:
        print(f"workspace proxy: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    try:
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
