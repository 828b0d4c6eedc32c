"""Workspaces (issue 33, item 1): the pure culling decision, the rendered objects, and through
the real Django stack who may open one (issue 51: its owner and whom it is shared with), the
refusals that say what to change (400) and the per-person cap (409)."""

import html
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from scheduler.cluster.render.tenant import render_tenant
from scheduler.workloads.models import Workload
from tenants.models import AuditEvent
from tenants.services.grants import grant_quota
from tests.scheduler.test_render import by_key, spec
from workspaces import services
from workspaces.activity import parse_activity
from workspaces.idleness import Cull, CullFacts, CullPolicy, decide, stops_at
from workspaces.manifests import (
    WORKSPACE_LABEL,
    WorkspaceSpec,
    render_claim,
    render_secret,
    render_service,
    server_command,
    server_env,
)
from workspaces.models import Workspace, WorkspacePolicy

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
POLICY = CullPolicy(idle_after_s=3600, notice_s=600, threshold_pct=5)
IDLE_GPU = Decimal("0.01")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# --- the culling decision (pure) ---------------------------------------------------------------


def test_quiet_and_no_gpu_use_is_warned_before_the_idle_time_then_stopped_after_the_notice():
    facts = CullFacts(started_at=T0, last_activity=at(5), gpu_use=IDLE_GPU)
    assert decide(POLICY, facts, at(50)).action == Cull.NONE  # 45 min quiet: not yet
    warn = decide(POLICY, facts, at(56))  # 51 min quiet: the 10 min notice starts
    assert warn.action == Cull.WARN and warn.quiet_since == at(5)
    assert "no kernel or terminal activity for 51 min" in warn.why
    assert "home volume is kept" in warn.why
    warned = CullFacts(started_at=T0, last_activity=at(5), gpu_use=IDLE_GPU, warned_at=at(56))
    assert decide(POLICY, warned, at(60)).action == Cull.NONE  # within the notice
    stop = decide(POLICY, warned, at(66))
    assert stop.action == Cull.STOP
    assert stop.why.startswith("stopped after 1 h 1 min with no kernel or terminal activity")


def test_activity_in_the_window_keeps_it_alive_and_withdraws_a_warning():
    # a kernel ran 10 minutes ago: nothing happens, however long the run
    alive = CullFacts(started_at=T0, last_activity=at(590), gpu_use=IDLE_GPU)
    assert decide(POLICY, alive, at(600)).action == Cull.NONE
    # activity after a warning: the warning is withdrawn, never a stop
    after = CullFacts(started_at=T0, last_activity=at(58), gpu_use=IDLE_GPU, warned_at=at(56))
    assert decide(POLICY, after, at(70)).action == Cull.CLEAR


def test_gpu_use_keeps_a_quiet_workspace_alive():
    # a long training cell: no kernel activity said, but the GPU works
    busy = CullFacts(started_at=T0, last_activity=at(0), gpu_use=Decimal("0.40"), warned_at=None)
    assert decide(POLICY, busy, at(300)).action == Cull.NONE
    warned = CullFacts(
        started_at=T0, last_activity=at(0), gpu_use=Decimal("0.40"), warned_at=at(56)
    )
    assert decide(POLICY, warned, at(300)).action == Cull.CLEAR


def test_missing_signals_never_stop_anything():
    no_activity = CullFacts(started_at=T0, last_activity=None, gpu_use=IDLE_GPU, warned_at=at(1))
    no_gpu = CullFacts(started_at=T0, last_activity=at(0), gpu_use=None, warned_at=at(1))
    not_started = CullFacts(started_at=None, last_activity=at(0), gpu_use=IDLE_GPU)
    for facts in (no_activity, no_gpu, not_started):
        assert decide(POLICY, facts, at(600)).action == Cull.NONE


def test_quiet_time_counts_from_a_restart_and_the_idle_timer_says_when():
    restarted = CullFacts(started_at=at(100), last_activity=at(5), gpu_use=IDLE_GPU)
    assert decide(POLICY, restarted, at(140)).action == Cull.NONE
    assert stops_at(POLICY, restarted) == at(160)


