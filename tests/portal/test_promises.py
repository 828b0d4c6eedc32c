"""Quota against what exists (issue 35, 5): pure."""

from catalog.models import ResourceClass
from portal.promises import promise
from tenants.selectors import QuotaLine


def line(granted: int, in_use: int) -> QuotaLine:
    return QuotaLine(ResourceClass(slug="a100-80gb-mig-1g.10gb"), granted, in_use)


def test_an_overcommitted_quota_says_what_exists_and_what_is_free_now():
    said = promise(line(14, 0), capacity=7, held_by_all=4)
    assert said.words == "14 promised, 7 exist, 3 free now"


def test_free_now_is_never_more_than_the_unused_quota_nor_below_zero():
    assert promise(line(4, 3), capacity=10, held_by_all=3).free_now == 1
    assert promise(line(4, 0), capacity=2, held_by_all=5).free_now == 0
    assert promise(line(0, 0), capacity=0, held_by_all=0).words == "0 promised, 0 exist, 0 free now"
