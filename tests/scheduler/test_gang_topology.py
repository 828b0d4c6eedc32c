"""A gang's pods in one rack (or block), without the cluster: the ask parsed against the levels
the settings name, the pod affinity the Job's pods get, the rack arithmetic and the 400s before
anything reaches the cluster, and each pod's rack on the workload page. The cluster side is
test_gang_cluster.py."""

from dataclasses import replace

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from scheduler.cluster.models import Cluster, Node
from scheduler.workloads.kinds import topology
from scheduler.workloads.kinds.from_row import spec_for
from scheduler.workloads.kinds.manifests import render_job
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle.pods import node_places, pod_rows
from tenants.services import grants as grant_services
from tests.portal.api.conftest import session
from tests.scheduler.test_workloads import SPEC, submit

LEVELS = {"block": "example.com/block", "rack": "example.com/rack"}
RACK = "example.com/rack"


def test_the_ask_is_a_level_the_cluster_names_and_a_mode():
    assert topology.parse("", LEVELS) is None
    assert topology.parse("none", LEVELS) is None
    assert topology.parse("rack-required", LEVELS) == topology.Placement("rack", RACK, True)
    assert topology.parse("block-preferred", LEVELS) == topology.Placement(
        "block", "example.com/block", False
    )
    with pytest.raises(ValueError, match="'row-required' is not one of: none, block-required"):
        topology.parse("row-required", LEVELS)
    with pytest.raises(ValueError, match="not one of"):
        topology.parse("rack-always", LEVELS)
    with pytest.raises(ValueError, match="this cluster names no levels"):
        topology.parse("rack-required", {})


def test_a_gang_asking_one_rack_gets_pod_affinity_to_its_own_pods_by_the_rack_label():
    gang = replace(SPEC, replicas=2, topology_key=RACK, topology_required=True)
    pod = render_job(gang)["spec"]["template"]["spec"]
    term = {"labelSelector": {"matchLabels": {WORKLOAD_LABEL: "12"}}, "topologyKey": RACK}
    assert pod["affinity"]["podAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [term]
    }
    near = render_job(replace(gang, topology_required=False))["spec"]["template"]["spec"]
    assert near["affinity"]["podAffinity"] == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}
        ]
    }
    anywhere = render_job(replace(SPEC, replicas=2))["spec"]["template"]["spec"]
    assert "affinity" not in anywhere


def test_how_many_pods_each_rack_holds_and_why_a_gang_cannot_share_one():
    nodes = [
        ({RACK: "r1"}, {"nvidia.com/gpu": 8}),
        ({RACK: "r1"}, {"nvidia.com/gpu": 8}),
        ({RACK: "r2"}, {"nvidia.com/gpu": 8}),
        ({}, {"nvidia.com/gpu": 8}),  # no rack label: in no rack
    ]
    capacity = topology.domain_capacity(nodes, RACK, {"nvidia.com/gpu": 8})
    assert capacity == {"r1": 2, "r2": 1}
    assert topology.domain_capacity(nodes, RACK, {"nvidia.com/gpu": 3}) == {"r1": 4, "r2": 2}
    required = topology.Placement("rack", RACK, True)
    assert topology.domain_refusal(required, 2, capacity, "H100-80GB") is None
    said = topology.domain_refusal(required, 3, capacity, "H100-80GB")
    assert said == (
        "3 pods must share one rack, but the largest H100-80GB rack (r1) holds 2 pods of this "
        "shape: ask for at most 2 pods, a smaller shape, or rack-preferred"
    )
    preferred = topology.Placement("rack", RACK, False)
    assert topology.domain_refusal(preferred, 3, capacity, "H100-80GB") is None
    assert "no H100-80GB node carries the rack label" in topology.domain_refusal(
        required, 2, {}, "H100-80GB"
    )


def test_each_pod_shows_its_nodes_block_and_rack():
    pods = [
        {"metadata": {"name": "p-1"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "p-0"}, "spec": {}, "status": {"phase": "Pending"}},
    ]
    rows = pod_rows(pods, {"n1": "block-a / rack-a1"})
    assert [(r.name, r.place) for r in rows] == [("p-0", ""), ("p-1", "block-a / rack-a1")]
    labels = {"example.com/block": "block-a", RACK: "rack-a1", "other": "x"}
    assert topology.domain_of(labels, LEVELS) == "block-a / rack-a1"
    assert topology.domain_of({}, LEVELS) == ""


# --- admission: world's class, 3 units granted, pool of 10; two racks of 2 pods' room each ------


@pytest.fixture
def racked(world, settings):
    settings.GPU_TOPOLOGY_LEVELS = LEVELS
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=3
    )
    cluster = Cluster.objects.create(name="racks")
    for i, rack in enumerate(["r1", "r2"]):
        Node.objects.create(
            cluster=cluster,
            name=f"n{i}",
            gpu_model=world.rc.gpu_model,
            labels={"example.com/block": "b1", RACK: rack},
            allocatable={world.rc.resource_name: 2},
            last_seen_at=timezone.now(),
        )
    return world


@pytest.mark.django_db
def test_a_gang_may_ask_one_rack_and_its_job_carries_it(racked):
    w = submit(racked, name="ddp", pods=2, topology="rack-required")
    assert w.topology == "rack-required"
    spec = spec_for(w)
    assert (spec.topology_key, spec.topology_required) == (RACK, True)
    assert node_places({"n0", "n1", ""}) == {"n0": "b1 / r1", "n1": "b1 / r2"}
    near = submit(racked, name="near", pods=3, topology="rack-preferred")  # spans racks: fine
    assert near.topology == "rack-preferred"


