import pytest

pytest_plugins = [
    "localcluster.pytest_plugin",
    "tests.tenants.fixtures",
    "tests.scheduler.cluster_helpers",
    "tests.metering.standins.fixtures",
]


@pytest.fixture(autouse=True)
def _fast_tests(settings):
    settings.RECONCILE_ON_COMMIT = False


@pytest.fixture(scope="session", autouse=True)
def _close_stray_connections(django_db_setup, django_db_blocker):
    """Threads of live servers and in-process Celery workers may leave a connection open to the
    test database; end them before it is dropped, so teardown never fails on 'in use'."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND usename = current_user"  # ours only: a superuser's psql is not ours to end
        )
