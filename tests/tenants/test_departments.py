"""Departments over teams (issue 34 item 1): a department admin approves its teams' asks within
the department's quota and is refused above it and outside the department; a platform admin
approves above it; the department's envelope and policy replace the platform's; every change
is audited."""

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from core.errors import Forbidden, InvalidInput
from tenants import department_rules
from tenants.models import AuditEvent, AutoApprovalRule, CapacityRequest, Department, QuotaGrant
from tenants.notifications import deliver_due
from tenants.services import approvals as approval_services
from tenants.services import departments as department_services
from tenants.services import renewals as renewal_services
from tenants.services import requests as request_services
from tenants.services.grants import grant_quota
from tests.tenants.factories import MembershipFactory, TenantFactory, UserFactory

# world.rc is an A100-80GB 3g.40gb: one unit is 3 of the model's 7 compute slices.


def ask(world, tenant, amount, actor=None):
    return request_services.submit_capacity_request(
        actor=actor or world.member,
        tenant=tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=7),
        justification="training run",
    )


@pytest.fixture
def research(world):
    """team-a and team-b in research (9 slices of A100-80GB: three 3g units), with an admin;
    team-c in product, with its own admin."""
    dept = department_services.create_department(actor=world.admin, slug="research", name="R")
    department_services.set_department_quota(
        actor=world.admin, department=dept, gpu_model="A100-80GB", slices=9
    )
    head = UserFactory(username="head-of-research")
    department_services.set_department_admins(
        actor=world.admin, department=dept, usernames=[head.username]
    )
    for team in (world.tenant, world.other_tenant):
        department_services.assign_team(actor=world.admin, tenant=team, department=dept)
    MembershipFactory(tenant=world.other_tenant, user=world.member)
    product = department_services.create_department(actor=world.admin, slug="product", name="P")
    department_services.set_department_quota(
        actor=world.admin, department=product, gpu_model="A100-80GB", slices=9
    )
    team_c = TenantFactory(slug="team-c")
    department_services.assign_team(actor=world.admin, tenant=team_c, department=product)
    MembershipFactory(tenant=team_c, user=world.member)
    product_head = UserFactory(username="head-of-product")
    department_services.set_department_admins(
        actor=world.admin, department=product, usernames=[product_head.username]
    )
    dept.head, dept.team_c, dept.product_head = head, team_c, product_head
    return dept


@pytest.mark.django_db
def test_a_department_admin_approves_inside_the_quota_and_is_refused_above(world, research):
    inside = ask(world, world.tenant, 2)  # 6 of 9 slices
    approval_services.approve_capacity_request(actor=research.head, request=inside)
    inside.refresh_from_db()
    assert inside.state == CapacityRequest.State.APPROVED
    assert inside.decided_by == research.head

    above = ask(world, world.other_tenant, 2)  # 6 more: 12 of 9
    with pytest.raises(Forbidden, match=r"above the department's quota of 9 slices.*platform"):
        approval_services.approve_capacity_request(actor=research.head, request=above)
    above.refresh_from_db()
    assert above.state == CapacityRequest.State.SUBMITTED
    assert not QuotaGrant.objects.filter(request=above).exists()

    approval_services.approve_capacity_request(actor=world.admin, request=above)
    above.refresh_from_db()
    assert above.state == CapacityRequest.State.APPROVED  # a platform admin goes above it


@pytest.mark.django_db
def test_a_department_admin_cannot_decide_another_departments_or_a_lone_teams_asks(world, research):
    theirs = ask(world, research.team_c, 1)
    with pytest.raises(Forbidden, match="only platform admins or the admins of product"):
        approval_services.approve_capacity_request(actor=research.head, request=theirs)
    with pytest.raises(Forbidden, match="admins of product"):
        request_services.reject_capacity_request(actor=research.head, request=theirs, comment="x")
    lone = TenantFactory(slug="lone")
    MembershipFactory(tenant=lone, user=world.member)
    alone = ask(world, lone, 1)
    with pytest.raises(Forbidden, match="only platform admins may approve"):
        approval_services.approve_capacity_request(actor=research.head, request=alone)
    # and an owner of a team in the department is not one of its admins
    with pytest.raises(Forbidden):
        approval_services.approve_capacity_request(
            actor=world.owner, request=ask(world, world.tenant, 1)
        )


