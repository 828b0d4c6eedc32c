"""A tenant's CI robot is the user `robot-<slug>`: when that username is taken, creating the
tenant is a clear refusal on every face, never an IntegrityError (issue 13)."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from core.errors import InvalidInput
from tenants.models import AuditEvent, Tenant
from tenants.services import tenants as tenant_services
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_service_refuses_a_slug_whose_robot_username_is_taken(world):
    person = UserFactory(username="robot-vision")
    with pytest.raises(InvalidInput) as refused:
        tenant_services.create_tenant(actor=world.admin, slug="vision", name="Vision")
    assert refused.value.field == "slug"
    assert "robot-vision" in refused.value.detail and "another slug" in refused.value.detail
    assert not Tenant.objects.filter(slug="vision").exists()
    assert not AuditEvent.objects.filter(verb="tenant.created").exists()
    person.refresh_from_db()
    assert person.is_active  # the person keeps their account, untouched
    # another slug works
    assert tenant_services.create_tenant(actor=world.admin, slug="vision-2", name="V").robot


def test_the_admin_shows_the_refusal_on_the_page(client, world):
    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    UserFactory(username="robot-vision")
    response = client.post(
        reverse("admin:tenants_tenant_add"),
        {
            "slug": "vision",
            "name": "Vision",
            "cost_centre": "",
            "allowed_priority_classes": "[]",
            "critical_gpu_quota": 0,
            "fair_share_weight": "1",
            "memberships-TOTAL_FORMS": 0,
            "memberships-INITIAL_FORMS": 0,
        },
        follow=True,
    )
    assert response.status_code == 200
    assert "robot-vision" in response.content.decode()
    assert not Tenant.objects.filter(slug="vision").exists()
    assert get_user_model().objects.filter(username="robot-vision").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_creates_of_one_slug_racing_give_one_tenant_and_one_clear_refusal(world):
    from tests.race import race

    def create():
        return tenant_services.create_tenant(actor=world.admin, slug="racer", name="Racer")

    results = race([create, create, create])
    created = [r for r in results if isinstance(r, Tenant)]
    refused = [r for r in results if isinstance(r, InvalidInput)]
    assert len(created) == 1 and len(refused) == 2, results
    assert all(r.field == "slug" and "racer" in r.detail for r in refused)
    assert get_user_model().objects.filter(username="robot-racer").count() == 1
