import hashlib
import os
from pathlib import Path

import pytest

pytest_plugins = [
    "localcluster.pytest_plugin",
    "tests.tenants.fixtures",
    "tests.scheduler.cluster_helpers",
    "tests.metering.standins.fixtures",
    "tests.browsers",
]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """One test database per checkout and lane: a session in a worktree or a CI clone never
    drops the database another checkout's session is using (pytest-django recreates it at
    start), and each xdist worker of the database lane has its own."""
    from django.conf import settings

    checkout = hashlib.sha256(str(Path(__file__).resolve().parent).encode()).hexdigest()[:8]
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    for db in settings.DATABASES.values():
        test = db.setdefault("TEST", {})
        test["NAME"] = f"test_{db['NAME']}_{checkout}" + (f"_{worker}" if worker else "")


@pytest.fixture(autouse=True)
def _fast_tests(settings):
    settings.RECONCILE_ON_COMMIT = False


# Tests that need no database, no Redis and no cluster are marked `pure`, here, from what they
# ask for: `make test-fast` runs them alone (-m pure), with no database and no Redis to reach.
# A test that reaches the database unasked fails (pytest-django blocks it), so the mark cannot
# quietly lie about the database.
IMPURE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
        "client",  # the middleware: sessions, the cache (Redis), sign-in lockouts
        "async_client",
        "admin_client",
        "kube_cluster",
        "kube_worker",
        "helm",  # tests/deploy: the Helm binary, built (or waited for) by localcluster.build
    }
)
IMPURE_MARKERS = ("django_db", "cluster", "celery", "redis")


def is_pure(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return IMPURE_FIXTURES.isdisjoint(fixtures) and not any(
        item.get_closest_marker(name) for name in IMPURE_MARKERS
    )


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_pure(item):
            item.add_marker(pytest.mark.pure)


@pytest.fixture(scope="session")
def pure_run(request) -> bool:
    """Only pure tests were selected (`make test-fast`): no database or Redis to set up or clean.
    A pure test in a full run gets the same clean slate as every other."""
    return all(item.get_closest_marker("pure") for item in request.session.items)


@pytest.fixture(scope="session", autouse=True)
def _close_stray_connections(request, pure_run):
    """Threads of live servers and in-process Celery workers may leave a connection open to the
    test database; end them before it is dropped, so teardown never fails on 'in use'. A run of
    pure tests only sets up no database."""
    if pure_run:
        yield
        return
    request.getfixturevalue("django_db_setup")
    django_db_blocker = request.getfixturevalue("django_db_blocker")
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND usename = current_user"  # ours only: a superuser's psql is not ours to end
        )