@pytest.mark.django_db
def test_a_department_admin_rejects_its_teams_asks(world, research):
    request = ask(world, world.tenant, 1)
    request_services.reject_capacity_request(
        actor=research.head, request=request, comment="use the shared pool"
    )
    request.refresh_from_db()
    assert request.state == CapacityRequest.State.REJECTED


@pytest.mark.django_db
def test_the_departments_envelope_replaces_the_platforms_and_never_passes_its_quota(
    world, research
):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=1, max_duration_hours=24)
    department_services.set_department_envelope(
        actor=world.admin,
        department=research,
        resource_class=world.rc.slug,
        max_amount=3,
        hours=24 * 30,
    )
    first = ask(world, world.tenant, 2)  # above the platform's 1, inside research's 3
    assert first.state == CapacityRequest.State.APPROVED and first.auto_approved

    second = ask(world, world.other_tenant, 1)  # 9 of 9: still inside
    assert second.state == CapacityRequest.State.APPROVED

    third = ask(world, world.other_tenant, 1)  # 12 of 9: the department's admins decide
    assert third.state == CapacityRequest.State.SUBMITTED
    assert any("above the department's quota" in r for r in third.policy_reasons)


@pytest.mark.django_db
def test_a_grant_the_platform_team_gave_directly_counts_against_the_departments_quota(
    world, research
):
    """A grant made without an ask (`grant_quota`) holds slices as any other."""
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    assert department_services.held_slices(research.pk, timezone.now()) == {"A100-80GB": 6}
    request = ask(world, world.other_tenant, 2)  # 6 + 6 of 9
    with pytest.raises(Forbidden, match="hold 6 slices and this asks for 6 more"):
        approval_services.approve_capacity_request(actor=research.head, request=request)


@pytest.mark.django_db
def test_a_department_without_auto_approval_decides_every_ask(world, research):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=5, max_duration_hours=999)
    department_services.update_department(
        actor=world.admin, department=research, auto_approve=False
    )
    request = ask(world, world.tenant, 1)
    assert request.state == CapacityRequest.State.SUBMITTED
    assert request.policy_reasons == ["research's admins decide every ask of its teams"]


@pytest.mark.django_db
def test_an_ask_that_waits_is_mailed_to_the_departments_admins_too(
    world, research, django_capture_on_commit_callbacks
):
    research.head.email = "head@example.com"
    research.head.save()
    world.admin.email = "platform@example.com"
    world.admin.save()
    with django_capture_on_commit_callbacks(execute=True):
        ask(world, world.tenant, 1)  # no envelope: a person decides
        ask(world, research.team_c, 1)
    deliver_due()
    to = {m.subject.split(": ")[0]: sorted(m.to) for m in mail.outbox}
    assert to == {
        "[GPU Portal] team-a asks for capacity": ["head@example.com", "platform@example.com"],
        # product's admin, not research's
        "[GPU Portal] team-c asks for capacity": [
            research.product_head.email,
            "platform@example.com",
        ],
    }
    assert research.product_head.email != "head@example.com"


