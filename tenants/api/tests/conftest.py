from portal.api.tests.conftest import api  # noqa: F401 - the populated API world
