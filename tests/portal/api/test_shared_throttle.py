"""API throttling counts live in Redis, so a limit holds across gunicorn workers, not per
process."""

import pytest
from django.conf import settings as django_settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from tenants.api.throttling import PerTokenThrottle
from tests.portal.api.conftest import bearer

pytestmark = pytest.mark.django_db


def test_the_throttle_uses_the_shared_redis_cache():
    assert isinstance(caches["default"], RedisCache)


def test_throttling_counts_are_shared_by_every_worker(api, monkeypatch):
    monkeypatch.setattr(PerTokenThrottle, "THROTTLE_RATES", {"per_token": "3/min"})
    client = bearer(api.raw["read"])
    assert [client.get("/api/v1/tenants/").status_code for _ in range(4)] == [200, 200, 200, 429]
    # Another gunicorn worker has its own cache client: it sees the same history in Redis.
    config = django_settings.CACHES["default"]
    other_worker = RedisCache(config["LOCATION"], {"KEY_PREFIX": config["KEY_PREFIX"]})
    key = f"throttle_per_token_token-{api.token.pk}"
    assert len(other_worker.get(key)) == 3
    monkeypatch.setattr(PerTokenThrottle, "cache", other_worker)
    assert bearer(api.raw["read"]).get("/api/v1/tenants/").status_code == 429
