"""Ask by need: the shape the portal chooses (pure; its API in test_needs_api.py)."""

import pytest

from catalog import facts
from core.errors import InvalidInput
from scheduler.workloads.submit.needs import shape_for

A100 = facts.get_model("A100-80GB")


def slug(profile: str) -> str:
    return facts.class_slug(A100, "mig", profile)


def test_the_cheapest_shape_that_meets_the_need_when_nothing_is_free():
    assert shape_for(A100, memory_gb=20) == slug("1g.20gb")  # 1 slice, 20 GB
    assert shape_for(A100, compute_slices=3) == slug("3g.40gb")
    assert shape_for(A100, memory_gb=40, compute_slices=4) == slug("4g.40gb")
    assert shape_for(A100, memory_gb=41) in (slug("7g.80gb"), facts.class_slug(A100, "whole"))


def test_a_shape_free_now_wins_over_a_cheaper_one_to_make():
    free = {slug("1g.20gb"): 0, slug("3g.40gb"): 2}
    assert shape_for(A100, memory_gb=20, free=free) == slug("3g.40gb")
    assert shape_for(A100, memory_gb=20, free={slug("2g.20gb"): 1, slug("3g.40gb"): 1}) == slug(
        "2g.20gb"
    )  # both free: the cheaper


def test_media_extension_profiles_are_never_chosen():
    assert "me" not in shape_for(A100, memory_gb=10)


@pytest.mark.parametrize("kwargs", [{}, {"memory_gb": 81}, {"compute_slices": 8}])
def test_a_need_no_shape_meets_is_a_clear_400(kwargs):
    with pytest.raises(InvalidInput) as err:
        shape_for(A100, **kwargs)
    assert err.value.field == "need"
