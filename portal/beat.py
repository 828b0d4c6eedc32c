"""Exactly one beat sends periodic work, however many run: a lock in Redis (the broker), held
while the beat lives and renewed on every tick. A second beat (a rolling update, a restart that
overlapped, a human) waits as a standby and takes over within the lock's lifetime when the
first one dies.

    celery -A portal beat -S portal.beat:SingletonScheduler
"""

from __future__ import annotations

import logging
import uuid

import redis
from celery.beat import PersistentScheduler
from django.conf import settings

log = logging.getLogger(__name__)

# Renew only if we still hold it: compare and extend in one step.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class BeatLock:
    def __init__(self, url: str, key: str, ttl_s: float):
        self.client = redis.Redis.from_url(url)
        self.key, self.ttl_ms = key, int(ttl_s * 1000)
        self.token = uuid.uuid4().hex

    def hold(self) -> bool:
        """Take the lock or keep it; False while another beat holds it, and while Redis is
        unreachable (the beat waits instead of crashing; nothing could be sent anyway)."""
        try:
            if self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms):
                return True
            return bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))
        except redis.RedisError as exc:
            log.warning("beat lock unavailable (%s): sending nothing until Redis answers", exc)
            return False

    def release(self) -> None:
        try:
            self.client.eval(_RELEASE, 1, self.key, self.token)
        except redis.RedisError:
            pass  # it lapses by itself


class SingletonScheduler(PersistentScheduler):
    def __init__(self, *args, **kwargs):
        self.lock = BeatLock(
            settings.CELERY_BROKER_URL,
            f"gpu-portal:{settings.PORTAL_INSTANCE}:beat",
            settings.BEAT_LOCK_TTL_S,
        )
        self.holding = False
        super().__init__(*args, **kwargs)
        # tick at least this often, so the lock is renewed well before it lapses
        self.max_interval = min(self.max_interval, settings.BEAT_LOCK_TTL_S / 3)

    def tick(self, *args, **kwargs):
        holding = self.lock.hold()
        if holding != self.holding:
            log.warning(
                "beat %s",
                "took the lock: sending periodic work"
                if holding
                else "is a standby: another beat holds the lock",
            )
            self.holding = holding
        if not holding:
            return self.max_interval
        return super().tick(*args, **kwargs)

    def close(self):
        super().close()
        if self.holding:
            self.lock.release()
