"""The platform console's actions call the same services as the other faces."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduler.workloads.submit.spec import workload_spec
from tenants.models import AuditEvent, CapacityRequest, NotificationDelivery, QuotaGrant
from tenants.services import approvals as approval_services
from tenants.services import channels as channel_services
from tenants.services import requests as request_services
from tests.portal.api.conftest import session

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, world):
    world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    return client


def submit(world, amount):
    return request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=2),
        justification="x",
    )


def test_approval_queue_lists_and_approves_several_at_once(admin_client, world):
    r1, r2 = submit(world, 2), submit(world, 3)
    url = reverse("admin:tenants_capacityrequest_changelist")
    page = admin_client.get(url + "?state__exact=submitted")
    assert page.status_code == 200
    assert f"2 × {world.rc.slug}" in page.content.decode()
    response = admin_client.post(
        url, {"action": "approve", "_selected_action": [r1.pk, r2.pk]}, follow=True
    )
    assert "Approved 2." in response.content.decode()
    assert set(CapacityRequest.objects.values_list("state", flat=True)) == {"approved"}
    assert (
        AuditEvent.objects.filter(verb="capacity_request.approved", actor=world.admin).count() == 2
    )


def test_admin_action_reports_refusals_without_a_500(admin_client, world):
    big = submit(world, 8)
    other = submit(world, 8)
    approval_services.approve_capacity_request(actor=world.admin, request=big)
    url = reverse("admin:tenants_capacityrequest_changelist")
    response = admin_client.post(
        url, {"action": "approve", "_selected_action": [big.pk, other.pk]}, follow=True
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert f"#{big.pk}: cannot approve request #{big.pk}: it is approved" in body
    assert f"#{other.pk}: a100-80gb-mig-3g.40gb: asked for 8 but only 2 of 10" in body
    other.refresh_from_db()
    assert other.state == "submitted"


def test_reject_and_revoke_actions(admin_client, world):
    request = submit(world, 1)
    admin_client.post(
        reverse("admin:tenants_capacityrequest_changelist"),
        {"action": "reject", "_selected_action": [request.pk]},
    )
    request.refresh_from_db()
    assert request.state == "rejected"
    granted = submit(world, 1)
    approval_services.approve_capacity_request(actor=world.admin, request=granted)
    grant = granted.grants.get()
    admin_client.post(
        reverse("admin:tenants_quotagrant_changelist"),
        {"action": "revoke", "_selected_action": [grant.pk]},
    )
    grant.refresh_from_db()
    assert grant.state == QuotaGrant.State.REVOKED


def test_audit_log_is_read_only_and_filterable(admin_client, world):
    submit(world, 1)
    event = AuditEvent.objects.get()
    url = reverse("admin:tenants_auditevent_changelist")
    shown = admin_client.get(url + "?verb=capacity_request.submitted")
    assert shown.status_code == 200 and shown.context["cl"].result_count == 1
    other = admin_client.get(url + "?verb=capacity_request.approved")
    assert other.status_code == 200 and other.context["cl"].result_count == 0  # filtered out
    change = admin_client.get(reverse("admin:tenants_auditevent_change", args=[event.pk]))
    assert change.status_code == 200 and b'name="_save"' not in change.content
    assert (
        admin_client.post(
            reverse("admin:tenants_auditevent_delete", args=[event.pk]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_pool_edit_goes_through_the_service(admin_client, world):
    url = reverse("admin:scheduler_pool_change", args=[world.pool.pk])
    response = admin_client.post(
        url,
        {
            "resource_class": world.rc.pk,
            "capacity": 14,
            "overcommit_ratio": "1.50",
            "borrowing_limit": 3,
            "reclaim_grace_s": 300,
            # lend_idle left out: an unchecked box, so this pool's idle units are not lent
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    world.pool.refresh_from_db()
    assert (world.pool.capacity, str(world.pool.overcommit_ratio)) == (14, "1.50")
    assert (world.pool.borrowing_limit, world.pool.lend_idle) == (3, False)
    assert world.pool.reclaim_grace_s == 300
    event = AuditEvent.objects.get()
    assert event.verb == "pool.changed"
    assert (event.before["borrowing_limit"], event.after["borrowing_limit"]) == (0, 3)


def test_tenant_created_in_the_admin_gets_a_robot_and_an_event(admin_client, world):
    response = admin_client.post(
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
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert AuditEvent.objects.get(verb="tenant.created").tenant.robot.username == "robot-vision"


def test_token_issued_in_the_admin_shows_its_secret_once(admin_client, world):
    from tenants.models import ApiToken

    response = admin_client.post(
        reverse("admin:tenants_apitoken_add"),
        {"user": world.member.pk, "name": "ci", "scopes": ["read", "submit"], "expires_in_days": 7},
        follow=True,
    )
    body = response.content.decode()
    token = ApiToken.objects.get()
    assert token.user == world.member and token.scopes == ["read", "submit"]
    assert "gpp_" in body and "shown only once" in body
    assert AuditEvent.objects.filter(verb="api_token.issued").count() == 1
    admin_client.post(
        reverse("admin:tenants_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_workloads_in_the_admin_can_be_cancelled(admin_client, world):
    from scheduler.workloads.models import Workload
    from scheduler.workloads.services import submit_workload
    from tests.tenants.factories import QuotaGrantFactory

    world.rc.gpu_model = "A100-80GB"
    world.rc.save()
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=1)
    w = submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="train",
            kind="job",
            image="pytorch/pytorch:2.4",
            resources={world.rc.slug: 1},
            priority="gpu-low",
        ),
    )
    url = reverse("admin:scheduler_workload_changelist")
    assert "train" in admin_client.get(url).content.decode()
    admin_client.post(url, {"action": "cancel", "_selected_action": [w.pk]})
    assert Workload.objects.get(pk=w.pk).state == "cancelled"


def test_memberships_are_shown_but_never_edited_in_the_tenant_admin(admin_client, world):
    """Members change on the team's page or the API (last-owner check, audit, reconcile): the
    tenant admin's inline refuses every write, even from a superuser, and the tenant still saves."""
    from django.contrib import admin as django_admin
    from django.test import RequestFactory

    from tenants.admin import MembershipInline
    from tenants.models import Membership, Tenant
    from tests.admin_forms import change_form_data

    request = RequestFactory().get("/")
    request.user = world.admin
    inline = MembershipInline(Tenant, django_admin.site)
    assert not inline.has_add_permission(request, world.tenant)
    assert not inline.has_change_permission(request, world.tenant)
    assert not inline.has_delete_permission(request, world.tenant)

    url = reverse("admin:tenants_tenant_change", args=[world.tenant.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert reverse("team_detail", kwargs={"slug": world.tenant.slug}) in page.content.decode()
    before = set(Membership.objects.values_list("tenant_id", "user_id", "role"))
    data = change_form_data(page)
    data["name"] = "Team A renamed"
    owner = Membership.objects.get(tenant=world.tenant, user=world.owner)
    member = Membership.objects.get(tenant=world.tenant, user=world.member)
    rows = {
        m.pk: i for i, m in enumerate(page.context["inline_admin_formsets"][0].formset.queryset)
    }
    data |= {
        # demote the only owner, delete a member, and add an outsider as owner
        f"memberships-{rows[owner.pk]}-role": Membership.Role.VIEWER,
        f"memberships-{rows[member.pk]}-DELETE": "on",
        f"memberships-{len(rows)}-user": world.outsider.pk,
        f"memberships-{len(rows)}-role": Membership.Role.OWNER,
        "memberships-TOTAL_FORMS": len(rows) + 1,
    }
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    world.tenant.refresh_from_db()
    assert world.tenant.name == "Team A renamed"  # the tenant's own fields still save
    assert set(Membership.objects.values_list("tenant_id", "user_id", "role")) == before
    assert not AuditEvent.objects.filter(verb__startswith="member").exists()


def test_a_service_refusal_in_the_admin_is_a_message_not_a_500(client, world):
    """Staff with the model's permissions but not a platform admin: the service says no, the
    admin shows it on the page, and nothing is written."""
    from django.contrib.auth.models import Permission

    from tenants.models import AutoApprovalRule
    from tests.tenants.factories import UserFactory

    staff = UserFactory(username="staff-rules", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="tenants", content_type__model="autoapprovalrule"
        )
    )
    client.force_login(staff)
    events_before = AuditEvent.objects.count()
    response = client.post(
        "/admin/tenants/autoapprovalrule/add/",
        {"resource_class": world.rc.pk, "max_amount": 2, "max_duration_hours": 24},
    )
    assert response.status_code == 302
    assert not AutoApprovalRule.objects.exists()
    page = client.get(response["Location"])
    assert "Refused:" in page.content.decode()
    assert AuditEvent.objects.count() == events_before


def test_notification_channels_and_deliveries_are_shown_read_only_without_credentials(
    admin_client, world
):
    slack, _ = channel_services.create_channel(
        actor=world.admin, tenant=world.tenant, kind="slack", name="ml-chat",
        target="https://hooks.slack.com/services/T0/B0/secret-path",
    )  # fmt: skip
    hook, secret = channel_services.create_channel(
        actor=world.admin, tenant=None, kind="webhook", name="ops", target="https://ops.example/in"
    )
    delivery = NotificationDelivery.objects.create(
        channel=slack, tenant=world.tenant, event="grant.expired", subject="s", text="t"
    )
    listing = admin_client.get(reverse("admin:tenants_notificationchannel_changelist"))
    assert listing.status_code == 200
    assert b"https://hooks.slack.com/" in listing.content
    assert b"secret-path" not in listing.content  # the URL is the credential to post
    page = admin_client.get(reverse("admin:tenants_notificationchannel_change", args=[hook.pk]))
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert secret.encode() not in page.content
    assert hook.secret_encrypted.encode() not in page.content
    log = admin_client.get(
        reverse("admin:tenants_notificationdelivery_changelist") + "?state=pending"
    )
    assert log.status_code == 200 and b"grant.expired" in log.content
    removed = admin_client.post(
        reverse("admin:tenants_notificationdelivery_delete", args=[delivery.pk]), {"post": "yes"}
    )
    assert removed.status_code == 403
    assert NotificationDelivery.objects.filter(pk=delivery.pk).exists()


def test_a_pools_longest_grant_is_set_in_the_admin_and_the_api(admin_client, world):
    url = reverse("admin:scheduler_pool_change", args=[world.pool.pk])
    data = {
        "resource_class": world.rc.pk,
        "capacity": 10,
        "overcommit_ratio": "1",
        "reclaim_grace_s": 600,
    }
    assert admin_client.post(url, {**data, "max_grant_days": 30}).status_code == 302
    world.pool.refresh_from_db()
    assert world.pool.max_grant_days == 30
    api = session(world.admin)
    answer = api.patch(f"/api/v1/pools/{world.rc.slug}/", {"max_grant_days": 90}, format="json")
    assert answer.status_code == 200 and answer.data["max_grant_days"] == 90
    too_long = api.patch(f"/api/v1/pools/{world.rc.slug}/", {"max_grant_days": 9999}, format="json")
    assert too_long.status_code == 400
