"""Self-service details without a browser: plain wording, the confirmation pages' GET does
nothing, a refused new member is kept for the form."""

import pytest
from django.urls import reverse

from core.errors import InvalidInput
from scheduler.workloads import services as workloads
from scheduler.workloads.models import Workload
from scheduler.workloads.pages.forms import WorkloadForm
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import ApiToken, Membership
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import (
    CapacityRequestFactory,
    CapacityRequestItemFactory,
    QuotaGrantFactory,
)

pytestmark = pytest.mark.django_db


def test_a_priority_the_team_may_not_use_is_refused_in_plain_words(world):
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=1)
    with pytest.raises(InvalidInput) as refused:
        workloads.submit_workload(
            actor=world.member,
            tenant=world.tenant,
            spec=workload_spec(
                name="x",
                kind="job",
                image="busybox:1.36",
                resources={world.rc.slug: 1},
                priority="gpu-critical",
            ),
        )
    assert refused.value.detail == "team-a may use gpu-high or gpu-low, not gpu-critical"


def test_the_workload_form_offers_the_teams_priorities_only(world):
    world.tenant.allowed_priority_classes = ["gpu-critical", "gpu-high"]
    form = WorkloadForm(tenant=world.tenant)
    assert [value for value, _ in form.fields["priority"].choices] == ["gpu-critical", "gpu-high"]
    assert form.fields["priority"].initial == "gpu-high"  # the lowest it may use


def test_confirmation_pages_change_nothing(client, world):
    w = WorkloadFactory(tenant=world.tenant, state=Workload.State.RUNNING)
    newbie = Membership.objects.get(user=world.viewer)
    client.force_login(world.owner)
    body = client.get(reverse("scheduler:workload_cancel", args=[w.pk])).content.decode()
    assert "running pod stops at once" in body
    body = client.get(reverse("tenants:member_remove", args=["team-a", newbie.pk])).content
    assert b"viewer loses access to" in body
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING and Membership.objects.filter(pk=newbie.pk).exists()


def test_only_owners_get_the_remove_confirmation(client, world):
    owner = Membership.objects.get(user=world.owner)
    client.force_login(world.member)
    response = client.get(reverse("tenants:member_remove", args=["team-a", owner.pk]), follow=True)
    assert "Only the team&#x27;s owners remove members." in response.content.decode()


def test_a_revoked_token_has_no_confirmation_page(client, world):
    from tenants.services import tokens as token_services

    token, _ = token_services.issue_token(
        actor=world.member, user=world.member, name="t", scopes=["read"]
    )
    token_services.revoke_token(actor=world.member, token=token)
    client.force_login(world.member)
    response = client.get(reverse("tenants:token_revoke", args=[token.pk]), follow=True)
    assert "already revoked" in response.content.decode()
    assert ApiToken.objects.count() == 1


def test_a_refused_new_member_shows_at_the_form_once(client, world):
    client.force_login(world.owner)
    response = client.post(
        reverse("tenants:member_add", args=["team-a"]),
        {"username": "", "role": "member"},
        follow=True,
    )
    body = response.content.decode()
    assert 'id="id_username_error"' in body and "This field is required." in body
    again = client.get(reverse("team_detail", args=["team-a"])).content.decode()
    assert 'id="id_username_error"' not in again  # popped: a reload shows a clean form
    assert 'value="member" selected' in again  # the role's default is member, not owner


@pytest.mark.parametrize(
    "query", ["resource_class=abc&amount=x", "resource_class=999999", "amount=-3"]
)
def test_a_prefilled_ask_form_takes_any_query_without_a_500(client, world, query):
    client.force_login(world.member)
    response = client.get(reverse("tenants:request_create", args=["team-a"]) + "?" + query)
    assert response.status_code == 200 and "Ask for capacity" in response.content.decode()


def test_queue_filters_ignore_what_they_do_not_know(client, world):
    client.force_login(world.admin)
    for query in ("age=abc&sort=DROP", "age=7&sort=cost&tenant=nope&class=x", "page=999"):
        assert client.get(reverse("console:queue") + "?" + query).status_code == 200


def test_the_queue_pages_its_asks_and_reads_the_policys_reasons_on_every_page(client, world):
    reason = f"over the auto-approval limit for {world.rc.slug}"
    for n in range(27):  # a page of 25, and two more
        ask = CapacityRequestFactory(
            tenant=world.tenant, requester=world.member, justification=f"ask {n:02}",
            policy_reasons=[reason],
        )  # fmt: skip
        CapacityRequestItemFactory(request=ask, resource_class=world.rc, amount=1)
    client.force_login(world.admin)
    first = client.get(reverse("console:queue") + "?sort=newest").content.decode()
    second = client.get(reverse("console:queue") + "?sort=newest&page=2").content.decode()
    assert first.count("over the auto-approval limit for") == 25
    assert second.count("over the auto-approval limit for") == 2
    assert "ask 01" in second and "ask 00" in second and "ask 01" not in first
    shown = f"over the auto-approval limit for {world.rc.display_name}"
    assert shown in second and reason not in second  # the class's name, not its slug


def test_run_again_of_another_teams_workload_prefills_nothing(client, world):
    theirs = WorkloadFactory(tenant=world.other_tenant, name="secret-job", image="their:image")
    client.force_login(world.member)
    url = reverse("scheduler:workload_create", args=["team-a"])
    body = client.get(f"{url}?again={theirs.pk}").content.decode()
    assert "their:image" not in body
    assert client.get(f"{url}?again=x1").status_code == 200
