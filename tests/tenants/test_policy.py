"""The auto-approval policy as a pure function."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from tenants.policy import AskedItem, Envelope, evaluate, gpu_equivalents

T0 = datetime(2026, 12, 1, tzinfo=UTC)
ENVELOPES = {"mig-1g": Envelope(max_amount=2, max_duration_hours=72)}


def item(amount, cls="mig-1g", fraction="0.1429"):
    return AskedItem(cls, amount, Decimal(fraction))


def test_inside_the_envelope_is_auto_approved():
    d = evaluate(
        [item(2)], starts_at=T0, ends_at=T0 + timedelta(hours=72), envelopes=ENVELOPES, held={}
    )
    assert d.auto_approve and d.reasons == []


def test_too_many_units_goes_to_the_platform_team_with_a_reason():
    d = evaluate(
        [item(3)], starts_at=T0, ends_at=T0 + timedelta(hours=1), envelopes=ENVELOPES, held={}
    )
    assert not d.auto_approve
    assert d.reasons == ["mig-1g: 3 is more than the 2 approved automatically"]


def test_too_long_and_open_ended_are_not_auto_approved():
    long = evaluate(
        [item(1)], starts_at=T0, ends_at=T0 + timedelta(hours=73), envelopes=ENVELOPES, held={}
    )
    assert long.reasons == ["mig-1g: 73 h is longer than the 72 h approved automatically"]
    open_ended = evaluate([item(1)], starts_at=T0, ends_at=None, envelopes=ENVELOPES, held={})
    assert open_ended.reasons == ["mig-1g: open-ended asks need a platform admin"]


def test_a_class_without_an_envelope_is_never_auto_approved():
    d = evaluate(
        [item(1), item(1, "h200")],
        starts_at=T0,
        ends_at=T0 + timedelta(hours=1),
        envelopes=ENVELOPES,
        held={},
    )
    assert d.reasons == ["h200: no auto-approval for this class"]


def test_every_item_must_fit_and_all_reasons_are_given():
    d = evaluate(
        [item(5), item(1, "h200")], starts_at=T0, ends_at=None, envelopes=ENVELOPES, held={}
    )
    assert len(d.reasons) == 3


def test_what_the_team_holds_through_auto_approval_counts_against_the_envelope():
    """Two asks of 1 where the envelope is 2 fit; a third does not: the envelope bounds the sum."""
    ends = T0 + timedelta(hours=1)
    fits = evaluate([item(1)], starts_at=T0, ends_at=ends, envelopes=ENVELOPES, held={"mig-1g": 1})
    assert fits.auto_approve
    over = evaluate([item(1)], starts_at=T0, ends_at=ends, envelopes=ENVELOPES, held={"mig-1g": 2})
    assert not over.auto_approve
    assert over.reasons == [
        "mig-1g: the team holds 2 approved automatically already; 1 more makes 3, more than "
        "the 2 approved automatically"
    ]


def test_what_is_held_of_another_class_does_not_count():
    d = evaluate(
        [item(2)],
        starts_at=T0,
        ends_at=T0 + timedelta(hours=1),
        envelopes=ENVELOPES,
        held={"h200": 5},
    )
    assert d.auto_approve


def test_gpu_equivalents():
    assert gpu_equivalents([item(7, fraction="0.1429"), item(2, "x", "1")]) == Decimal("3.0003")
