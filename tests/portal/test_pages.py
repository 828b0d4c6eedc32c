"""Every page for every role: who sees what, another tenant's pages are 404, forms keep what was
typed and show errors by the field, and query counts do not grow with the data."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tenants.models import AutoApprovalRule, CapacityRequest, Membership
from tenants.services import approvals as approval_services
from tenants.services import requests as request_services
from tests.scheduler.factories import NodeFactory, PodAllocationFactory
from tests.tenants.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


def login(client, user):
    client.force_login(user)
    return client


def ask(world, amount=2, actor=None):
    return request_services.submit_capacity_request(
        actor=actor or world.member,
        tenant=world.tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=3),
        justification="train",
    )


# --- team pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["owner", "member", "viewer", "admin"])
def test_team_page_for_each_role(client, world, who):
    user = getattr(world, who)
    body = login(client, user).get(reverse("team_detail", args=["team-a"])).content.decode()
    assert "Quota and use" in body
    assert ("Add member" in body) == (who in ("owner", "admin"))
    assert ("Ask for capacity" in body) == (who in ("owner", "member", "admin"))


def test_another_teams_pages_are_404(client, world):
    request = ask(world)
    login(client, world.outsider)
    for url in (
        reverse("team_detail", args=["team-a"]),
        reverse("tenants:request_create", args=["team-a"]),
        reverse("tenants:request_detail", args=[request.pk]),
    ):
        assert client.get(url).status_code == 404, url
    assert client.post(reverse("tenants:request_cancel", args=[request.pk])).status_code == 404
    assert (
        client.post(
            reverse("tenants:member_add", args=["team-a"]),
            {"username": "outsider", "role": "owner"},
        ).status_code
        == 404
    )
    assert not Membership.objects.filter(tenant=world.tenant, user=world.outsider).exists()


def test_anonymous_is_sent_to_sign_in(client, world):
    response = client.get(reverse("team_detail", args=["team-a"]))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_home_and_team_page_make_a_fixed_number_of_queries(
    client, world, django_assert_max_num_queries
):
    login(client, world.admin)
    for i in range(3):
        MembershipFactory(tenant=world.tenant, user=UserFactory(username=f"extra{i}"))
        ask(world, amount=1)
    with django_assert_max_num_queries(14):
        client.get(reverse("home"))
    # 21: the last one reads the team's pods that sick GPUs hit (GPU health)
    with django_assert_max_num_queries(21):
        client.get(reverse("team_detail", args=["team-a"]))
    for i in range(10):
        tenant = TenantFactory()
        MembershipFactory(tenant=tenant, user=world.admin, role="owner")
        MembershipFactory(tenant=world.tenant, user=UserFactory(username=f"more{i}"))
        ask(world, amount=1)
    with django_assert_max_num_queries(14):
        client.get(reverse("home"))
    with django_assert_max_num_queries(21):
        client.get(reverse("team_detail", args=["team-a"]))


# --- asking for capacity -----------------------------------------------------------------------


def test_ask_form_creates_a_request_and_says_what_happened(client, world):
    login(client, world.member)
    response = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        {
            "resource_class": world.rc.pk,
            "amount": 3,
            "ends_at": "",
            "justification": "train",
        },
        follow=True,
    )
    request = CapacityRequest.objects.get()
    assert response.redirect_chain[-1][0] == reverse("tenants:request_detail", args=[request.pk])
    assert "Sent to the platform team" in response.content.decode()


def test_ask_form_auto_approval_message(client, world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=2, max_duration_hours=100)
    login(client, world.member)
    ends = (timezone.localtime() + timedelta(hours=10)).strftime("%Y-%m-%dT%H:%M")
    response = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        {"resource_class": world.rc.pk, "amount": 2, "ends_at": ends, "justification": "x"},
        follow=True,
    )
    assert "Approved at once" in response.content.decode()


def test_ask_form_errors_sit_by_their_field_and_keep_what_was_typed(client, world):
    login(client, world.member)
    response = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        {"resource_class": world.rc.pk, "amount": 40, "ends_at": "", "justification": "big run"},
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "asked for 40 but only 10 of 10 can still be granted" in body
    assert 'value="40"' in body and "big run" in body
    assert CapacityRequest.objects.count() == 0
    missing = client.post(reverse("tenants:request_create", args=["team-a"]), {"amount": "x"})
    assert missing.content.decode().count('class="error"') >= 3


def test_viewer_cannot_ask(client, world):
    login(client, world.viewer)
    response = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        {"resource_class": world.rc.pk, "amount": 1, "ends_at": "", "justification": "x"},
    )
    assert "you need the role member or owner" in response.content.decode()
    assert CapacityRequest.objects.count() == 0


def test_live_hint_says_free_units_and_policy(client, world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=2, max_duration_hours=100)
    login(client, world.member)
    url = reverse("tenants:request_preview", args=["team-a"])
    body = client.get(
        url,
        {
            "resource_class": world.rc.pk,
            "amount": 2,
            "ends_at": (timezone.localtime() + timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M"),
        },
    ).content.decode()
    assert "10 " in body and "Approved at once" in body
    body = client.get(url, {"resource_class": world.rc.pk, "amount": 5}).content.decode()
    assert "Goes to the platform team" in body and "more than the 2 approved" in body


def test_request_page_timeline_and_cancel(client, world):
    request = ask(world)
    approval_services.approve_capacity_request(
        actor=world.admin, request=request, comment="go ahead"
    )
    login(client, world.member)
    body = client.get(reverse("tenants:request_detail", args=[request.pk])).content.decode()
    assert "Submitted" in body and "Approved" in body and "go ahead" in body
    response = client.post(reverse("tenants:request_cancel", args=[request.pk]), follow=True)
    assert "cancelled" in response.content.decode()
    request.refresh_from_db()
    assert request.state == "cancelled"


# --- members -----------------------------------------------------------------------------------


def test_owner_manages_members_member_cannot(client, world):
    UserFactory(username="newbie")
    login(client, world.member)
    client.post(
        reverse("tenants:member_add", args=["team-a"]), {"username": "newbie", "role": "viewer"}
    )
    assert not Membership.objects.filter(user__username="newbie").exists()
    login(client, world.owner)
    response = client.post(
        reverse("tenants:member_add", args=["team-a"]),
        {"username": "newbie", "role": "viewer"},
        follow=True,
    )
    assert "newbie added" in response.content.decode()
    m = Membership.objects.get(user__username="newbie")
    client.post(reverse("tenants:member_role", args=["team-a", m.pk]), {"role": "member"})
    m.refresh_from_db()
    assert m.role == "member"
    client.post(reverse("tenants:member_remove", args=["team-a", m.pk]))
    assert not Membership.objects.filter(pk=m.pk).exists()


def test_unknown_user_gets_a_clear_message(client, world):
    login(client, world.owner)
    response = client.post(
        reverse("tenants:member_add", args=["team-a"]),
        {"username": "nobody", "role": "viewer"},
        follow=True,
    )
    assert "no user &#x27;nobody&#x27;" in response.content.decode()


# --- platform console --------------------------------------------------------------------------

CONSOLE = [
    "console:queue",
    "console:capacity",
    "console:tenants",
    "console:queues",
    "console:health",
    "console:audit",
]


@pytest.mark.parametrize("name", CONSOLE)
def test_console_is_for_platform_admins_only(client, world, name):
    assert login(client, world.owner).get(reverse(name)).status_code == 403
    assert login(client, world.admin).get(reverse(name)).status_code == 200


QUEUE = {
    "queue": "tenant-team-a",
    "lines": [
        {
            "flavor": "h100-80gb",
            "resource": "nvidia.com/mig-3g.40gb",
            "nominal": 4,
            "used": 6,
            "borrowed": 2,
            "lent": 0,
        }
    ],
    "pending": 3,
    "admitted": 2,
    "active": True,
    "reason": "Can admit new workloads",
}


def test_the_team_page_and_the_console_show_own_borrowed_and_lent_and_the_queue(client, world):
    from scheduler.cluster.models import TenantSyncState
    from scheduler.workloads.models import Workload
    from tests.scheduler.factories import WorkloadFactory

    TenantSyncState.objects.create(tenant=world.tenant, queue_status=QUEUE)
    WorkloadFactory(
        tenant=world.tenant,
        name="waits",
        state=Workload.State.QUEUED,
        queue_position=2,
        message="insufficient unused quota",
    )
    body = login(client, world.member).get(reverse("team_detail", args=["team-a"])).content.decode()
    assert "3 waiting, 2 admitted" in body
    assert "<td>h100-80gb</td><td>nvidia.com/mig-3g.40gb</td>" in body
    assert '<td class="num">4</td><td class="num">6</td><td class="num">2</td>' in body
    assert "waits</a> · gpu-low · position 2 — insufficient unused quota" in body
    console = login(client, world.admin).get(reverse("console:queues")).content.decode()
    assert "3 waiting · 2 admitted" in console and "Not read from the cluster yet" in console


def test_a_queue_line_of_slices_is_said_in_words_on_the_team_page_and_the_console(client, world):
    from catalog.slices import SLICE_RESOURCE
    from scheduler.cluster.models import TenantSyncState

    line = {**QUEUE["lines"][0], "resource": SLICE_RESOURCE, "nominal": 14}
    TenantSyncState.objects.create(tenant=world.tenant, queue_status={**QUEUE, "lines": [line]})
    body = login(client, world.member).get(reverse("team_detail", args=["team-a"])).content.decode()
    assert "<td>h100-80gb</td><td>compute slices (a whole GPU is 7)</td>" in body
    assert SLICE_RESOURCE not in body
    console = login(client, world.admin).get(reverse("console:queues")).content.decode()
    assert "compute slices (a whole GPU is 7)" in console


def test_approve_several_at_once_with_a_comment(client, world):
    a, b = ask(world, 2), ask(world, 3)
    login(client, world.admin)
    response = client.post(
        reverse("console:decide"),
        {"request": [a.pk, b.pk], "action": "approve", "comment": "ok"},
        follow=True,
    )
    assert "Approved 2 requests." in response.content.decode()
    assert set(CapacityRequest.objects.values_list("state", flat=True)) == {"approved"}


def test_reject_without_comment_is_refused_with_the_reason(client, world):
    a = ask(world)
    login(client, world.admin)
    response = client.post(
        reverse("console:decide"), {"request": [a.pk], "action": "reject"}, follow=True
    )
    assert "say why the request is rejected" in response.content.decode()
    a.refresh_from_db()
    assert a.state == "submitted"


def test_capacity_map_draws_gpus_and_tenants(client, world, settings):
    NodeFactory(name="gpu-a100-0", allocatable={"nvidia.com/gpu": 2})
    PodAllocationFactory(
        node_name="gpu-a100-0", tenant=world.tenant, resources={"nvidia.com/mig-3g.40gb": 1}
    )
    body = login(client, world.admin).get(reverse("console:capacity")).content.decode()
    assert body.count('class="gpu"') == 4
    assert "3g.40gb — team-a" in body and "3g.40gb — free" in body
    assert body.count("1g.10gb — free") == 7


def test_capacity_map_marks_what_a_team_holds_on_borrowed_quota(client, world):
    from scheduler.cluster.models import TenantSyncState

    NodeFactory(
        name="gpu-h100-0",
        gpu_model="H100-80GB",
        gpu_count=1,
        mig_config="all-3g.40gb",
        allocatable={"nvidia.com/mig-3g.40gb": 2},
    )
    PodAllocationFactory(
        node_name="gpu-h100-0", tenant=world.tenant, resources={"nvidia.com/mig-3g.40gb": 2}
    )
    # the team's queue borrows 1 of the 2 units its pods hold on the H100s
    one_borrowed = {**QUEUE, "lines": [{**QUEUE["lines"][0], "borrowed": 1}]}
    TenantSyncState.objects.create(tenant=world.tenant, queue_status=one_borrowed)
    body = login(client, world.admin).get(reverse("console:capacity")).content.decode()
    assert body.count("inst borrowed") == 1
    assert body.count("team-a (borrowed from the cohort)") == 1
    assert "on borrowed quota" in body


def test_audit_log_filters(client, world):
    ask(world)
    login(client, world.admin)
    body = client.get(reverse("console:audit"), {"verb": "submitted"}).content.decode()
    assert "capacity_request.submitted" in body
    body = client.get(reverse("console:audit"), {"verb": "approved"}).content.decode()
    assert "No events match" in body


def test_audit_filter_takes_any_iso_offset(client, world):
    ask(world)
    login(client, world.admin)
    response = client.get(reverse("console:audit"), {"since": "2020-01-01T00:00:00+19:48"})
    assert response.status_code == 200
    assert "capacity_request.submitted" in response.content.decode()


def test_a_decided_ask_is_told_on_the_home_page_once(client, world):
    request = ask(world, amount=9)  # above the envelope: it waits for the platform team
    login(client, world.member)
    assert 'id="newly-decided"' not in client.get(reverse("home")).content.decode()
    request_services.reject_capacity_request(actor=world.admin, request=request, comment="not now")
    page = client.get(reverse("home")).content.decode()
    assert f"Your ask #{request.pk}</a> for {world.tenant.name} was rejected" in page
    assert "not now" in page
    assert 'id="newly-decided"' not in client.get(reverse("home")).content.decode()  # once


def test_my_asks_leave_with_the_team(client, world):
    request = ask(world, amount=1)
    login(client, world.member)
    assert f"#{request.pk}</a> for" in client.get(reverse("home")).content.decode()
    Membership.objects.filter(user=world.member, tenant=world.tenant).delete()
    assert f"#{request.pk}</a> for" not in client.get(reverse("home")).content.decode()