def test_the_server_says_its_last_activity():
    jupyter = parse_activity("jupyter", {"last_activity": "2026-03-02T09:05:00.000Z"})
    assert jupyter == at(5)
    beat = int(at(7).timestamp() * 1000)
    assert parse_activity("code-server", {"status": "alive", "lastHeartbeat": beat}) == at(7)
    assert parse_activity("jupyter", {"started": "x"}) is None
    assert parse_activity("jupyter", {"last_activity": "not a time"}) is None


# --- rendering (pure) --------------------------------------------------------------------------

SPEC = WorkspaceSpec(
    workspace_id=7,
    name="nb",
    namespace="tenant-team-a",
    tenant="team-a",
    instance="test",
    kind="jupyter",
    home_size="10Gi",
    storage_class="fast",
)
LABELS = {
    "app.kubernetes.io/managed-by": "gpu-portal",
    "gpu-portal.io/instance": "test",
    "gpu-portal.io/tenant": "team-a",
    WORKSPACE_LABEL: "7",
}


def test_the_workspace_objects_a_volume_a_cluster_ip_service_and_the_servers_own_secret():
    meta = {"namespace": "tenant-team-a", "labels": LABELS}
    assert render_claim(SPEC) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ws-nb-home", **meta},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            "storageClassName": "fast",
        },
    }
    assert render_service(SPEC)["spec"] == {
        "type": "ClusterIP",
        "selector": {WORKSPACE_LABEL: "7"},
        "ports": [{"name": "http", "port": 8888, "targetPort": 8888, "protocol": "TCP"}],
    }
    assert render_secret(SPEC, "s3cret") == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ws-nb-server", **meta},
        "type": "Opaque",
        "stringData": {"token": "s3cret"},
    }
    command, args = server_command("jupyter", "tenant-team-a", "nb")
    assert command == ["jupyter", "lab"]
    assert "--ServerApp.base_url=/ws/tenant-team-a/nb/" in args
    # the server checks its own secret: no empty token, no --auth=none (issue 51, 2)
    assert not any(a.startswith("--ServerApp.token") for a in args)
    assert server_env("jupyter", "nb") == {
        "JUPYTER_TOKEN": {"secret": "ws-nb-server", "key": "token"}
    }
    _, code_args = server_command("code-server", "tenant-team-a", "nb")
    assert "--auth=password" in code_args and "--auth=none" not in code_args
    assert server_env("code-server", "nb") == {
        "HASHED_PASSWORD": {"secret": "ws-nb-server", "key": "token"}
    }


# --- through the Django stack ------------------------------------------------------------------


@pytest.fixture
def granted(world):
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    return world


def open_one(world, actor=None, name="nb", **over):
    fields = {
        "name": name,
        "kind": "jupyter",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-latest",
        "resource_class": world.rc.slug,
        "time_limit_h": "4",
    }
    return services.open_workspace(
        actor=actor or world.member, tenant=world.tenant, **{**fields, **over}
    )


@pytest.mark.django_db
def test_only_its_owner_opens_a_workspace_in_one_click(granted, client):
    """Issue 51, 3: owner-only by default; a teammate, the team's owner, a viewer, a platform
    admin and another team are refused, an unknown one is a 404."""
    world = granted
    ws = open_one(world)
    Workload.objects.filter(pk=ws.run_id).update(state=Workload.State.RUNNING)
    url = reverse("workspaces:workspace_open", args=[ws.pk])
    assert client.get(url)["Location"].startswith("/accounts/login/")
    for person, status in (
        (world.owner, 403),  # the team's owner: may stop it, not run code in it
        (world.viewer, 403),
        (world.outsider, 404),  # another team's: nothing says it exists
        (world.admin, 403),  # a platform admin who is not a member
    ):
        client.force_login(person)
        assert client.get(url).status_code == status, person
    client.force_login(world.member)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(
        f"https://w{ws.pk}.ws.gpu-portal-workspaces.test/_portal/enter?ticket="
    )
    assert client.get(reverse("workspaces:workspace_open", args=[ws.pk + 999])).status_code == 404


