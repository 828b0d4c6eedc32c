from tests.portal.api.conftest import api  # noqa: F401 - the populated API world
