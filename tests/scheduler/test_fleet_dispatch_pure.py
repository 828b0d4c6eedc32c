"""Placements as written and what they mean on a fleet, without a database: the spelling and
its words, the workers each may run on in the platform's order, the one dispatch target per
placement in use, and a team's ClusterQueue on the manager carrying its check (or, at home or
on a worker, none)."""

from dataclasses import replace

import pytest
from django.conf import settings

from scheduler.cluster.dispatch import FleetPlan
from scheduler.cluster.models import Cluster
from scheduler.cluster.render.labels import HASH_ANNOTATION
from scheduler.cluster.render.specs import TenantSpec
from scheduler.cluster.render.tenant import render_tenant
from tenants import placement


def _worker(name, group="", preference=100, namespace="kueue-system") -> Cluster:
    return Cluster(
        name=name,
        role=Cluster.Role.WORKER,
        group=group,
        preference=preference,
        credentials_secret_namespace=namespace,
        credentials_secret_name=f"{name}-kubeconfig",
    )


@pytest.mark.parametrize(
    ("value", "kind", "name", "words"),
    [
        ("", "home", "", "the portal's own cluster"),
        ("  ", "home", "", "the portal's own cluster"),
        ("cluster:east", "cluster", "east", "worker east"),
        ("group:burst-1", "group", "burst-1", "any worker of group burst-1"),
    ],
)
def test_a_placement_is_read_and_said(value, kind, name, words):
    where = placement.parse(value)
    assert (where.kind, where.name) == (kind, name)
    assert str(where) == value.strip()
    assert placement.describe(value) == words


@pytest.mark.parametrize(
    "value", ["east", "cluster:", "group:Burst", "zone:x", "cluster:a b", "group:" + "x" * 41]
)
def test_a_bad_placement_says_how_to_write_one(value):
    with pytest.raises(placement.BadPlacement, match="`cluster:<worker>`.*`group:<group>`"):
        placement.parse(value)


def test_a_group_runs_on_its_workers_in_the_platform_order_and_one_worker_on_itself():
    plan = FleetPlan(
        workers={
            w.name: w
            for w in (
                _worker("west", "burst", preference=20),
                _worker("east", "burst", preference=10),
                _worker("apac", "burst", preference=10),
                _worker("solo"),
            )
        },
        placements={1: "group:burst", 2: "cluster:solo", 3: "group:burst"},
    )
    assert [w.name for w in plan.workers_of("group:burst")] == ["apac", "east", "west"]
    assert [w.name for w in plan.workers_of("cluster:solo")] == ["solo"]
    assert plan.workers_of("") == [] and plan.check_of("") == ""
    instance = settings.PORTAL_INSTANCE
    assert plan.check_of("group:burst") == f"gpu-portal-{instance}-group-burst"
    assert plan.check_of("cluster:solo") == f"gpu-portal-{instance}-on-solo"
    targets = plan.targets()
    assert [t.name for t in targets] == sorted(
        [plan.check_of("group:burst"), plan.check_of("cluster:solo")]
    )
    by_name = {t.name: [w.name for w in t.workers] for t in targets}
    assert by_name[plan.check_of("group:burst")] == ["apac", "east", "west"]
    assert plan.tenants_on("east") == {1, 3} and plan.tenants_on("solo") == {2}
    assert plan.copies() == []  # every Secret is in Kueue's namespace already


def test_a_placement_with_no_worker_left_carries_no_check():
    plan = FleetPlan(workers={"east": _worker("east", "burst")}, placements={1: "group:gone"})
    assert plan.check_of("group:gone") == "" and plan.targets() == []


def test_a_secret_kept_elsewhere_is_copied_where_multikueue_reads_it():
    plan = FleetPlan(
        workers={"east": _worker("east", namespace="platform")}, placements={1: "cluster:east"}
    )
    (target,) = plan.targets()
    assert target.workers[0].secret == f"gpu-portal-{settings.PORTAL_INSTANCE}-east-kubeconfig"
    assert [w.name for w in plan.copies()] == ["east"]


def test_the_managers_queue_carries_the_check_and_a_workers_does_not():
    spec = TenantSpec(slug="team-a", name="A", active=True, gpu_quota={}, gpu_resource_names=())
    at_home = {o["kind"]: o for o in render_tenant(spec)}["ClusterQueue"]
    assert "admissionChecksStrategy" not in at_home["spec"]
    placed = replace(spec, dispatch_check="gpu-portal-default-group-burst")
    on_manager = {o["kind"]: o for o in render_tenant(placed)}["ClusterQueue"]
    assert on_manager["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "gpu-portal-default-group-burst"}]
    }
    # the hash follows the content: the reconcile sees the change and applies it
    hash_key = HASH_ANNOTATION
    assert (
        on_manager["metadata"]["annotations"][hash_key]
        != at_home["metadata"]["annotations"][hash_key]
    )


def test_on_a_worker_every_member_only_looks_and_the_queue_has_no_check():
    from scheduler.cluster.reconcile.workers import worker_spec
    from scheduler.cluster.render.specs import Member

    spec = TenantSpec(
        slug="team-a",
        name="A",
        active=True,
        gpu_quota={},
        gpu_resource_names=(),
        members=(Member("ann", "owner"), Member("bob", "member"), Member("cy", "viewer")),
        provider_groups=(("ml", "member"),),
        dispatch_check="gpu-portal-default-group-burst",
    )
    there = worker_spec(spec)
    assert there.dispatch_check == "" and {m.role for m in there.members} == {"viewer"}
    assert there.provider_groups == (("ml", "viewer"),)
    roles = {b["roleRef"]["name"] for b in render_tenant(there) if b["kind"] == "RoleBinding"}
    assert "gpu-portal-workloads" not in roles
