"""A pool's and a team's idle policy by API (issue 30, item 3): shown, set, audited; bad input is
a 400 that names the field and says what to change, and a refused change leaves it as it was."""

import pytest
from django.urls import reverse

from catalog.models import Pool
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


def test_a_team_takes_its_own_idle_policy_and_a_bad_one_changes_nothing(world, admin_client):
    url = f"/api/v1/tenants/{world.tenant.slug}/"
    bad = admin_client.patch(
        url,
        {"idle_threshold_pct": 5, "idle_warn_after_s": 3600, "idle_suspend_after_s": 600},
        format="json",
    )
    assert bad.status_code == 400, bad.content
    assert list(bad.json()["errors"]) == ["idle_suspend_after_s"]
    world.tenant.refresh_from_db()
    assert world.tenant.idle_threshold_pct is None and world.tenant.idle_warn_after_s == 1800

    on = admin_client.patch(
        url, {"idle_threshold_pct": 10, "idle_suspend_after_s": 3600}, format="json"
    )
    assert on.status_code == 200, on.content
    assert (on.json()["idle_threshold_pct"], on.json()["idle_suspend_after_s"]) == (10, 3600)
    audit = AuditEvent.objects.filter(verb="tenant.edited").first()
    assert audit.before["idle_threshold_pct"] is None and audit.after["idle_threshold_pct"] == 10


def test_a_workload_gets_the_strictest_of_its_teams_and_its_pools_policies(world):
    from metering.idle_runs import policies_in_force
    from tests.scheduler.factories import WorkloadFactory

    w = WorkloadFactory(tenant=world.tenant, resources={world.rc.slug: 1})
    assert not policies_in_force() and policies_in_force().for_workload(w) is None
    # the pool only
    Pool.objects.filter(pk=world.pool.pk).update(
        idle_threshold_pct=5, idle_warn_after_s=1800, idle_suspend_after_s=2700
    )
    assert policies_in_force().for_workload(w).suspend_after_s == 2700
    # the team's suspends sooner: it wins; another team's workload keeps the pool's
    world.tenant.idle_threshold_pct, world.tenant.idle_suspend_after_s = 10, 1200
    world.tenant.idle_warn_after_s = 600
    world.tenant.save()
    policies = policies_in_force()
    assert (policies.for_workload(w).threshold_pct, policies.for_workload(w).suspend_after_s) == (
        10,
        1200,
    )
    other = WorkloadFactory(tenant=world.other_tenant, resources={world.rc.slug: 1})
    assert policies.for_workload(other).suspend_after_s == 2700
    # a team's looser policy does not loosen the pool's
    world.tenant.idle_warn_after_s, world.tenant.idle_suspend_after_s = 7200, 10800
    world.tenant.save()
    assert policies_in_force().for_workload(w).suspend_after_s == 2700
