"""One vocabulary and honest charts (pure functions, no database)."""

from datetime import date

from metering.views import chart_figures, next_month_link
from tenants.display import readable

NAMES = {
    "a100-80gb-mig-1g.10gb": "A100-80GB MIG 1g.10gb",
    "a100-80gb-mig-1g.10gb.me": "A100-80GB MIG 1g.10gb+me",
    "a100-80gb": "A100-80GB whole GPU",
}


def test_slugs_in_sentences_read_as_display_names():
    text = "a100-80gb-mig-1g.10gb.me: no auto-approval for this class; a100-80gb-mig-1g.10gb: 3 > 2"
    assert readable(text, NAMES) == (
        "A100-80GB MIG 1g.10gb+me: no auto-approval for this class; A100-80GB MIG 1g.10gb: 3 > 2"
    )
    assert readable("ask for a100-80gb.", NAMES) == "ask for A100-80GB whole GPU."
    assert readable("team-a100-80gb-x", NAMES) == "team-a100-80gb-x"  # not inside other words


def test_no_link_to_a_month_still_to_come():
    assert next_month_link(date(2026, 3, 1), current=date(2026, 3, 1)) is None
    assert next_month_link(date(2026, 2, 1), current=date(2026, 3, 1)) == date(2026, 3, 1)
    assert next_month_link(date(2025, 12, 1), current=date(2026, 3, 1)) == date(2026, 1, 1)


def test_a_chart_with_one_point_says_so():
    series = {
        "a100-80gb": {"t": ["2026-03-02T09:00:00+00:00"], "held": [2.0]},
        "a100-80gb-mig-1g.10gb": {"t": ["a", "b"], "held": [1.0, 2.0]},
    }
    one, two = chart_figures(series, "hour", NAMES)
    assert one["name"] == "A100-80GB whole GPU"
    assert one["note"] == "Only 1 hour of data so far: the chart draws a line from two hours on."
    assert two["note"] == "" and two["points"] == 2
