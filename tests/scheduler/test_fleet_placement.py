"""A team's work placed on the fleet: a grant names a registered worker or a group of them
(a 400 that says what to change otherwise), a team's grants stay in one place (MultiKueue
dispatches a whole queue), the platform team moves a team's grants together (audited, by API;
others get a 403), a request approved later joins them, and the team's spec carries the check
its queue needs on the manager. A single-cluster install places nothing."""

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import InvalidInput
from scheduler.cluster import fleet
from scheduler.cluster.models import Cluster
from scheduler.cluster.reconcile.specs import build_specs
from tenants.models import AuditEvent, QuotaGrant
from tenants.services import approvals, placing
from tenants.services.grants import grant_quota
from tenants.services.requests import submit_capacity_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def workers(world):
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    for name, group, preference in (("east", "burst", 10), ("west", "burst", 20), ("solo", "", 5)):
        fleet.register_cluster(
            actor=world.admin,
            name=name,
            group=group,
            preference=preference,
            credentials_secret_name=f"{name}-kubeconfig",
        )


def _grant(world, placement="", amount=1, tenant=None):
    return grant_quota(
        actor=world.admin,
        tenant=tenant or world.tenant,
        resource_class=world.rc,
        amount=amount,
        placement=placement,
    )


def test_a_single_cluster_places_nothing_and_says_so(world):
    with pytest.raises(InvalidInput, match="no worker cluster is registered") as refused:
        _grant(world, "group:burst")
    assert refused.value.field == "placement"
    assert not QuotaGrant.objects.exists()
    grant = _grant(world)  # at home, as ever
    assert grant.placement == ""
    spec = build_specs([world.tenant])[world.tenant.pk]
    assert spec.dispatch_check == ""


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("group:nope", "no active worker is in group 'nope' (groups: burst)"),
        ("cluster:north", "no active worker 'north' is registered (workers: solo, east, west)"),
        ("somewhere", "is not a placement"),
    ],
)
def test_a_placement_the_fleet_does_not_have_is_a_clear_400(world, workers, value, words):
    with pytest.raises(InvalidInput, match=re.escape(words)):
        _grant(world, value)
    assert not QuotaGrant.objects.exists()


def test_a_teams_grants_run_in_one_place(world, workers):
    first = _grant(world, "group:burst")
    assert first.placement == "group:burst"
    audit = AuditEvent.objects.get(verb="quota_grant.created", object_id=str(first.pk))
    assert audit.after["placement"] == "group:burst"
    with pytest.raises(InvalidInput, match="team-a's grants run on any worker of group burst"):
        _grant(world, "")
    assert QuotaGrant.objects.count() == 1
    _grant(world, "group:burst")  # the same place: fine
    other = _grant(world, "cluster:solo", tenant=world.other_tenant)  # another team elsewhere
    assert other.placement == "cluster:solo"


def test_a_request_approved_later_runs_where_the_team_runs(world, workers):
    _grant(world, "cluster:east")
    ask = submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: 1},
        ends_at=timezone.now() + timedelta(days=100),
        justification="more",
    )
    if ask.state == "submitted":  # outside the policy's envelope: the admin decides
        approvals.approve_capacity_request(actor=world.admin, request=ask)
    assert set(QuotaGrant.objects.values_list("placement", flat=True)) == {"cluster:east"}


def test_moving_a_team_moves_all_its_grants_audited_and_reconciled(world, workers, monkeypatch):
    reconciled = []
    monkeypatch.setattr(placing, "notify_desired_state_changed", lambda t: reconciled.append(t.pk))
    _grant(world), _grant(world)
    moved = placing.place_team(
        actor=world.admin, tenant=world.tenant, placement_value="group:burst", comment="burst"
    )
    assert moved == 2 and reconciled == [world.tenant.pk]
    assert set(QuotaGrant.objects.values_list("placement", flat=True)) == {"group:burst"}
    events = AuditEvent.objects.filter(verb="quota_grant.placed")
    assert events.count() == 2
    assert {(e.before["placement"], e.after["placement"]) for e in events} == {("", "group:burst")}
    # again: nothing moves, nothing is written or reconciled
    assert (
        placing.place_team(actor=world.admin, tenant=world.tenant, placement_value="group:burst")
        == 0
    )
    assert AuditEvent.objects.filter(verb="quota_grant.placed").count() == 2
    assert reconciled == [world.tenant.pk]


def test_the_team_spec_carries_its_placements_check(world, workers):
    _grant(world, "group:burst")
    _grant(world, tenant=world.other_tenant)
    specs = build_specs([world.tenant, world.other_tenant])
    instance = settings.PORTAL_INSTANCE
    assert specs[world.tenant.pk].dispatch_check == f"gpu-portal-{instance}-group-burst"
    assert specs[world.other_tenant.pk].dispatch_check == ""


def test_placing_by_api_is_the_platform_teams(world, workers):
    _grant(world)
    url = f"/api/v1/tenants/{world.tenant.slug}/place/"
    owner = APIClient()
    owner.force_login(world.owner)
    assert owner.post(url, {"placement": "group:burst"}, format="json").status_code == 403
    admin = APIClient()
    admin.force_login(world.admin)
    bad = admin.post(url, {"placement": "group:nope"}, format="json")
    assert bad.status_code == 400, bad.json()
    assert "no active worker is in group 'nope'" in str(bad.json())
    assert not AuditEvent.objects.filter(verb="quota_grant.placed").exists()
    done = admin.post(url, {"placement": "group:burst", "comment": "room"}, format="json")
    assert done.status_code == 200 and done.json()["placement"] == "group:burst"
    grants = admin.get(f"/api/v1/grants/?tenant={world.tenant.slug}").json()["results"]
    assert [g["placement"] for g in grants] == ["group:burst"]
