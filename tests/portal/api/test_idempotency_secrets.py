"""Idempotency records never keep or replay a secret, and are purged after their TTL (issue 13)."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from core.models import IdempotencyRecord
from core.tasks import purge_idempotency_records
from tenants.models import ApiToken
from tests.portal.api.conftest import session
from tests.portal.api.test_behaviour import job

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _create_token(client, key="tok-1", name="ci"):
    return client.post(
        "/api/v1/tokens/",
        {"name": name, "scopes": ["read"]},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def test_a_token_secret_is_never_stored_with_its_idempotency_record(world):
    response = _create_token(session(world.member))
    assert response.status_code == 201
    secret = response.json()["token"]
    record = IdempotencyRecord.objects.get(key="tok-1")
    assert secret not in str(record.response_body)
    assert "token" not in record.response_body
    assert record.response_body["id"] == response.json()["id"]  # the rest is kept


def test_a_retry_of_a_token_create_is_a_409_that_never_sends_the_secret_again(world):
    client = session(world.member)
    first = _create_token(client)
    secret = first.json()["token"]
    again = _create_token(client)
    assert again.status_code == 409
    body = again.json()
    assert body["code"] == "secret_shown_once"
    assert secret not in again.content.decode()
    token = ApiToken.objects.get(pk=first.json()["id"])
    # says what happened and what to do: which token was created, revoke it, use a new key
    assert str(token.pk) in body["detail"]
    assert "revoke" in body["detail"] and "new Idempotency-Key" in body["detail"]
    assert again["Idempotent-Replayed"] == "true"
    assert ApiToken.objects.filter(name="ci").count() == 1  # not created twice


def test_a_retry_with_another_body_is_still_idempotency_key_reused(world):
    client = session(world.member)
    _create_token(client)
    other = _create_token(client, name="other")
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"


def test_creates_without_secrets_still_replay_their_first_answer(api, world):
    client = session(world.member)
    first = client.post("/api/v1/workloads/", job(world), format="json", HTTP_IDEMPOTENCY_KEY="w")
    again = client.post("/api/v1/workloads/", job(world), format="json", HTTP_IDEMPOTENCY_KEY="w")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()


def test_a_create_whose_secret_field_was_empty_replays_and_one_with_a_secret_does_not(world):
    client = session(world.owner)

    def add(kind, target, key):
        body = {"tenant": "team-a", "kind": kind, "name": f"{kind}-ch", "target": target}
        return client.post(
            "/api/v1/notification-channels/", body, format="json", HTTP_IDEMPOTENCY_KEY=key
        )

    first = add("email", "ops@example.com", "mail-1")
    again = add("email", "ops@example.com", "mail-1")
    assert first.status_code == again.status_code == 201  # no secret: the same answer again
    assert again.json() == first.json() and again.json()["secret"] is None
    hooked = add("webhook", "https://hooks.example/in", "hook-1")
    assert hooked.status_code == 201 and hooked.json()["secret"].startswith("whsec_")
    retried = add("webhook", "https://hooks.example/in", "hook-1")
    assert retried.status_code == 409 and retried.json()["code"] == "secret_shown_once"
    assert hooked.json()["secret"] not in retried.content.decode()
    assert "its secret was in that answer only" in retried.json()["detail"]


def test_records_older_than_the_ttl_are_purged_by_the_beat_task(world, settings):
    settings.IDEMPOTENCY_KEY_TTL_HOURS = 24
    client = session(world.member)
    with time_machine.travel(NOW, tick=False):
        _create_token(client, key="old")
    with time_machine.travel(NOW + timedelta(hours=23), tick=False):
        _create_token(client, key="young")
    with time_machine.travel(NOW + timedelta(hours=24, minutes=1), tick=False):
        assert purge_idempotency_records() == 1
    assert set(IdempotencyRecord.objects.values_list("key", flat=True)) == {"young"}


def test_the_purge_runs_on_beat(settings):
    from portal.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["purge-idempotency-records"]
    assert entry["task"] == "core.tasks.purge_idempotency_records"
    app.loader.import_default_modules()
    assert entry["task"] in app.tasks


def test_the_migration_forgets_the_secrets_older_records_kept(world):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("core.migrations.0002_forget_stored_token_secrets")
    old = IdempotencyRecord.objects.create(
        user=world.member,
        key="before-issue-13",
        method="POST",
        path="/api/v1/tokens/",
        body_hash="x" * 64,
        status_code=201,
        response_body={"id": 7, "prefix": "gpp_abcdefgh", "token": "gpp_secret"},
    )
    other = IdempotencyRecord.objects.create(
        user=world.member,
        key="a-workload",
        method="POST",
        path="/api/v1/workloads/",
        body_hash="y" * 64,
        status_code=201,
        response_body={"id": 8, "token": "not a secret here"},
    )
    migration.forget_secrets(apps, None)
    old.refresh_from_db()
    other.refresh_from_db()
    assert old.response_body == {"id": 7, "prefix": "gpp_abcdefgh"}
    assert other.response_body == {"id": 8, "token": "not a secret here"}
