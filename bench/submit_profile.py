"""The submit call in one process, without a server: CPU and queries per call over a loop of
submits through Django's full request path (middleware, token authentication, throttle, DRF),
each in its own committed transaction as in production, and optionally cProfile's top functions.

    DJANGO_SETTINGS_MODULE=portal.settings.test .venv/bin/python -m bench.submit_profile \
        [--calls 300] [--profile [--dump FILE]]

It runs in a throwaway database (gpu_portal_bench_submit) with the API bench's seed (50 tenants,
a robot member of all with a submit token) and needs neither the local cluster nor a worker: the
Celery message of each submit goes to the bench's own Redis database, purged at the end."""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.submit_profile")
    parser.add_argument("--calls", type=int, default=300, help="submits to time")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed loop")
    parser.add_argument("--top", type=int, default=30, help="functions to print with --profile")
    parser.add_argument("--dump", help="with --profile: also write the stats to this file")
    args = parser.parse_args()
    os.environ["TEST_CELERY_BROKER_URL"] = "redis://127.0.0.1:6379/12"  # the API bench's broker
    os.environ.setdefault("API_THROTTLE_RATE", "1000000/min")
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from bench import api_fixture
    from catalog.models import ResourceClass
    from catalog.services import ensure_resource_classes

    settings.ALLOWED_HOSTS = ["*"]
    settings.API_TOKEN_CACHE_SECONDS = 3600  # the token cached, as in a steady load
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = "gpu_portal_bench_submit"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        ensure_resource_classes([api_fixture.MODEL])
        rc = ResourceClass.objects.get(
            gpu_model=api_fixture.MODEL, resource_name="nvidia.com/mig-3g.40gb"
        )
        _, token, _ = api_fixture.seed_tenants(rc)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

        def submit(i: int) -> None:
            body = {
                "tenant": f"bl{i % api_fixture.LOAD_TENANTS:02d}",
                "name": f"p-{i}",
                "kind": "job",
                "image": api_fixture.IMAGE,
                "command": ["python", "train.py"],
                "resources": {rc.slug: 1},
                "priority": "gpu-low",
            }
            response = client.post("/api/v1/workloads/", body, format="json")
            if response.status_code != 201:
                raise RuntimeError(f"submit {i}: {response.status_code} {response.content!r}")

        for i in range(20):  # warm: caches, the token, connections
            submit(i)
        with CaptureQueriesContext(connection) as queries:
            submit(20)
        print(f"queries per submit: {len(queries)}")
        for q in queries.captured_queries:
            print(f"  {q['sql'][:160]}")
        profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not waits
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        for i in range(21, 21 + args.calls):
            submit(i)
        if profiler:
            profiler.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(
            f"{args.calls} submits: CPU {cpu * 1000 / args.calls:.1f} ms per submit (this "
            f"process), wall {wall * 1000 / args.calls:.1f} ms"
            + (" (under cProfile)" if profiler else "")
        )
        if profiler:
            if args.dump:
                profiler.dump_stats(args.dump)
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.sort_stats("cumulative").print_stats(args.top)
            stats.sort_stats("tottime").print_stats(args.top)
    finally:
        api_fixture.purge_broker()
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
