"""`python -m faults [--short] [--only NAME ...]`: start the stack, run the stream of work,
inject each fault, recover, and print what was lost (exit 1 if anything was).

Each fault: the stream runs while the fault is injected and held; then the fault is lifted
("recovered" below), the stream pauses, and the run waits for the portal to converge: every
grant on the cluster, every acknowledged workload created once (and cancelled ones gone), every
acknowledged change in the audit log, and metering samples for every minute of the outage.
Recovery time is from lifting the fault to convergence; a check still failing two reconcile
periods (plus a worker restart's margin) after it counts as lost."""

from __future__ import annotations

import argparse
import os
import sys

import django

from faults import stack
from faults.options import ALL, SHORT


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    p.add_argument("--short", action="store_true", help=f"only {', '.join(SHORT)}")
    p.add_argument("--only", nargs="+", choices=ALL, help="these faults, in this order")
    p.add_argument(
        "--prometheus-outage-s",
        type=float,
        default=300.0,
        help="how long Prometheus stays down (default: five minutes)",
    )
    p.add_argument("--verbose", action="store_true", help="also list the 4xx answers seen")
    return p.parse_args(argv)


def main() -> int:
    args = parse()
    # The portal's settings for the run's own PostgreSQL and Redis (their URLs are fixed when
    # faults.stack loads), then Django, before anything that imports a model.
    os.environ.update(stack.portal_env("", stack.Redis().url, stack.Postgres().url))
    django.setup()
    # The one place the fault run loads: faults.run imports models, services and tasks, which
    # need django.setup() first.
    from faults.run import Run

    return Run(args).main()


if __name__ == "__main__":
    sys.exit(main())
