import pytest

pytest_plugins = [
    "localcluster.pytest_plugin",
    "tenants.tests.fixtures",
    "scheduler.tests.cluster_helpers",
]


@pytest.fixture(autouse=True)
def _fast_tests(settings):
    settings.RECONCILE_ON_COMMIT = False
