"""API tokens read from the cache (issue 19): no query once cached, never the secret nor the
password hash in it, a revocation through the portal at once, anything else within the bound."""

import pickle
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.cache import cache

from tenants.models import ApiToken
from tenants.services import tokens as token_services
from tenants.services.tokens import _cache_key, hash_token

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BOUND = 10


@pytest.fixture
def bounded(settings):
    settings.API_TOKEN_CACHE_SECONDS = BOUND


@pytest.fixture
def issued(world, bounded):
    with time_machine.travel(NOW, tick=False):
        token, raw = token_services.issue_token(
            actor=world.member, user=world.member, name="ci", scopes=["read"]
        )
    return token, raw


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_a_cached_token_costs_no_query(issued, django_assert_num_queries):
    _, raw = issued
    assert token_services.authenticate_token(raw, now=_at(1)) is not None  # reads and caches it
    with django_assert_num_queries(0):
        token = token_services.authenticate_token(raw, now=_at(2))
    assert token is not None and token.user.username == "member"


def test_the_cache_keeps_neither_the_secret_nor_the_password_hash(issued, world):
    token, raw = issued
    token_services.authenticate_token(raw, now=_at(1))
    entry = cache.get(_cache_key(hash_token(raw)))
    assert entry is not None
    stored = pickle.dumps(entry)
    assert raw.encode() not in stored
    assert world.member.password.encode() not in stored
    assert "password" not in entry[1].user.__dict__  # deferred: a save() cannot blank it
    # keyed by the secret's sha256, which is all the database has of it too
    assert _cache_key(token.token_hash) == _cache_key(hash_token(raw))


def test_a_revocation_through_the_portal_takes_effect_at_once(
    issued, world, django_capture_on_commit_callbacks
):
    token, raw = issued
    assert token_services.authenticate_token(raw, now=_at(1)) is not None
    with django_capture_on_commit_callbacks(execute=True):
        token_services.revoke_token(actor=world.member, token=token)
    assert token_services.authenticate_token(raw, now=_at(2)) is None


def test_a_user_deactivated_behind_the_portals_back_loses_the_token_within_the_bound(issued):
    token, raw = issued
    assert token_services.authenticate_token(raw, now=_at(0)) is not None
    get_user_model().objects.filter(pk=token.user_id).update(is_active=False)
    # the stated bound: until API_TOKEN_CACHE_SECONDS after the row was read, not one second more
    assert token_services.authenticate_token(raw, now=_at(BOUND - 0.001)) is not None
    assert token_services.authenticate_token(raw, now=_at(BOUND)) is None


def test_a_revocation_that_missed_the_cache_takes_effect_within_the_bound(issued):
    token, raw = issued
    assert token_services.authenticate_token(raw, now=_at(0)) is not None
    # e.g. a call that read the row just before the revocation committed, and cached it after
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=_at(1))
    assert token_services.authenticate_token(raw, now=_at(BOUND)) is None


def test_recording_a_use_does_not_renew_the_entry(issued, settings):
    settings.API_TOKEN_CACHE_SECONDS = 120  # longer than the minute between recorded uses
    token, raw = issued
    assert token_services.authenticate_token(raw, now=_at(0)) is not None
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=_at(1))
    assert (
        token_services.authenticate_token(raw, now=_at(61)) is not None
    )  # records a use, re-stores
    token.refresh_from_db()
    assert token.last_used_at == _at(61)
    assert token_services.authenticate_token(raw, now=_at(119)) is not None
    assert (
        token_services.authenticate_token(raw, now=_at(120)) is None
    )  # 120 s after the first read


def test_expiry_is_checked_on_every_call_not_when_cached(issued):
    token, raw = issued
    ApiToken.objects.filter(pk=token.pk).update(expires_at=_at(5))
    assert token_services.authenticate_token(raw, now=_at(1)) is not None
    assert token_services.authenticate_token(raw, now=_at(5)) is None


def test_a_clock_set_back_does_not_stretch_the_bound(issued):
    token, raw = issued
    assert token_services.authenticate_token(raw, now=_at(5)) is not None
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=_at(6))
    assert (
        token_services.authenticate_token(raw, now=_at(4)) is None
    )  # read "in the future": re-read


def test_last_use_is_still_recorded_at_most_once_a_minute(issued, settings):
    settings.API_TOKEN_CACHE_SECONDS = 120  # longer than the minute, to see both paths
    token, raw = issued
    token_services.authenticate_token(raw, now=_at(0))
    token_services.authenticate_token(raw, now=_at(30))  # from the cache: no write
    token.refresh_from_db()
    assert token.last_used_at == _at(0)
    token_services.authenticate_token(raw, now=_at(61))
    token.refresh_from_db()
    assert token.last_used_at == _at(61)


def test_no_cache_at_all_with_a_bound_of_zero(world, settings, django_assert_num_queries):
    settings.API_TOKEN_CACHE_SECONDS = 0
    _, raw = token_services.issue_token(
        actor=world.member, user=world.member, name="z", scopes=["read"]
    )
    token_services.authenticate_token(raw)
    with django_assert_num_queries(1):
        assert token_services.authenticate_token(raw) is not None
    assert cache.get(_cache_key(hash_token(raw))) is None


def test_a_cache_that_does_not_answer_does_not_undo_a_revocation(
    issued, world, monkeypatch, django_capture_on_commit_callbacks
):
    token, raw = issued

    def down(*args, **kwargs):
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(cache, "delete", down)  # the outage, not the database: that stays real
    with django_capture_on_commit_callbacks(execute=True):
        token_services.revoke_token(actor=world.member, token=token)
    token.refresh_from_db()
    assert token.revoked_at is not None
