"""Sign-in lockout (django-axes), counted in Redis so that every process sees the same lock."""

import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.test import Client, RequestFactory
from django.urls import reverse

from portal.signin import client_ip
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db

LOCKED = "Too many failed sign-ins"


def sign_in(client: Client, username: str, password: str):
    return client.post(reverse("login"), {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def axes_keys() -> list[bytes]:
    redis = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    return list(redis.scan_iter(match=cache.make_key("axes-*")))


def test_axes_checks_every_sign_in_first_and_counts_in_the_shared_cache():
    assert django_settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"
    assert django_settings.AXES_HANDLER == "axes.handlers.cache.AxesCacheHandler"
    assert django_settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]
    assert django_settings.AXES_RESET_ON_SUCCESS is True
    assert django_settings.AXES_FAILURE_LIMIT == 5
    assert django_settings.AXES_COOLOFF_TIME == timedelta(minutes=15)
    assert isinstance(caches["default"], RedisCache)  # one cache for every process


def test_wrong_passwords_lock_the_account_and_the_right_one_is_refused_until_cool_off():
    UserFactory(username="alice")  # password "pw"
    client = Client()
    for _ in range(4):
        response = sign_in(client, "alice", "wrong")
        assert response.status_code == 200 and LOCKED not in response.content.decode()
    locked = sign_in(client, "alice", "wrong")
    assert locked.status_code == 429
    body = locked.content.decode()
    assert LOCKED in body and "15 minutes" in body and "platform admin" in body
    refused = sign_in(client, "alice", "pw")
    assert refused.status_code == 429 and LOCKED in refused.content.decode()
    assert not signed_in(client)
    # the lock lasts the cool-off (Redis expires it), so every worker sees it alike
    redis = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    (key,) = axes_keys()
    assert 14 * 60 < redis.ttl(key) <= 15 * 60


def test_the_lock_is_per_username_and_address():
    UserFactory(username="alice")
    UserFactory(username="bob")
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(5):
        sign_in(attacker, "alice", "wrong")
    assert sign_in(attacker, "alice", "pw").status_code == 429
    # alice from her own address, and bob from the attacker's, still sign in
    at_home = Client(REMOTE_ADDR="198.51.100.7")
    assert sign_in(at_home, "alice", "pw").status_code == 302 and signed_in(at_home)
    neighbour = Client(REMOTE_ADDR="203.0.113.9")
    assert sign_in(neighbour, "bob", "pw").status_code == 302 and signed_in(neighbour)


def test_the_right_password_works_again_after_the_cool_off(settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    UserFactory(username="alice")
    client = Client()
    for _ in range(5):
        sign_in(client, "alice", "wrong")
    assert sign_in(client, "alice", "pw").status_code == 429
    time.sleep(2.1)  # a real wait: Redis expires the lock, a fake clock cannot move it
    assert sign_in(client, "alice", "pw").status_code == 302 and signed_in(client)


def test_a_successful_sign_in_forgets_earlier_failures():
    UserFactory(username="alice")
    client = Client()
    for _ in range(4):
        sign_in(client, "alice", "wrong")
    assert sign_in(client, "alice", "pw").status_code == 302
    client.logout()
    for _ in range(4):
        assert sign_in(client, "alice", "wrong").status_code == 200
    assert sign_in(client, "alice", "pw").status_code == 302


def test_the_admin_sign_in_is_locked_too():
    UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    for _ in range(5):
        client.post(reverse("admin:login"), {"username": "root", "password": "wrong"})
    response = client.post(reverse("admin:login"), {"username": "root", "password": "pw"})
    assert response.status_code == 429 and LOCKED in response.content.decode()
    assert not signed_in(client)


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "203.0.113.9", "10.0.0.2"),  # no trusted proxy: a client-set header is ignored
        (1, "203.0.113.9", "203.0.113.9"),
        (1, "6.6.6.6, 203.0.113.9", "203.0.113.9"),  # a forged first entry is skipped
        (2, "6.6.6.6, 203.0.113.9, 10.0.0.1", "203.0.113.9"),
        (2, "10.0.0.1", "10.0.0.2"),  # fewer hops than trusted proxies: the peer
    ],
)
def test_the_client_address_behind_trusted_proxies(settings, proxies, forwarded, expected):
    settings.TRUSTED_PROXY_COUNT = proxies
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected
