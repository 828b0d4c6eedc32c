import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_cache(request):
    """The cache is Redis, which outlives a test (and a run): throttle counts and sign-in
    lockouts would leak into the next one. Only this suite's keys (its KEY_PREFIX) go, so a
    suite running side by side keeps its own. A pure test (conftest.py) reaches no Redis."""
    if request.node.get_closest_marker("pure"):
        return
    redis = cache._cache.get_client(write=True)
    keys = list(redis.scan_iter(match=cache.make_key("*"), count=1000))
    if keys:
        redis.delete(*keys)