@pytest.mark.django_db
def test_opening_a_workspace_submits_its_run_in_the_teams_grant_at_the_lowest_priority(
    granted,
):
    # issue 49, 6 changed this: gpu-low by default (gpu-high preempts teammates' jobs)
    ws = open_one(granted)
    run = Workload.objects.get(pk=ws.run_id)
    assert (run.kind, run.priority_class, run.resources) == (
        "job",
        "gpu-low",
        {granted.rc.slug: 1},
    )
    assert run.labels == {WORKSPACE_LABEL: str(ws.pk), "gpu-portal.io/idle-exempt": "true"}
    assert run.volumes == [
        {"claim": "ws-nb-home", "mount_path": "/home/jovyan", "read_only": False}
    ]
    assert run.max_run_s == 4 * 3600
    assert ws.state == Workspace.State.STARTING
    assert AuditEvent.objects.filter(verb="workspace.opened", object_id=str(ws.pk)).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        (
            "resource_class",
            "h100-80gb",
            "has no grant for 'h100-80gb'; open the workspace on a class",
        ),
        ("image", "bad image", "give an image reference without spaces"),
        ("time_limit_h", "900", "out of range: give a time limit between 15 min and 7 d"),
        ("time_limit_h", "soon", "time limit: give hours"),
        ("name", "Not_A_Name", "name 'Not_A_Name'"),
        ("kind", "rstudio", "kind must be one of"),
        ("home_size", "5Ti", "home size '5Ti': give a size between 1Gi and 200Gi"),
    ],
)
def test_bad_input_is_a_400_that_says_what_to_change(granted, client, field, value, said):
    client.force_login(granted.member)
    body = {
        "name": "nb",
        "kind": "jupyter",
        "image": "quay.io/jupyter/base-notebook",
        "resource_class": granted.rc.slug,
        "time_limit_h": "4",
        field: value,
    }
    response = client.post(reverse("workspaces:workspace_list", args=[granted.tenant.slug]), body)
    assert response.status_code == 400
    assert said in html.unescape(response.content.decode())
    assert not Workspace.objects.exists() and not Workload.objects.exists()  # nothing half-written


@pytest.mark.django_db
def test_one_person_holds_at_most_the_teams_cap_a_409_that_says_so(granted, client):
    WorkspacePolicy.objects.create(tenant=granted.tenant, max_per_person=1)
    open_one(granted, name="first")
    client.force_login(granted.member)
    body = {
        "name": "second",
        "kind": "jupyter",
        "image": "quay.io/jupyter/base-notebook",
        "resource_class": granted.rc.slug,
        "time_limit_h": "4",
    }
    response = client.post(reverse("workspaces:workspace_list", args=[granted.tenant.slug]), body)
    assert response.status_code == 409
    assert (
        "already holds 1 running workspace(s) in team-a (first) and the team's cap is 1"
        in html.unescape(response.content.decode())
    )
    # another person of the team still may
    open_one(granted, actor=granted.owner, name="owners")


@pytest.mark.django_db
def test_workspaces_stay_within_the_teams_own_grant(granted):
    open_one(granted, name="one")
    open_one(granted, actor=granted.owner, name="two")
    with pytest.raises(
        services.QuotaExceeded, match="workspaces run only within team-a's own grant"
    ):
        WorkspacePolicy.objects.create(tenant=granted.tenant, max_per_person=5)
        open_one(granted, name="three")


@pytest.mark.django_db
def test_stop_keeps_the_workspace_and_restart_starts_a_new_run(granted, client):
    ws = open_one(granted)
    client.force_login(granted.member)
    client.post(reverse("workspaces:workspace_stop", args=[ws.pk]))
    ws.refresh_from_db()
    assert ws.state == Workspace.State.STOPPED and ws.run.state == Workload.State.CANCELLED
    client.post(reverse("workspaces:workspace_restart", args=[ws.pk]))
    ws.refresh_from_db()
    assert ws.runs == 2 and ws.state == Workspace.State.STARTING
    verbs = set(AuditEvent.objects.filter(object_id=str(ws.pk)).values_list("verb", flat=True))
    assert {"workspace.opened", "workspace.stopped", "workspace.restarted"} <= verbs
    # the page: state, link, idle timer
    page = client.get(reverse("workspaces:workspace_detail", args=[ws.pk])).content.decode()
    opens = reverse("workspaces:workspace_open", args=[ws.pk])
    assert opens in page and "stops after 1 h with no kernel or terminal activity" in page
    team = client.get(reverse("team_detail", args=[granted.tenant.slug])).content.decode()
    assert reverse("workspaces:workspace_list", args=[granted.tenant.slug]) in team


