"""The department pages: the list and a department's page (teams, quota and use, waiting asks),
where its admin approves within the quota and is told why above it; the admin's save goes
through the services."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tenants.models import AuditEvent, CapacityRequest, Department
from tenants.services import departments as department_services
from tenants.services import requests as request_services
from tests.tenants.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def research(world):
    dept = department_services.create_department(actor=world.admin, slug="research", name="R&D")
    department_services.set_department_quota(
        actor=world.admin, department=dept, gpu_model="A100-80GB", slices=6
    )
    department_services.assign_team(actor=world.admin, tenant=world.tenant, department=dept)
    head = UserFactory(username="head")
    department_services.set_department_admins(
        actor=world.admin, department=dept, usernames=["head"]
    )
    return dept, head


def ask(world, amount):
    return request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=2),
        justification="eval",
    )


def test_the_list_and_the_page_show_teams_quota_and_use(client, world, research):
    dept, head = research
    client.force_login(world.member)  # a member of one of its teams reads it
    listed = client.get(reverse("tenants:department_list"))
    assert listed.status_code == 200
    assert b"R&amp;D" in listed.content and b"A100-80GB: 0 / 6" in listed.content
    page = client.get(reverse("tenants:department_detail", args=["research"]))
    assert page.status_code == 200
    assert b"team-a" in page.content and b"Waiting asks" not in page.content

    client.force_login(UserFactory(username="stranger"))
    assert client.get(reverse("tenants:department_detail", args=["research"])).status_code == 404


def test_its_admin_approves_inside_the_quota_and_is_told_why_not_above(client, world, research):
    dept, head = research
    inside, above = ask(world, 2), ask(world, 1)  # 6 of 6, then 9 of 6
    client.force_login(head)
    page = client.get(reverse("tenants:department_detail", args=["research"]))
    assert f"#{inside.pk}".encode() in page.content
    url = reverse("tenants:department_decide", args=["research"])
    client.post(url, {"request": inside.pk, "decision": "approve"})
    inside.refresh_from_db()
    assert inside.state == CapacityRequest.State.APPROVED
    refused = client.post(url, {"request": above.pk, "decision": "approve"}, follow=True)
    above.refresh_from_db()
    assert above.state == CapacityRequest.State.SUBMITTED
    assert b"above the department&#x27;s quota of 6 slices" in refused.content
    assert client.post(url, {"request": "x", "decision": "approve"}).status_code == 404


def test_the_admin_saves_through_the_services(client, world):
    world.admin.is_superuser = True  # the admin site's model permissions
    world.admin.save()
    client.force_login(world.admin)
    MembershipFactory(tenant=world.tenant, user=UserFactory(username="lead"))
    lead = UserFactory(username="lead2")
    response = client.post(
        reverse("admin:tenants_department_add"),
        {
            "slug": "product",
            "name": "Product",
            "cost_centre": "",
            "monthly_budget": "",
            "auto_approve": "on",
            "admins": [lead.pk],
            **{
                f"{prefix}-{k}": v
                for prefix in ("quotas", "envelopes", "teams")
                for k, v in {"TOTAL_FORMS": 0, "INITIAL_FORMS": 0}.items()
            },
        },
    )
    assert response.status_code == 302, response.content[:2000]
    product = Department.objects.get(slug="product")
    assert list(product.admins.values_list("username", flat=True)) == ["lead2"]
    assert AuditEvent.objects.filter(verb="department.created").exists()
    assert AuditEvent.objects.filter(verb="department.admins_set").exists()
