"""Maximum run time (issue 30, item 4) without the cluster: the rule (pure), the settings on a
pool and a team (checked, audited, by API a 400 that says what to change), the limit a job is
told at submit, the label on its Job, and Kueue's verdict read back. On the real cluster:
test_max_run_time_cluster.py."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from catalog import run_limits
from catalog import services as catalog
from core.errors import InvalidInput
from scheduler.workloads.kinds.manifests import observe, render_job
from scheduler.workloads.models import Workload
from tenants.models import AuditEvent
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer
from tests.scheduler.test_workloads import SPEC, submit

LABEL = "kueue.x-k8s.io/max-exec-time-seconds"

# --- the rule, pure ------------------------------------------------------------------------------


def test_the_smallest_limit_that_is_set_wins():
    assert run_limits.smallest_limit(None, None) is None
    assert run_limits.smallest_limit(14400, None) == 14400
    assert run_limits.smallest_limit(14400, 7200, None) == 7200


@pytest.mark.parametrize("bad", [0, -1, -3600, 2**31, 1.5, "3600", True])
def test_a_limit_is_whole_seconds_from_one_to_kueues_int32(bad):
    with pytest.raises(InvalidInput) as exc:
        run_limits.check_max_run_s(bad)
    assert "whole seconds from 1 to 2147483647" in exc.value.detail
    assert "e.g. 14400 for 4 h" in exc.value.detail and "null for no limit" in exc.value.detail


def test_a_limit_of_none_or_in_range_is_kept():
    assert run_limits.check_max_run_s(None) is None
    assert run_limits.check_max_run_s(1) == 1
    assert run_limits.check_max_run_s(2**31 - 1) == 2**31 - 1


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(45, "45 s"), (60, "1 min"), (5400, "1 h 30 min"), (14400, "4 h"), (183600, "2 d 3 h")],
)
def test_durations_in_words(seconds, words):
    assert run_limits.duration_words(seconds) == words


# --- the Job's label, and Kueue's verdict read back (pure) ------------------------------------


def test_a_job_with_a_maximum_run_time_carries_kueues_label_and_one_without_none():
    assert LABEL not in render_job(SPEC)["metadata"]["labels"]
    job = render_job(replace(SPEC, max_run_s=14400))
    assert job["metadata"]["labels"][LABEL] == "14400"
    # on the Job only: Kueue reads it there; the pods are not Kueue's to stop
    assert LABEL not in job["spec"]["template"]["metadata"]["labels"]


def _kueue_workload(active, conditions, limit=14400):
    return {
        "metadata": {"name": "job-train-1"},
        "spec": {"active": active, "maximumExecutionTimeSeconds": limit},
        "status": {"conditions": conditions},
    }


SUSPENDED_JOB = {"spec": {"suspend": True}, "status": {}}


def test_a_job_kueue_stopped_at_its_maximum_run_time_is_failed_and_says_why():
    evicted = {
        "type": "Evicted",
        "status": "True",
        "reason": "DeactivatedDueToMaximumExecutionTimeExceeded",
        "message": "The workload is deactivated due to exceeding the maximum execution time",
    }
    seen = observe("job", SUSPENDED_JOB, [], [], [_kueue_workload(False, [evicted])])
    assert (seen.state, seen.reason) == ("failed", "MaxRunTimeExceeded")
    assert seen.message == (
        "stopped after its maximum run time of 4 h: Kueue deactivated it and freed its quota"
    )
    # the moment before the eviction: Kueue has marked it, the Job still runs its pod
    target = {
        "type": "DeactivationTarget",
        "status": "True",
        "reason": "MaximumExecutionTimeExceeded",
    }
    seen = observe("job", SUSPENDED_JOB, [], [], [_kueue_workload(True, [target])])
    assert seen.reason == "MaxRunTimeExceeded"


def test_a_job_deactivated_for_another_reason_is_not_said_to_have_run_too_long():
    # the portal's reclaim deactivates a borrower's Workload; it waits and is requeued
    evicted = {"type": "Evicted", "status": "True", "reason": "Deactivated"}
    seen = observe("job", SUSPENDED_JOB, [], [], [_kueue_workload(False, [evicted])])
    assert seen.state == "queued" and seen.reason != "MaxRunTimeExceeded"


# --- settings on a pool and a team: checked, audited -------------------------------------------


@pytest.mark.django_db
def test_a_pools_maximum_run_time_is_set_audited_and_cleared(world):
    catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=14400)
    world.pool.refresh_from_db()
    assert world.pool.max_run_s == 14400
    changed = AuditEvent.objects.filter(verb="pool.changed").latest("id")
    assert (changed.before["max_run_s"], changed.after["max_run_s"]) == (None, 14400)
    # leaving it out changes nothing; None clears it
    catalog.set_pool(actor=world.admin, resource_class=world.rc, capacity=12)
    world.pool.refresh_from_db()
    assert world.pool.max_run_s == 14400
    catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=None)
    world.pool.refresh_from_db()
    assert world.pool.max_run_s is None


@pytest.mark.django_db
@pytest.mark.parametrize("bad", [0, -60])
def test_a_pool_or_team_limit_of_zero_or_less_is_refused_and_nothing_changes(world, bad):
    with pytest.raises(InvalidInput) as exc:
        catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=bad)
    assert exc.value.field == "max_run_s"
    with pytest.raises(InvalidInput):
        tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, max_run_s=bad)
    world.pool.refresh_from_db()
    world.tenant.refresh_from_db()
    assert world.pool.max_run_s is None and world.tenant.max_run_s is None
    assert not AuditEvent.objects.filter(verb__in=["pool.changed", "tenant.edited"]).exists()


@pytest.mark.django_db
def test_a_teams_maximum_run_time_is_audited(world):
    tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, max_run_s=7200)
    edited = AuditEvent.objects.get(verb="tenant.edited")
    assert (edited.before, edited.after) == ({"max_run_s": None}, {"max_run_s": 7200})


# --- by API: a 400 that says what to change -----------------------------------------------------


@pytest.fixture
def admin_client(world):
    _, raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="platform-bot", scopes=["admin"]
    )
    return bearer(raw)


@pytest.mark.django_db
@pytest.mark.parametrize("bad", [0, -3600])
def test_by_api_a_limit_of_zero_or_less_is_a_400_that_says_what_to_change(world, admin_client, bad):
    for url in (f"/api/v1/pools/{world.rc.slug}/", f"/api/v1/tenants/{world.tenant.slug}/"):
        response = admin_client.patch(url, {"max_run_s": bad}, format="json")
        assert response.status_code == 400, response.content
        body = response.json()
        assert body["code"] == "invalid", body
        assert "max_run_s must be whole seconds from 1" in body["detail"]
        assert list(body["errors"]) == ["max_run_s"]
        assert "e.g. 14400 for 4 h" in body["detail"]


@pytest.mark.django_db
def test_by_api_a_pool_and_a_team_show_and_take_their_limits(world, admin_client):
    pool = admin_client.patch(
        f"/api/v1/pools/{world.rc.slug}/", {"max_run_s": 14400}, format="json"
    )
    assert pool.status_code == 200 and pool.json()["max_run_s"] == 14400
    team = admin_client.patch(
        f"/api/v1/tenants/{world.tenant.slug}/", {"max_run_s": 7200}, format="json"
    )
    assert team.status_code == 200 and team.json()["max_run_s"] == 7200
    cleared = admin_client.patch(
        f"/api/v1/tenants/{world.tenant.slug}/", {"max_run_s": None}, format="json"
    )
    assert cleared.json()["max_run_s"] is None


# --- at submit: the limit a job is told -------------------------------------------------------


@pytest.fixture
def granted(world):
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=3
    )
    return world


@pytest.mark.django_db
def test_a_job_gets_the_smallest_of_its_pools_and_its_teams_limit_fixed_at_submit(granted):
    world = granted
    assert submit(world, name="free").max_run_s is None  # no limit anywhere
    catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=14400)
    pooled = submit(world, name="pooled")
    assert (pooled.max_run_s, pooled.max_run_words) == (14400, "stops after 4 h of running")
    tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, max_run_s=3600)
    assert submit(world, name="team").max_run_s == 3600  # the team's is smaller
    tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, max_run_s=86400)
    assert submit(world, name="pool-again").max_run_s == 14400  # the pool's is smaller
    # a change later does not move the limit a job was told (Kueue's label is immutable)
    catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=60)
    pooled.refresh_from_db()
    assert pooled.max_run_s == 14400
    audit = AuditEvent.objects.get(verb="workload.submitted", object_id=str(pooled.pk))
    assert audit.after["max_run_s"] == 14400


@pytest.mark.django_db
def test_a_deployment_serves_until_stopped_whatever_the_limits(granted):
    world = granted
    catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=14400)
    tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, max_run_s=3600)
    served = submit(world, name="serve", kind="deployment")
    assert served.max_run_s is None and served.max_run_words == ""


@pytest.mark.django_db
def test_the_submit_answer_states_the_limit_and_a_running_job_when_it_ends(granted):
    world = granted
    catalog.set_pool(actor=world.admin, resource_class=world.rc, max_run_s=14400)
    _, raw = token_services.issue_token(
        actor=world.member, user=world.member, name="ci", scopes=["read", "submit"]
    )
    client = bearer(raw)
    body = {
        "tenant": world.tenant.slug,
        "name": "ci-train",
        "kind": "job",
        "image": "busybox:1.36",
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
    }
    created = client.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.content
    answer = created.json()
    assert (answer["max_run_s"], answer["max_run"]) == (14400, "stops after 4 h of running")
    assert answer["run_ends_at"] is None  # not running yet
    started = timezone.now() - timedelta(hours=1)
    Workload.objects.filter(pk=answer["id"]).update(state="running", started_at=started)
    shown = client.get(f"/api/v1/workloads/{answer['id']}/").json()
    ends = Workload.objects.get(pk=answer["id"]).run_ends_at
    assert ends == started + timedelta(hours=4)
    assert shown["run_ends_at"].startswith(ends.strftime("%Y-%m-%dT%H:%M:%S"))
