"""The portal's Redis cache (portal/cache.py) against the tests' real Redis: one client per
connection pool, shared by every call, and a working cache through it."""

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.redis


def test_every_call_shares_one_client_per_pool_and_the_cache_works():
    client = cache._cache  # Django's RedisCacheClient, the portal's subclass
    first, again = client.get_client(), client.get_client(write=True)
    assert first is again  # one server: reads and writes share its pool, and so its client
    assert first.connection_pool is client._get_connection_pool(write=True)
    cache.set("portal-cache-test", {"n": 1}, 30)
    assert cache.get("portal-cache-test") == {"n": 1}
    cache.set("portal-cache-n", 1, 30)
    assert cache.incr("portal-cache-n") == 2
    cache.delete_many(["portal-cache-test", "portal-cache-n"])
    assert cache.get("portal-cache-test") is None
