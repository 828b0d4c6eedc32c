"""Workload and token pages: the same services as the API, tenant-scoped, errors by the field."""

from decimal import Decimal

import pytest
from django.urls import reverse

from scheduler.workloads.models import Workload
from tenants.models import ApiToken
from tests.tenants.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def granted(world):
    world.rc.gpu_model = "A100-80GB"
    world.rc.save()
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=2)
    return world


def submit(client, **overrides):
    data = {
        "name": "train-7",
        "kind": "job",
        "image": "pytorch/pytorch:2.4-cuda12.4",
        "command": "python train.py --epochs 3",
        "resource_class": "a100-80gb-mig-3g.40gb",
        "units": 1,
        "priority": "gpu-low",
        "replicas": 1,
        "backoff_limit": 0,
        "env": "SEED=1",
    }
    data.update(overrides)
    return client.post(reverse("scheduler:workload_create", args=["team-a"]), data, follow=True)


def test_submit_form_mirrors_the_api(client, granted):
    client.force_login(granted.member)
    response = submit(client)
    w = Workload.objects.get()
    assert response.redirect_chain[-1][0] == reverse("scheduler:workload_detail", args=[w.pk])
    assert (w.command, w.env, w.resources) == (
        ["python", "train.py", "--epochs", "3"],
        {"SEED": "1"},
        {"a100-80gb-mig-3g.40gb": 1},
    )
    assert "train-7 submitted" in response.content.decode()
    # the message stays put while the state block follows the cluster: it names no state
    assert "submitted: it is" not in response.content.decode()


def test_more_than_the_grant_keeps_the_form_and_says_what_to_ask_for(client, granted):
    client.force_login(granted.member)
    response = submit(client, units=3)
    body = response.content.decode()
    assert (
        "the grant is 6 slices; ask for 1 × 3g.40gb (= 3 slices) more" in body
        and 'value="train-7"' in body
    )
    assert not Workload.objects.exists()
    bad_env = submit(client, env="NOEQUALS")
    assert "line 1: write KEY=value" in bad_env.content.decode()


def test_viewer_and_outsider(client, granted):
    client.force_login(granted.member)
    submit(client)
    w = Workload.objects.get()
    client.force_login(granted.viewer)
    assert "you need the role" in submit(client, name="other").content.decode()
    assert client.get(reverse("scheduler:workload_detail", args=[w.pk])).status_code == 200
    client.force_login(granted.outsider)
    for url in (
        reverse("scheduler:workload_detail", args=[w.pk]),
        reverse("scheduler:workload_list", args=["team-a"]),
        reverse("scheduler:workload_create", args=["team-a"]),
    ):
        assert client.get(url).status_code == 404
    assert client.post(reverse("scheduler:workload_cancel", args=[w.pk])).status_code == 404


def test_list_filters_and_cancel(client, granted, django_assert_max_num_queries):
    client.force_login(granted.member)
    submit(client)
    submit(client, name="serve", kind="deployment")
    url = reverse("scheduler:workload_list", args=["team-a"])
    with django_assert_max_num_queries(12):
        body = client.get(url, {"kind": "deployment"}).content.decode()
    assert "serve" in body and "train-7" not in body
    w = Workload.objects.get(name="train-7")
    response = client.post(reverse("scheduler:workload_cancel", args=[w.pk]), follow=True)
    assert "train-7 cancelled" in response.content.decode()
    w.refresh_from_db()
    assert w.state == "cancelled"
    Workload.objects.filter(name="serve").update(state="queued", reason="WaitingForCluster")
    listed = client.get(url).content.decode()
    assert "· WaitingForCluster" in listed  # a reason that says more than the state
    assert w.reason == "Cancelled" and "· Cancelled" not in listed  # none that says it again


@pytest.mark.cluster
def test_logs_panel_says_why_there_are_none(client, granted, kube):
    client.force_login(granted.member)
    submit(client)
    w = Workload.objects.get()
    body = client.get(reverse("scheduler:workload_logs", args=[w.pk])).content.decode()
    assert "No logs:" in body


def test_tokens_for_me_and_my_teams_robot(client, world):
    from tenants.services import tenants as tenant_services

    robot_tenant = tenant_services.create_tenant(actor=world.admin, slug="robots", name="R")
    from tenants.models import Membership

    Membership.objects.create(tenant=robot_tenant, user=world.owner, role="owner")
    client.force_login(world.owner)
    page = client.get(reverse("tenants:tokens")).content.decode()
    assert "CI robot of robots" in page and "CI robot of team-a" not in page  # factory: no robot
    response = client.post(
        reverse("tenants:tokens"),
        {
            "name": "gitlab",
            "owner": f"user:{robot_tenant.robot_id}",
            "scopes": ["read", "submit"],
            "expires_in_days": 30,
        },
        follow=True,
    )
    body = response.content.decode()
    token = ApiToken.objects.get()
    assert token.user == robot_tenant.robot and token.scopes == ["read", "submit"]
    assert "gpp_" in body and "shown only once" in body
    assert response.redirect_chain == [(reverse("tenants:tokens"), 302)]  # post/redirect/get
    assert 'id="secret"' not in client.get(reverse("tenants:tokens")).content.decode()  # once
    client.post(reverse("tenants:token_revoke", args=[token.pk]))
    token.refresh_from_db()
    assert token.revoked_at is not None
    client.force_login(world.member)
    assert client.post(reverse("tenants:token_revoke", args=[token.pk])).status_code == 404


