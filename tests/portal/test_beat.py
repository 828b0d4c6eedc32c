"""Exactly one beat sends periodic work: the lock in Redis, and two schedulers side by side."""

import time
import uuid

import pytest
from django.conf import settings

from portal.beat import BeatLock, SingletonScheduler
from portal.celery import app

pytestmark = pytest.mark.celery


def test_one_lock_holder_at_a_time_and_a_standby_takes_over_when_it_lapses():
    key = f"test-beat-{uuid.uuid4().hex}"
    first = BeatLock(settings.CELERY_BROKER_URL, key, ttl_s=0.5)
    second = BeatLock(settings.CELERY_BROKER_URL, key, ttl_s=0.5)
    assert first.hold() and first.hold()  # taken, then renewed
    assert not second.hold()
    first.release()
    assert second.hold() and not first.hold()
    second.client.pexpire(key, 1)  # the holder died: its lock lapses
    time.sleep(0.05)
    assert first.hold()
    first.release()


class Counting(SingletonScheduler):
    """Counts what it would send instead of sending it."""

    sent: list[str]

    def apply_entry(self, entry, producer=None):
        self.sent.append(entry.name)


def test_two_beats_side_by_side_send_each_periodic_task_once(tmp_path, settings):
    settings.PORTAL_INSTANCE = f"beat-{uuid.uuid4().hex[:6]}"
    schedule = {"tick": {"task": "tenants.tasks.expire_grants", "schedule": 0.01}}
    app.conf.beat_schedule = schedule
    beats = []
    for n in range(2):
        beat = Counting(app=app, schedule_filename=str(tmp_path / f"beat-{n}"), lazy=False)
        beat.sent = []
        beats.append(beat)
    try:
        for _ in range(100):  # until the entry has come due a few times
            for beat in beats:
                beat.tick()
            if len(beats[0].sent) >= 3:
                break
            time.sleep(0.01)
        assert len(beats[0].sent) >= 3 and beats[1].sent == []
        beats[0].close()  # the first beat stops: the standby takes over at once
        for _ in range(100):
            beats[1].tick()
            if beats[1].sent:
                break
            time.sleep(0.01)
        assert beats[1].sent
    finally:
        app.conf.beat_schedule = settings.CELERY_BEAT_SCHEDULE
        beats[1].close()


def test_an_unreachable_redis_makes_a_standby_not_a_crash():
    lock = BeatLock("redis://127.0.0.1:1/0", "unreachable", ttl_s=1)
    assert lock.hold() is False
    lock.release()  # no error either
