"""The workspaces' API: the page's services as JSON, with the same refusals (400 that says what to
change, 409 at the cap) and the same tenant scoping (another team's workspace is a 404)."""

import pytest
from rest_framework.test import APIClient

from tenants.services.grants import grant_quota
from tests.portal.api.conftest import session
from workspaces.models import WorkspacePolicy

pytestmark = pytest.mark.django_db
URL = "/api/v1/workspaces/"


@pytest.fixture
def granted(world):
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    return world


def body(world, **over):
    return {
        "tenant": world.tenant.slug,
        "name": "nb",
        "kind": "jupyter",
        "image": "quay.io/jupyter/base-notebook",
        "resource_class": world.rc.slug,
        "time_limit_h": "2.5",
        **over,
    }


def test_open_read_stop_and_restart_by_api(granted):
    member = session(granted.member)
    opened = member.post(URL, body(granted), format="json")
    assert opened.status_code == 201, opened.data
    ws = opened.data
    assert (ws["state"], ws["time_limit_s"], ws["owner"]) == ("starting", 9000, "member")
    # the portal's one-click link: it checks the person, then sends them to the workspace's
    # own origin (issue 51)
    assert ws["link"] == f"http://127.0.0.1:8000/workspaces/{ws['id']}/open/"
    assert member.get(f"{URL}{ws['id']}/").status_code == 200
    stopped = member.post(f"{URL}{ws['id']}/stop/")
    assert stopped.status_code == 200 and stopped.data["state"] == "stopped"
    again = member.post(f"{URL}{ws['id']}/stop/")
    assert again.status_code == 409 and again.data["code"] == "invalid_transition"
    restarted = member.post(f"{URL}{ws['id']}/restart/")
    assert restarted.status_code == 200 and restarted.data["runs"] == 2
    # another team sees nothing of it; an anonymous caller is asked to sign in
    outsider = session(granted.outsider)
    assert outsider.get(f"{URL}{ws['id']}/").status_code == 404
    assert outsider.get(URL).data["count"] == 0
    assert APIClient().get(URL).status_code == 401


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"resource_class": "h100-80gb"}, "team-a has no grant for 'h100-80gb'"),
        ({"image": "bad image"}, "give an image reference without spaces"),
        ({"time_limit_h": "0.1"}, "give a time limit between 15 min and 7 d"),
    ],
)
def test_bad_input_is_a_json_400_that_says_what_to_change(granted, over, said):
    response = session(granted.member).post(URL, body(granted, **over), format="json")
    assert response.status_code == 400
    assert said in response.data["detail"]


def test_the_cap_is_a_409_that_says_so(granted):
    WorkspacePolicy.objects.create(tenant=granted.tenant, max_per_person=1)
    member = session(granted.member)
    assert member.post(URL, body(granted), format="json").status_code == 201
    response = member.post(URL, body(granted, name="second"), format="json")
    assert response.status_code == 409
    assert response.data["code"] == "workspace_cap"
    assert "the team's cap is 1 per person" in response.data["detail"]


def test_a_workspace_run_follows_the_workspaces_rules_through_the_workload_doors(granted, client):
    """Security, third pass (7): another member (or the owner) cancelling or resuming the run
    through /api/v1/workloads/ or the workload page would skip the owner-only rule and the
    per-person cap; both doors send them to the workspace."""
    from scheduler.workloads.models import Workload

    opened = session(granted.member).post(URL, body(granted), format="json")
    run_id = Workload.objects.get(labels__has_key="gpu-portal.io/workspace").pk
    assert opened.status_code == 201
    owner = session(granted.owner)  # a team owner, not the workspace's
    for verb in ("cancel", "resume"):
        refused = owner.post(f"/api/v1/workloads/{run_id}/{verb}/")
        assert refused.status_code == 409, refused.data
        assert refused.data["code"] == "workspace_run"
        assert "on the workspace's page" in refused.data["detail"]
    client.force_login(granted.owner)
    client.post(f"/workloads/{run_id}/cancel/")
    assert Workload.objects.get(pk=run_id).state != Workload.State.CANCELLED
    # the rule is the service's, so every door meets it (the admin's bulk cancel too)
    from core.errors import InvalidTransition
    from scheduler.workloads.services import cancel_workload

    with pytest.raises(InvalidTransition, match="run of workspace"):
        cancel_workload(actor=granted.admin, workload=Workload.objects.get(pk=run_id))


def test_a_workspace_opens_at_the_priority_asked_and_shows_it(granted):
    """Issue 49, 6 (follow-up): the API chooses the priority as the form does, and shows it."""
    member = session(granted.member)
    low = member.post(URL, body(granted), format="json")
    assert low.status_code == 201, low.data
    assert low.data["priority"] == "gpu-low"  # the lowest the team may use, by default
    high = member.post(URL, body(granted, name="nb-high", priority="gpu-high"), format="json")
    assert high.status_code == 201, high.data
    assert high.data["priority"] == "gpu-high"
    assert member.get(f"{URL}{high.data['id']}/").data["priority"] == "gpu-high"
    listed = {ws["name"]: ws["priority"] for ws in member.get(URL).data["results"]}
    assert listed == {"nb": "gpu-low", "nb-high": "gpu-high"}
    assert member.post(f"{URL}{high.data['id']}/stop/").data["priority"] == "gpu-high"
    restarted = member.post(f"{URL}{high.data['id']}/restart/")
    assert restarted.data["priority"] == "gpu-high"  # a restart keeps it


@pytest.mark.parametrize("asked", ["gpu-critical", "gpu-urgent"])
def test_a_priority_the_team_may_not_use_is_a_400_naming_the_allowed_ones(granted, asked):
    response = session(granted.member).post(URL, body(granted, priority=asked), format="json")
    assert response.status_code == 400
    assert response.data["errors"]["priority"] == [
        f"a workspace of team-a runs at gpu-low or gpu-high, not {asked!r}"
    ]
    assert "runs at gpu-low or gpu-high" in response.data["detail"]


def test_every_bad_field_of_an_open_is_named_in_one_400(granted):
    response = session(granted.member).post(
        URL, body(granted, priority="gpu-critical", image="bad image", name="Bad_Name"),
        format="json",
    )  # fmt: skip
    assert response.status_code == 400 and response.data["code"] == "invalid"
    assert set(response.data["errors"]) == {"priority", "image", "name"}
