"""Django's Redis cache, with one Redis client per connection pool instead of one per call.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache operation, and
building one fills a table of ~170 response callbacks: about a tenth of a millisecond of CPU,
paid twice on every API call by the throttle alone. A `redis.Redis` over a connection pool is
safe to share between threads (each command takes a connection from the pool), so each pool
gets one, made when first needed (after gunicorn forks its workers)."""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}

    def get_client(self, key=None, *, write=False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            if index not in self._pools:  # as Django's _get_connection_pool, for this index
                self._pools[index] = self._pool_class.from_url(
                    self._servers[index], **self._pool_options
                )
            client = self._client(connection_pool=self._pools[index])
            self._clients[index] = client
        return client


class PortalRedisCache(RedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
