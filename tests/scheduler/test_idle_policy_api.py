"""A pool's idle policy by API (issue 30, item 3): shown, set, audited; bad input is a 400 that
names the field and says what to change, and a refused change leaves the pool as it was."""

import pytest
from django.urls import reverse

from scheduler.catalog.models import Pool
from tenants.models import AuditEvent
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(world):
    _, raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="platform-bot", scopes=["admin"]
    )
    return bearer(raw)


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({"idle_threshold_pct": 150}, "idle_threshold_pct", "whole percentage from 1 to 100"),
        ({"idle_threshold_pct": 5, "idle_warn_after_s": -60}, "idle_warn_after_s", "from 60"),
        ({"idle_threshold_pct": 5, "idle_suspend_after_s": -1}, "idle_suspend_after_s", "from 60"),
        ({"idle_threshold_pct": 5, "idle_protect_s": -5}, "idle_protect_s", "from 0"),
        (
            {"idle_threshold_pct": 5, "idle_warn_after_s": 3600, "idle_suspend_after_s": 600},
            "idle_suspend_after_s",
            "must be longer than idle_warn_after_s",
        ),
    ],
)
def test_a_bad_idle_policy_is_a_400_that_says_what_to_change(
    world, admin_client, body, field, said
):
    response = admin_client.patch(f"/api/v1/pools/{world.rc.slug}/", body, format="json")
    assert response.status_code == 400, response.content
    answer = response.json()
    assert answer["code"] == "invalid" and list(answer["errors"]) == [field]
    assert said in answer["detail"]
    assert Pool.objects.get(pk=world.pool.pk).idle_threshold_pct is None  # nothing half-written


def test_a_pool_takes_shows_and_audits_its_idle_policy_and_turns_it_off(world, admin_client):
    url = f"/api/v1/pools/{world.rc.slug}/"
    on = admin_client.patch(
        url,
        {"idle_threshold_pct": 5, "idle_warn_after_s": 1800, "idle_suspend_after_s": 2700},
        format="json",
    )
    assert on.status_code == 200, on.content
    shown = on.json()
    assert (shown["idle_threshold_pct"], shown["idle_warn_after_s"]) == (5, 1800)
    assert (shown["idle_suspend_after_s"], shown["idle_protect_s"]) == (2700, 900)
    audit = AuditEvent.objects.filter(verb="pool.changed").first()
    assert audit.before["idle_threshold_pct"] is None and audit.after["idle_threshold_pct"] == 5
    assert Pool.objects.get(pk=world.pool.pk).idle_policy.words == (
        "below 5 % GPU use: warned after 30 min, suspended after 45 min"
    )
    off = admin_client.patch(url, {"idle_threshold_pct": None}, format="json")
    assert off.json()["idle_threshold_pct"] is None
    assert Pool.objects.get(pk=world.pool.pk).idle_policy is None


def test_only_the_platform_team_sets_it(world, client):
    client.force_login(world.owner)
    response = client.patch(
        f"/api/v1/pools/{world.rc.slug}/",
        {"idle_threshold_pct": 5},
        content_type="application/json",
    )
    assert response.status_code in (403, 404)


def test_the_pool_admin_sets_the_idle_policy_through_the_service(world, client):
    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    url = reverse("admin:scheduler_pool_change", args=[world.pool.pk])
    form = {
        "resource_class": world.rc.pk,
        "capacity": 10,
        "overcommit_ratio": "1.00",
        "reclaim_grace_s": 600,
        "lend_idle": "on",
        "idle_threshold_pct": 5,
        "idle_warn_after_s": 600,
        "idle_suspend_after_s": 1200,
    }
    assert client.post(url, form).status_code == 302
    pool = Pool.objects.get(pk=world.pool.pk)
    assert (pool.idle_threshold_pct, pool.idle_warn_after_s, pool.idle_suspend_after_s) == (
        5,
        600,
        1200,
    )
    refused = client.post(url, {**form, "idle_suspend_after_s": 300}, follow=True)
    assert "must be longer than idle_warn_after_s" in refused.content.decode()
    assert Pool.objects.get(pk=world.pool.pk).idle_suspend_after_s == 1200
