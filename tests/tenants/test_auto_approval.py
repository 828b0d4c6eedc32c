"""The auto-approval envelope holds over what a team already holds through auto-approval, and
every tenant has a ceiling, its own or the platform's default (issue 13)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from core.errors import QuotaExceeded
from tenants.models import AutoApprovalRule, CapacityRequest, QuotaGrant
from tenants.services import approvals as approval_services
from tenants.services import grants as grant_services
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tests.race import race
from tests.tenants.factories import (
    MembershipFactory,
    PoolFactory,
    QuotaGrantFactory,
    ResourceClassFactory,
    TenantFactory,
)


def ask(world, amount=1, actor=None, tenant=None, hours=12):
    return request_services.submit_capacity_request(
        actor=actor or world.member,
        tenant=tenant or world.tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(hours=hours),
        justification="notebook",
    )


@pytest.fixture
def envelope_of_one(world):
    return AutoApprovalRule.objects.create(
        resource_class=world.rc, max_amount=1, max_duration_hours=24
    )


@pytest.mark.django_db
def test_two_asks_of_one_where_the_envelope_is_one_only_the_first_is_auto_approved(
    world, envelope_of_one
):
    first, second = ask(world), ask(world)

    assert first.state == CapacityRequest.State.APPROVED and first.auto_approved
    assert second.state == CapacityRequest.State.SUBMITTED and not second.auto_approved
    assert second.policy_reasons == [
        f"{world.rc.slug}: the team holds 1 approved automatically already; 1 more makes 2, "
        "more than the 1 approved automatically"
    ]
    assert QuotaGrant.objects.filter(tenant=world.tenant).count() == 1


@pytest.mark.django_db
def test_the_envelope_frees_up_when_an_auto_approved_grant_ends(world, envelope_of_one):
    first = ask(world)
    request_services.cancel_capacity_request(actor=world.member, request=first)

    assert ask(world).state == CapacityRequest.State.APPROVED


@pytest.mark.django_db
def test_grants_a_platform_admin_gave_do_not_use_up_the_envelope(world, envelope_of_one):
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=3
    )
    approved_by_hand = request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: 2},
        ends_at=timezone.now() + timedelta(hours=12),
        justification="bigger run",
    )
    approval_services.approve_capacity_request(actor=world.admin, request=approved_by_hand)

    assert ask(world).state == CapacityRequest.State.APPROVED


@pytest.mark.django_db
def test_each_team_has_its_own_envelope(world, envelope_of_one):
    MembershipFactory(tenant=world.other_tenant, user=world.member)
    assert ask(world).state == CapacityRequest.State.APPROVED
    assert ask(world, tenant=world.other_tenant).state == CapacityRequest.State.APPROVED


@pytest.mark.django_db
def test_the_preview_counts_what_the_team_holds_already(world, envelope_of_one):
    ask(world)
    decision, _ = request_services.preview_capacity_request(
        tenant=world.tenant,
        items={world.rc.slug: 1},
        ends_at=timezone.now() + timedelta(hours=12),
    )
    assert not decision.auto_approve
    assert "holds 1 approved automatically already" in decision.reasons[0]


@pytest.mark.django_db(transaction=True)
def test_concurrent_asks_inside_the_envelope_are_auto_approved_once():
    rc = ResourceClassFactory(slug="a100-80gb-mig-1g.10gb", gpu_fraction=Decimal("0.1429"))
    PoolFactory(resource_class=rc, capacity=100)
    AutoApprovalRule.objects.create(resource_class=rc, max_amount=1, max_duration_hours=24)
    for _ in range(5):
        membership = MembershipFactory(tenant=TenantFactory())
        ends = timezone.now() + timedelta(hours=12)

        results = race(
            [
                lambda m=membership, ends=ends: request_services.submit_capacity_request(
                    actor=m.user,
                    tenant=m.tenant,
                    items={rc.slug: 1},
                    ends_at=ends,
                    justification="race",
                )
                for _ in range(4)
            ]
        )

        assert all(isinstance(r, CapacityRequest) for r in results), results
        assert sorted(r.state for r in results) == ["approved"] + ["submitted"] * 3
        held = QuotaGrant.objects.holding().filter(tenant=membership.tenant)
        assert sum(held.values_list("amount", flat=True)) == 1


# --- the tenant-wide ceiling ----------------------------------------------------------------


@pytest.mark.django_db
@override_settings(TENANT_DEFAULT_GPU_CEILING=Decimal("2"))
def test_a_tenant_without_its_own_ceiling_has_the_platform_default(world):
    assert world.tenant.gpu_ceiling is None
    assert world.tenant.effective_gpu_ceiling == Decimal("2")
    grant_services.grant_quota(  # 4 × 0.4286 = 1.71 GPU-equivalents
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=4
    )

    with pytest.raises(QuotaExceeded) as err:
        ask(world, amount=1)
    assert err.value.detail == (
        "team-a may hold at most 2 GPU-equivalents (the platform's default ceiling); it holds "
        "1.7144 and this asks for 0.4286 more (room left: 0.2856); ask for less, or ask the "
        "platform team to set a ceiling for team-a"
    )
    with pytest.raises(QuotaExceeded):
        grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=1
        )


@pytest.mark.django_db
@override_settings(TENANT_DEFAULT_GPU_CEILING=Decimal("2"))
def test_a_tenant_ceiling_of_its_own_replaces_the_default(world):
    tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, gpu_ceiling=Decimal("4"))
    world.tenant.refresh_from_db()
    assert world.tenant.effective_gpu_ceiling == Decimal("4")

    ask(world, amount=9)  # 3.86 GPU-equivalents: above the default, within its own


@pytest.mark.django_db
def test_the_default_ceiling_applies_out_of_the_box(world, settings):
    assert settings.TENANT_DEFAULT_GPU_CEILING == Decimal("8")
    world.pool.capacity = 100
    world.pool.save()
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=18)  # 7.71

    with pytest.raises(QuotaExceeded, match="at most 8 GPU-equivalents"):
        ask(world, amount=1)


@pytest.mark.django_db
@override_settings(TENANT_DEFAULT_GPU_CEILING=Decimal("8"))
def test_the_console_shows_each_tenants_ceiling_and_which_is_the_default(client, world):
    tenant_services.update_tenant(
        actor=world.admin, tenant=world.tenant, gpu_ceiling=Decimal("12.5")
    )
    client.force_login(world.admin)

    body = client.get(reverse("console:tenants")).content.decode()

    assert '<td class="num">12.50</td>' in body  # team-a: its own
    assert '<td class="num">8 <small>default</small></td>' in body  # team-b: the default
