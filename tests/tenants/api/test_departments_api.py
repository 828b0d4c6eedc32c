"""`/api/v1/departments/`: platform admins create and shape departments; a department admin
lists and decides its teams' asks (403 above the department's quota, 404 for another
department); other people see only departments they belong to."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.models import AuditEvent, CapacityRequest
from tenants.services import requests as request_services
from tests.portal.api.conftest import session
from tests.tenants.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


def ask(world, tenant, amount):
    return request_services.submit_capacity_request(
        actor=world.member,
        tenant=tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=3),
        justification="eval",
    )


@pytest.fixture
def research(world):
    head = UserFactory(username="head")
    admin = session(world.admin)
    created = admin.post(
        "/api/v1/departments/",
        {"slug": "research", "name": "Research", "monthly_budget": "5000.00"},
        format="json",
    )
    assert created.status_code == 201, created.data
    quota = admin.post(
        "/api/v1/departments/research/quota/",
        {"gpu_model": "A100-80GB", "slices": 9, "lending_limit": 0},
        format="json",
    )
    assert quota.status_code == 200, quota.data
    for team in ("team-a", "team-b"):
        added = admin.post(
            "/api/v1/departments/research/add-team/", {"tenant": team}, format="json"
        )
        assert added.status_code == 200, added.data
    admins = admin.post("/api/v1/departments/research/admins/", {"admins": ["head"]}, format="json")
    assert admins.status_code == 200, admins.data
    MembershipFactory(tenant=world.other_tenant, user=world.member)
    return head


def test_the_platform_team_shapes_a_department_and_it_is_audited(world, research):
    shown = session(world.admin).get("/api/v1/departments/research/")
    assert shown.status_code == 200
    assert shown.data["teams"] == ["team-a", "team-b"]
    assert shown.data["admins"] == ["head"]
    assert shown.data["quota"] == [
        {
            "gpu_model": "A100-80GB",
            "slices": 9,
            "held": 0,
            "lending_limit": 0,
            "borrowing_limit": None,
        }
    ]
    bad = session(world.admin).post(
        "/api/v1/departments/research/quota/",
        {"gpu_model": "Z9", "slices": 1},
        format="json",
    )
    assert bad.status_code == 400 and "unknown GPU model" in bad.data["detail"]
    assert AuditEvent.objects.filter(verb__startswith="department.").count() >= 3
    # a department admin cannot shape the department
    refused = session(research).post(
        "/api/v1/departments/research/quota/",
        {"gpu_model": "A100-80GB", "slices": 99},
        format="json",
    )
    assert refused.status_code == 403


def test_a_department_admin_approves_inside_and_is_refused_above(world, research):
    head = session(research)
    inside, above = ask(world, world.tenant, 2), ask(world, world.other_tenant, 2)
    waiting = head.get("/api/v1/departments/research/requests/")
    assert [r["id"] for r in waiting.data] == [inside.pk, above.pk]

    ok = head.post("/api/v1/departments/research/approve/", {"request": inside.pk}, format="json")
    assert ok.status_code == 200, ok.data
    assert ok.data["state"] == CapacityRequest.State.APPROVED

    no = head.post("/api/v1/departments/research/approve/", {"request": above.pk}, format="json")
    assert no.status_code == 403
    assert "above the department's quota of 9 slices" in no.data["detail"]


def test_another_department_and_outsiders_see_nothing(world, research):
    lone = TenantFactory(slug="lone")
    MembershipFactory(tenant=lone, user=world.member)
    alone = ask(world, lone, 1)
    head = session(research)
    missing = head.post(
        "/api/v1/departments/research/approve/", {"request": alone.pk}, format="json"
    )
    assert missing.status_code == 404
    outsider = session(UserFactory(username="nobody"))
    assert outsider.get("/api/v1/departments/").data["results"] == []
    assert outsider.get("/api/v1/departments/research/").status_code == 404
    # a member of one of its teams reads it
    member_view = session(world.member).get("/api/v1/departments/")
    assert [d["slug"] for d in member_view.data["results"]] == ["research"]
    # ...but not its teams' waiting asks: those are for its admins and the platform team
    peek = session(world.viewer).get("/api/v1/departments/research/requests/")
    assert peek.status_code == 403 and "admins and the platform team" in peek.data["detail"]