def test_between_the_post_and_its_page_the_session_store_holds_no_plain_secret(client, world):
    from django.contrib.sessions.models import Session

    client.force_login(world.owner)
    created = client.post(
        reverse("tenants:tokens"),
        {"name": "ci", "owner": f"user:{world.owner.pk}", "scopes": ["read"], "expires_in_days": 1},
    )
    assert created.status_code == 302
    stored = " ".join(s.session_data for s in Session.objects.all())
    decoded = " ".join(str(s.get_decoded()) for s in Session.objects.all())
    assert "gpp_" not in stored and "gpp_" not in decoded  # sealed, not the secret
    page = client.get(reverse("tenants:tokens")).content.decode()
    assert 'id="secret"' in page and "gpp_" in page  # shown, once


def test_a_sealed_secret_opens_only_for_its_purpose_and_only_for_a_while():
    import time_machine

    from core import sealing

    with time_machine.travel("2026-03-01 12:00:00+00:00", tick=False) as clock:
        sealed = sealing.seal("gpp_abc", purpose="new_token_secret")
        assert "gpp_abc" not in sealed
        assert sealing.unseal(sealed, purpose="new_token_secret", max_age_s=120) == "gpp_abc"
        assert sealing.unseal(sealed, purpose="other", max_age_s=120) is None
        assert sealing.unseal("gpp_abc", purpose="new_token_secret", max_age_s=120) is None
        assert sealing.unseal(None, purpose="new_token_secret", max_age_s=120) is None
        clock.shift(121)
        assert sealing.unseal(sealed, purpose="new_token_secret", max_age_s=120) is None


def test_approve_scope_refused_for_non_admins_with_the_reason(client, world):
    client.force_login(world.member)
    body = client.post(
        reverse("tenants:tokens"),
        {
            "name": "x",
            "owner": f"user:{world.member.pk}",
            "scopes": ["approve"],
            "expires_in_days": 1,
        },
    ).content.decode()
    assert "only platform admins" in body and not ApiToken.objects.exists()


def test_autoscaled_deployment_from_the_form_is_admitted_at_min_replicas(client, granted):
    client.force_login(granted.member)
    refused = submit(
        client, name="serve", kind="deployment", replicas=3, max_replicas=4, target_gpu_util=70
    ).content.decode()
    assert "at min replicas" in refused and not Workload.objects.exists()
    # a max beyond the grant is taken: replicas past it wait in the team's queue
    submit(client, name="serve", kind="deployment", max_replicas=3, target_gpu_util=70)
    w = Workload.objects.get()
    assert (w.replicas, w.max_replicas, w.target_gpu_util) == (1, 3, 70)


def test_a_service_from_the_form_scales_on_requests_per_second_per_replica(client, granted):
    client.force_login(granted.member)
    page = client.get(reverse("scheduler:workload_create", args=["team-a"])).content.decode()
    assert 'name="target_requests_per_s"' in page
    refused = submit(
        client, name="echo", kind="deployment", max_replicas=3, target_requests_per_s="0"
    ).content.decode()
    assert "greater than or equal to 0.001" in refused and not Workload.objects.exists()
    submit(client, name="echo", kind="deployment", max_replicas=3, target_requests_per_s="2.5")
    w = Workload.objects.get()
    assert (w.max_replicas, w.target_requests_per_s) == (3, Decimal("2.5"))
    again = client.get(reverse("scheduler:workload_create", args=["team-a"]) + f"?again={w.pk}")
    assert 'value="2.500"' in again.content.decode()  # submitted again as it was


# --- tokens: nothing guessed, nothing cut (issue 35, 12) ------------------------------------------


def _token_error(html: str, field: str) -> str:
    marker = f'id="id_{field}_error">'
    return html.split(marker, 1)[1].split("</div>", 1)[0] if marker in html else ""


def test_a_token_with_no_scope_ticked_is_refused_at_the_scopes(client, world):
    client.force_login(world.member)
    response = client.post(
        reverse("tenants:tokens"),
        {"name": "ci", "owner": f"user:{world.member.pk}", "expires_in_days": 30},
    )
    assert response.status_code == 200
    assert "Tick at least one scope" in _token_error(response.content.decode(), "scopes")
    assert not ApiToken.objects.exists()


def test_a_200_character_token_name_is_refused_not_cut(client, world):
    client.force_login(world.member)
    page = client.get(reverse("tenants:tokens")).content.decode()
    name_input = page.split('id="id_name"')[0].rsplit("<input", 1)[1]
    assert "maxlength" not in name_input  # the browser would cut it without a word
    response = client.post(
        reverse("tenants:tokens"),
        {"name": "n" * 200, "owner": f"user:{world.member.pk}", "scopes": ["read"]}
        | {"expires_in_days": 30},
    )
    error = _token_error(response.content.decode(), "name")
    assert "at most 80 characters; this one has 200" in error
    assert not ApiToken.objects.exists()


def test_a_shown_once_secret_has_a_copy_button(client, world):
    client.force_login(world.member)
    client.post(
        reverse("tenants:tokens"),
        {
            "name": "ci",
            "owner": f"user:{world.member.pk}",
            "scopes": ["read"],
            "expires_in_days": 1,
        },
    )
    page = client.get(reverse("tenants:tokens")).content.decode()
    assert '<button type="button" class="small" data-copy="secret" hidden>Copy the token' in page
