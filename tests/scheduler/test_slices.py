"""Grants in GPU-equivalent slices as pure functions: what each unit counts, Kueue's
transformations, one queue line per model, the namespace backstop, and the rendered queue."""

from decimal import Decimal

import pytest

from catalog import slices
from catalog.models import Pool, ResourceClass
from scheduler.cluster.reconcile.specs import backstop_quota, queue_lines
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.specs import QueueLine, TenantSpec


def rc(pk, kind, profile="", model="A100-80GB", name=None, fraction="1"):
    names = {"whole": "nvidia.com/gpu", "shared": "nvidia.com/gpu.shared"}
    return ResourceClass(
        pk=pk,
        slug=f"{model.lower()}-{kind}-{profile}",
        gpu_model=model,
        kind=kind,
        profile=profile,
        resource_name=name or names.get(kind) or f"nvidia.com/mig-{profile}",
        gpu_fraction=Decimal(fraction),
        memory_gb=10,
        active=True,
    )


WHOLE = rc(1, "whole")
ONE_G = rc(2, "mig", "1g.10gb", fraction="0.1429")
THREE_G = rc(3, "mig", "3g.40gb", fraction="0.4286")
CLASSES = {c.pk: c for c in (WHOLE, ONE_G, THREE_G)}


def pools(limit):
    return {pk: Pool(resource_class_id=pk, borrowing_limit=limit, capacity=8) for pk in CLASSES}


@pytest.mark.parametrize(
    ("unit", "want"),
    [
        (WHOLE, 7),
        (ONE_G, 1),
        (THREE_G, 3),
        (rc(9, "mig", "4g.40gb", fraction="0.5714"), 4),
        # an A30 has 4 compute slices: its 1g is 1.75 of a 7-slice GPU, counted 2
        (rc(9, "mig", "1g.6gb", model="A30-24GB", fraction="0.25"), 2),
        (rc(9, "shared", fraction="0.25"), 2),
    ],
)
def test_what_one_unit_counts(unit, want):
    assert slices.slices_per_unit(unit) == want


def test_kueue_replaces_every_gpu_resource_by_its_slices():
    by_input = {t["input"]: t for t in slices.kueue_transformations()}
    assert by_input["nvidia.com/gpu"]["outputs"] == {slices.SLICE_RESOURCE: "7"}
    assert by_input["nvidia.com/mig-4g.40gb"]["outputs"] == {slices.SLICE_RESOURCE: "4"}
    assert by_input["nvidia.com/mig-1g.10gb"]["outputs"] == {slices.SLICE_RESOURCE: "1"}
    assert by_input["nvidia.com/gpu.shared"]["outputs"] == {slices.SLICE_RESOURCE: "2"}
    assert {t["strategy"] for t in by_input.values()} == {"Replace"}


def test_a_models_classes_fold_into_one_line_of_slices():
    granted = {ONE_G.pk: 7, WHOLE.pk: 1}
    (line,) = queue_lines(CLASSES, pools(None), granted, unit=slices.UNIT_SLICES)
    assert line == QueueLine("a100-80gb", slices.SLICE_RESOURCE, 14, None, True)
    # a limit in units of a class is that many of its slices; the widest wins
    limits = {WHOLE.pk: 1, ONE_G.pk: 2, THREE_G.pk: 4}
    by_class = {pk: Pool(resource_class_id=pk, borrowing_limit=n) for pk, n in limits.items()}
    (line,) = queue_lines(CLASSES, by_class, granted, unit=slices.UNIT_SLICES)
    assert line.borrowing_limit == 12  # 4 x 3g


def test_per_class_lines_stay_when_the_unit_is_the_class():
    lines = queue_lines(CLASSES, pools(0), {ONE_G.pk: 7}, unit=slices.UNIT_CLASS)
    assert [(x.resource_name, x.nominal) for x in lines] == [
        ("nvidia.com/gpu", 0),
        ("nvidia.com/mig-1g.10gb", 7),
        ("nvidia.com/mig-3g.40gb", 0),
    ]


def test_the_backstop_allows_each_unit_as_many_times_as_the_slices_hold():
    line = QueueLine("a100-80gb", slices.SLICE_RESOURCE, 14, 0)
    hard = backstop_quota((line,), CLASSES, {}, unit=slices.UNIT_SLICES)
    assert hard == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}
    # no borrowing limit: at most what the rest of the cohort was granted (28 - 14 here)
    line = QueueLine("a100-80gb", slices.SLICE_RESOURCE, 14, None)
    cohort = {("a100-80gb", slices.SLICE_RESOURCE): 28}
    hard = backstop_quota((line,), CLASSES, cohort, unit=slices.UNIT_SLICES)
    assert hard == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 28, "nvidia.com/mig-3g.40gb": 9}


def test_no_grant_of_a_model_and_no_limit_lists_no_line():
    """Lending is on and borrowing unlimited by default, but a team borrows only models it
    holds a grant of (or a pool's explicit limit allows)."""
    line = QueueLine("a100-80gb", slices.SLICE_RESOURCE, 0, None)
    spec = TenantSpec(
        slug="t", name="t", active=True, gpu_quota={}, gpu_resource_names=(), queue_lines=(line,)
    )
    groups = render_cluster_queue(spec, "ns")["spec"]["resourceGroups"]
    assert len(groups) == 1  # cpu and memory only
    assert backstop_quota((line,), CLASSES, {}, unit=slices.UNIT_SLICES) == {}


def test_an_unlimited_line_has_no_borrowing_limit_and_the_queue_a_weight():
    line = QueueLine("a100-80gb", slices.SLICE_RESOURCE, 7, None)
    spec = TenantSpec(
        slug="t",
        name="t",
        active=True,
        gpu_quota={},
        gpu_resource_names=(),
        queue_lines=(line,),
        fair_share_weight="2.5",
    )
    cq = render_cluster_queue(spec, "ns")["spec"]
    (flavor,) = cq["resourceGroups"][1]["flavors"]
    assert flavor["resources"] == [{"name": slices.SLICE_RESOURCE, "nominalQuota": "7"}]
    assert cq["fairSharing"] == {"weight": "2.5"}


def test_slices_in_words():
    assert slices.describe(16) == "2 GPUs + 2 slices"
    assert slices.describe(7) == "1 GPU"
    assert slices.describe(3) == "3 slices"
    assert slices.describe(0) == "0 slices"