@pytest.mark.django_db
def test_a_rack_ask_no_rack_could_ever_hold_or_that_names_no_level_is_bad_input(racked):
    with pytest.raises(InvalidInput) as exc:
        submit(racked, name="wide", pods=3, topology="rack-required")
    assert (exc.value.field, exc.value.code) == ("topology", "topology_too_small")
    assert "the largest" in exc.value.detail and "holds 2 pods" in exc.value.detail
    with pytest.raises(InvalidInput) as exc:
        submit(racked, name="row", pods=2, topology="row-required")
    assert (exc.value.field, exc.value.code) == ("topology", "unknown_topology")
    with pytest.raises(InvalidInput, match="ask for 2 or more pods"):
        submit(racked, name="solo", topology="rack-required")
    assert not submit(racked, name="plain", pods=3).topology


@pytest.mark.django_db
def test_the_api_takes_topology_and_refuses_what_cannot_be(racked):
    client = session(racked.member)
    body = {
        "tenant": "team-a",
        "name": "ddp",
        "kind": "job",
        "image": "busybox:1.36",
        "resources": {racked.rc.slug: 1},
        "priority": "gpu-low",
        "pods": 2,
        "topology": "rack-required",
    }
    created = client.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.data
    assert created.data["topology"] == "rack-required"
    wide = client.post("/api/v1/workloads/", {**body, "name": "w", "pods": 3}, format="json")
    assert (wide.status_code, wide.data["code"]) == (400, "topology_too_small")
    bad = client.post(
        "/api/v1/workloads/", {**body, "name": "b", "topology": "row-x"}, format="json"
    )
    assert (bad.status_code, bad.data["code"]) == (400, "unknown_topology")
    listed = client.get("/api/v1/workloads/").data["results"]
    assert [w["name"] for w in listed] == ["ddp"]


def test_the_inventory_keeps_a_nodes_topology_labels_and_no_other_foreign_one():
    from scheduler.cluster import node_offers

    node = {
        "metadata": {"name": "n", "labels": {RACK: "r1", "team": "x", "nvidia.com/gpu.count": "8"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    kept = node_offers.parse_node(node, {}, set(LEVELS.values())).labels
    assert kept == {RACK: "r1", "nvidia.com/gpu.count": "8"}
    assert RACK not in node_offers.parse_node(node, {}).labels


def test_a_preempted_gangs_message_says_every_pod_stopped():
    from scheduler.workloads.kinds import gang

    said = gang.evicted_whole(4, "Preempted to accommodate a workload; queued again")
    assert said == (
        "the whole gang of 4 pods was evicted together (Kueue preempts it as one): "
        "Preempted to accommodate a workload; queued again"
    )


@pytest.mark.django_db
def test_the_browser_form_takes_topology_and_keeps_the_form_on_a_bad_one(racked):
    from django.test import Client

    client = Client()
    client.force_login(racked.member)
    form = {
        "name": "ddp",
        "kind": "job",
        "image": "busybox:1.36",
        "resource_class": racked.rc.slug,
        "units": 1,
        "priority": "gpu-low",
        "replicas": 1,
        "pods": 2,
        "backoff_limit": 0,
        "topology": "rack-required",
    }
    answer = client.post("/teams/team-a/workloads/new/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    w = racked.tenant.workloads.get(name="ddp")
    assert w.topology == "rack-required"
    page = client.get(f"/workloads/{w.pk}/").content.decode()
    assert (
        "a gang of 2 pods: admitted together, running only when every pod is placed, stopped "
        "together (rack-required)" in page
    )
    bad = client.post("/teams/team-a/workloads/new/", {**form, "name": "x", "topology": "row-1"})
    assert bad.status_code == 200 and "is not one of: none, block-required" in bad.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_cli_asks_for_one_rack_with_same_rack(racked, live_server):
    from click.testing import CliRunner

    from cli.main import cli
    from tenants.services import tokens as token_services

    _, raw = token_services.issue_token(
        actor=racked.member, user=racked.member, name="cli", scopes=["read", "submit"]
    )
    env = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": raw}
    base = ["submit", "--tenant", "team-a", "--kind", "job", "--image", "busybox:1.36"]
    gpu = ["--gpu", f"{racked.rc.slug}=1", "--priority", "gpu-low"]
    done = CliRunner().invoke(
        cli, [*base, "--name", "ddp", *gpu, "--pods", "2", "--same-rack"], env=env
    )
    assert done.exit_code == 0, done.output
    assert racked.tenant.workloads.get(name="ddp").topology == "rack-required"
    wide = CliRunner().invoke(
        cli, [*base, "--name", "w", *gpu, "--pods", "3", "--same-rack"], env=env
    )
    assert wide.exit_code != 0 and "must share one rack" in wide.output


@pytest.mark.django_db
def test_the_capacity_map_names_each_nodes_block_and_rack(client, world, settings):
    from tests.scheduler.factories import NodeFactory

    settings.GPU_TOPOLOGY_LEVELS = LEVELS
    NodeFactory(
        name="gpu-a100-0",
        allocatable={"nvidia.com/gpu": 2},
        labels={"example.com/block": "block-a", RACK: "rack-a1"},
    )
    client.force_login(world.admin)
    body = client.get("/console/capacity/").content.decode()
    assert "gpu-a100-0</strong> · block-a / rack-a1 ·" in body