@pytest.mark.django_db
def test_quota_and_team_changes_are_checked_and_audited(world, research):
    approval_services.approve_capacity_request(
        actor=research.head, request=ask(world, world.tenant, 2)
    )
    with pytest.raises(InvalidInput, match="teams hold 6 slices of A100-80GB"):
        department_services.set_department_quota(
            actor=world.admin, department=research, gpu_model="A100-80GB", slices=3
        )
    with pytest.raises(InvalidInput, match="unknown GPU model 'Z9'"):
        department_services.set_department_quota(
            actor=world.admin, department=research, gpu_model="Z9", slices=3
        )
    product = Department.objects.get(slug="product")
    department_services.set_department_quota(
        actor=world.admin, department=product, gpu_model="A100-80GB", slices=3
    )
    with pytest.raises(InvalidInput, match="team-a's grants do not fit"):
        department_services.assign_team(actor=world.admin, tenant=world.tenant, department=product)
    with pytest.raises(Forbidden, match="only platform admins may set department quotas"):
        department_services.set_department_quota(
            actor=research.head, department=research, gpu_model="A100-80GB", slices=99
        )
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {
        "department.created",
        "department.quota_set",
        "department.admins_set",
        "tenant.department_set",
    } <= verbs
    department_services.delete_department(actor=world.admin, department=research)
    world.tenant.refresh_from_db()
    assert world.tenant.department is None
    assert AuditEvent.objects.filter(verb="department.deleted").exists()


def test_quota_overruns_counts_per_model_in_slices():
    assert department_rules.quota_overruns("r", {"A100": 9}, {"A100": 6}, {"A100": 3}) == []
    assert department_rules.quota_overruns("r", {"A100": 9}, {"A100": 6}, {"A100": 4}) == [
        "A100: r's teams hold 6 slices and this asks for 4 more, above the department's "
        "quota of 9 slices"
    ]
    # a model the department has no quota of has none to give
    assert department_rules.quota_overruns("r", {}, {}, {"H100": 7})
    # a renewal keeps its slices: measured against what the other grants hold
    assert (
        department_rules.quota_overruns("r", {"A100": 9}, {"A100": 3}, {"A100": 6}, renewal=True)
        == []
    )
    assert department_rules.quota_overruns(
        "r", {"A100": 9}, {"A100": 3}, {"A100": 9}, renewal=True
    ) == [
        "A100: r's teams hold 3 slices besides the 9 this renewal keeps held, above the "
        "department's quota of 9 slices"
    ]


def _renew(world, grant, days=7):
    return renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(days=days)
    )


@pytest.mark.django_db
def test_a_renewal_gets_the_departments_envelope_and_policy_as_an_ask_does(world, research):
    """No platform rule for the class: only research's envelope lets its teams' renewals through;
    with auto-approval off, its admins decide them."""
    department_services.set_department_envelope(
        actor=world.admin,
        department=research,
        resource_class=world.rc.slug,
        max_amount=2,
        hours=24 * 30,
    )
    grant = QuotaGrant.objects.get(request=ask(world, world.tenant, 2))
    renewal = _renew(world, grant)
    assert renewal.state == CapacityRequest.State.APPROVED and renewal.auto_approved
    grant.refresh_from_db()
    assert grant.ends_at == renewal.ends_at

    department_services.update_department(
        actor=world.admin, department=research, auto_approve=False
    )
    waiting = _renew(world, grant)
    assert waiting.state == CapacityRequest.State.SUBMITTED
    assert waiting.policy_reasons == ["research's admins decide every ask of its teams"]


@pytest.mark.django_db
def test_a_renewal_that_keeps_the_department_above_its_quota_goes_to_a_person(world, research):
    """A platform admin approved above research's quota; extending that grant is not automatic,
    however generous the envelope."""
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=9, max_duration_hours=9999)
    request = ask(world, world.tenant, 4)  # 12 of 9 slices: the department's admins decide
    assert request.state == CapacityRequest.State.SUBMITTED
    approval_services.approve_capacity_request(actor=world.admin, request=request)
    renewal = _renew(world, QuotaGrant.objects.get(request=request))
    assert renewal.state == CapacityRequest.State.SUBMITTED
    assert renewal.policy_reasons == [
        "A100-80GB: research's teams hold 0 slices besides the 12 this renewal keeps held, "
        "above the department's quota of 9 slices"
    ]
