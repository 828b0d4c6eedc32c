import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_cache(pure_run):
    """The cache is Redis, which outlives a test (and a run): throttle counts and sign-in
    lockouts would leak into the next one. Only this suite's keys (its KEY_PREFIX) go, so a
    suite running side by side keeps its own. A run of pure tests alone reaches no Redis."""
    if pure_run:
        return
    redis = cache._cache.get_client(write=True)
    keys = list(redis.scan_iter(match=cache.make_key("*"), count=1000))
    if keys:
        redis.delete(*keys)
