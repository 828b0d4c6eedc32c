"""The demo's made-up GPU utilisation (pure): steady per pod, steerable by an annotation."""

from decimal import Decimal

from demo.metrics import DEMO_UTIL_ANNOTATION, demo_util


def pod(name, annotations=None):
    return {"metadata": {"name": name, "annotations": annotations or {}}}


def test_a_pods_level_is_steady_and_some_pods_sit_idle_while_others_are_busy():
    levels = {demo_util(pod(f"serve-{n}")) for n in range(40)}
    assert demo_util(pod("serve-1")) == demo_util(pod("serve-1"))
    assert min(levels) <= Decimal("0.15") and max(levels) >= Decimal("0.8")


def test_an_annotation_steers_it_and_nonsense_is_ignored():
    assert demo_util(pod("x", {DEMO_UTIL_ANNOTATION: "0.9"})) == Decimal("0.9")
    steady = demo_util(pod("x"))
    for bad in ("2", "-1", "lots", "NaN"):
        assert demo_util(pod("x", {DEMO_UTIL_ANNOTATION: bad})) == steady