def test_the_teams_network_policy_lets_the_ingress_controller_reach_workspace_servers_only():
    """Security, third pass (1): the ingress controller reaches the workspace port of a
    workspace's pods, not that port on every pod of the namespace (policies add up, so the
    rule lives in a policy of its own that selects the workspaces' pods)."""
    objects = by_key(render_tenant(spec(workspace_ingress_namespace="ingress-nginx")))
    isolation = objects[("NetworkPolicy", "gpu-portal-isolation")]
    assert len(isolation["spec"]["ingress"]) == 1  # its own and the platform namespace only
    workspaces = objects[("NetworkPolicy", "gpu-portal-workspaces")]["spec"]
    assert workspaces["podSelector"] == {
        "matchExpressions": [{"key": "gpu-portal.io/workspace", "operator": "Exists"}]
    }
    assert workspaces["policyTypes"] == ["Ingress"]
    assert workspaces["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "In",
                                "values": ["ingress-nginx"],
                            }
                        ]
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": 8888}],
        }
    ]
    without = by_key(render_tenant(spec(workspace_ingress_namespace="")))
    assert ("NetworkPolicy", "gpu-portal-workspaces") not in without


@pytest.mark.django_db
def test_the_form_offers_only_classes_the_grant_covers_one_of(granted, client):
    from tests.tenants.factories import PoolFactory, ResourceClassFactory

    # 2 × 3g.40gb granted: 6 of the A100's 7 slices, less than one whole A100
    whole = ResourceClassFactory(
        slug="a100-80gb", kind="whole", profile="", resource_name="nvidia.com/gpu",
        gpu_fraction=Decimal("1"), memory_gb=80,
    )  # fmt: skip
    PoolFactory(resource_class=whole, capacity=4)
    other = ResourceClassFactory(slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB")
    PoolFactory(resource_class=other, capacity=4)
    assert [c.slug for c in services.covered_classes(granted.tenant)] == [granted.rc.slug]
    client.force_login(granted.member)
    page = client.get(reverse("workspaces:workspace_list", args=[granted.tenant.slug]))
    options = page.content.decode()
    assert f'value="{granted.rc.slug}"' in options
    assert 'value="a100-80gb"' not in options and 'value="h100-80gb-mig-3g.40gb"' not in options
    with pytest.raises(services.InvalidInput, match="has no grant for 'a100-80gb'") as refused:
        open_one(granted, resource_class="a100-80gb")  # 6 slices do not make a whole GPU
    assert granted.rc.slug in str(refused.value)
    assert not Workspace.objects.exists()


@pytest.mark.django_db
def test_a_notebook_runs_at_the_priority_chosen_and_keeps_it_on_restart(granted, client):
    ws = open_one(granted, priority="gpu-high")
    assert Workload.objects.get(pk=ws.run_id).priority_class == "gpu-high"
    services.stop_workspace(actor=granted.member, workspace=ws)
    ws = services.restart_workspace(actor=granted.member, workspace=ws)
    assert ws.run.priority_class == "gpu-high"
    with pytest.raises(services.InvalidInput, match="runs at gpu-low or gpu-high"):
        open_one(granted, name="nb2", priority="gpu-critical")


@pytest.mark.django_db
def test_the_form_offers_human_gpu_labels_smallest_first_and_the_priority_with_why(granted, client):
    client.force_login(granted.member)
    page = html.unescape(
        client.get(
            reverse("workspaces:workspace_list", args=[granted.tenant.slug])
        ).content.decode()
    )
    label = re.search(rf'value="{granted.rc.slug}"[^>]*>([^<]*)</option>', page)
    assert label is not None, "the granted shape is offered"
    # its name and what the team has free of it, in the one unit of the pages
    assert re.fullmatch(
        rf"{re.escape(granted.rc.display_name)} · \d+ × \S+ \(= \d+ of \d+ slices\) free",
        label.group(1),
    ) or re.fullmatch(rf"{re.escape(granted.rc.display_name)} · \d+ of \d+ free", label.group(1))
    assert '<option value="gpu-low">gpu-low (normal)</option>' in page
    assert "preempts teammates' lower-priority jobs" in page


@pytest.mark.django_db
def test_a_notebook_is_listed_as_a_workspace_without_its_token_arguments(granted, client):
    ws = open_one(granted)
    client.force_login(granted.member)
    listing = client.get(reverse("scheduler:workload_list", args=[granted.tenant.slug]))
    assert '<td data-label="Kind">Notebook (workspace)</td>' in listing.content.decode()
    assert '<td data-label="Kind">Job (training, batch)' not in listing.content.decode()
    detail = client.get(reverse("scheduler:workload_detail", args=[ws.run_id])).content.decode()
    api = client.get(f"/api/v1/workloads/{ws.run_id}/").json()
    for said in (detail, str(api["args"])):
        assert "ServerApp.token" not in said and "ServerApp.password" not in said
    assert "--no-browser" in api["args"]


@pytest.mark.django_db
def test_the_form_says_every_bad_field_in_one_round_each_at_its_own(granted, client):
    """Issue 49, 6 (follow-up): three bad fields take one post, each refusal under its field
    (aria-invalid, described by its words), not one sentence on top."""
    client.force_login(granted.member)
    body = {
        "name": "Not_A_Name",
        "kind": "jupyter",
        "image": "bad image",
        "resource_class": granted.rc.slug,
        "time_limit_h": "900",
    }
    response = client.post(reverse("workspaces:workspace_list", args=[granted.tenant.slug]), body)
    assert response.status_code == 400 and not Workspace.objects.exists()
    page = html.unescape(response.content.decode())
    for field, error_id, said in (
        ("ws-name", "ws-name-error", "name 'Not_A_Name'"),
        ("ws-image", "ws-image-error", "give an image reference without spaces"),
        ("ws-limit", "ws-limit-error", "out of range: give a time limit between 15 min and 7 d"),
    ):
        tag = re.search(rf'<input id="{field}"[^>]*>', page)
        assert tag and 'aria-invalid="true"' in tag.group(0), field
        assert f'aria-describedby="{error_id}"' in tag.group(0)
        said_at = re.search(rf'<div class="error" id="{error_id}"><p>(.*?)</p></div>', page)
        assert said_at and said in said_at.group(1), field
    assert "Please correct the 3 fields marked below." in page
    assert 'id="ws-class-error"' not in page and 'id="ws-home-error"' not in page


@pytest.mark.django_db
def test_one_bad_field_keeps_its_own_code_and_a_409_is_said_at_its_field(granted, client):
    with pytest.raises(services.InvalidInput) as refused:
        open_one(granted, resource_class="h100-80gb")
    assert refused.value.code == "no_grant" and refused.value.errors.keys() == {"resource_class"}
    with pytest.raises(services.InvalidInput) as both:
        open_one(granted, resource_class="h100-80gb", home_size="5Ti")
    assert both.value.errors.keys() == {"resource_class", "home_size"}
    WorkspacePolicy.objects.create(tenant=granted.tenant, max_per_person=1)
    open_one(granted, name="first")
    client.force_login(granted.member)
    body = {
        "name": "second",
        "kind": "jupyter",
        "image": "quay.io/jupyter/base-notebook",
        "resource_class": granted.rc.slug,
        "time_limit_h": "4",
    }
    response = client.post(reverse("workspaces:workspace_list", args=[granted.tenant.slug]), body)
    page = html.unescape(response.content.decode())
    assert response.status_code == 409
    said_at = re.search(r'<div class="error" id="ws-name-error"><p>(.*?)</p></div>', page)
    assert said_at and "the team's cap is 1 per person" in said_at.group(1)
