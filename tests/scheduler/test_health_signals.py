"""The GPU health policy as pure functions: readings, rules, hysteresis, latching."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from scheduler.health import policy
from scheduler.health.policy import OpenEvent, Reading, Rule, Status, Step

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
XID79 = Rule(id=1, signal="xid", action="drain", xid_code=79, waive_billing=True)
XID_ANY = Rule(id=2, signal="xid", action="warn", xid_code=None)
WARM = Rule(
    id=3, signal="gpu_temp", action="warn", threshold=Decimal(85), clear_below=Decimal(80),
    clear_after_s=60,
)  # fmt: skip
HOT = Rule(
    id=4, signal="gpu_temp", action="taint", threshold=Decimal(95), clear_below=Decimal(85),
    auto_recover=True, clear_after_s=600,
)  # fmt: skip
MISSING = Rule(id=5, signal="gpu_missing", action="taint", threshold=Decimal(1))
RULES = [XID79, XID_ANY, WARM, HOT, MISSING]


def temp(value, node="n1", gpu="0") -> Reading:
    return Reading(node, gpu, "GPU-1", "gpu_temp", Decimal(value))


def xid(code, node="n1", gpu="3") -> Reading:
    return Reading(node, gpu, "GPU-3", "xid", Decimal(code))


@pytest.mark.parametrize(
    ("raw", "want"),
    [("79", Decimal(79)), ("1e+00", Decimal(1)), ("NaN", None), ("+Inf", None), ("x", None),
     (None, None), ("9223372036854775794", None)],
)  # fmt: skip
def test_values_prometheus_sends_and_dcgm_blanks(raw, want):
    assert policy.parse_value(raw) == want


def test_an_xid_code_finds_its_own_rule_else_the_catch_all():
    assert policy.xid_rule_for(79, RULES) == XID79
    assert policy.xid_rule_for(13, RULES) == XID_ANY
    assert policy.xid_rule_for(13, [XID79]) is None
    assert policy.status(XID79, xid(79), RULES) is Status.FIRING
    assert policy.status(XID_ANY, xid(79), RULES) is Status.CLEAR  # 79 is not "any other"
    assert policy.status(XID_ANY, xid(13), RULES) is Status.FIRING
    assert policy.status(XID79, xid(0), RULES) is Status.CLEAR


def test_a_threshold_rule_fires_at_the_threshold_and_clears_only_below_clear_below():
    assert policy.status(WARM, temp(85), RULES) is Status.FIRING
    assert policy.status(WARM, temp("84.9"), RULES) is Status.HOLDING
    assert policy.status(WARM, temp(80), RULES) is Status.HOLDING
    assert policy.status(WARM, temp("79.9"), RULES) is Status.CLEAR
    assert policy.status(WARM, None, RULES) is Status.CLEAR


def test_a_warning_opens_once_and_closes_after_a_clear_spell():
    assert policy.step(None, WARM, Status.FIRING, T0) is Step.OPEN
    assert policy.step(None, WARM, Status.HOLDING, T0) is Step.NOTHING
    event = OpenEvent(key=("n1", "0", 3), action="warn", opened_at=T0)
    assert policy.step(event, WARM, Status.FIRING, T0) is Step.FIRING
    assert policy.step(event, WARM, Status.CLEAR, T0) is Step.START_CLEAR
    event.clear_since = T0
    assert policy.step(event, WARM, Status.CLEAR, T0 + timedelta(seconds=59)) is Step.CLEARING
    assert policy.step(event, WARM, Status.CLEAR, T0 + timedelta(seconds=60)) is Step.CLOSE
    # firing again inside the spell forgets it
    assert policy.step(event, WARM, Status.FIRING, T0 + timedelta(seconds=30)) is Step.FIRING


def test_a_flapping_signal_neither_closes_nor_reopens_its_event():
    """Hovering around the threshold (84..86) with a clear level of 80: the event opened at the
    first 86 stays open, and no second one opens, however long it flaps."""
    event = None
    opened = closed = 0
    clear_since = None
    for minute, value in enumerate([86, 84, 86, 84, 85, 83, 86, 84] * 5):
        now = T0 + timedelta(minutes=minute)
        st = policy.status(WARM, temp(value), RULES)
        state = (
            None
            if event is None
            else OpenEvent(("n1", "0", 3), "warn", T0, clear_since=clear_since)
        )
        result = policy.step(state, WARM, st, now)
        if result is Step.OPEN:
            opened += 1
            event = "open"
        elif result is Step.CLOSE:
            closed += 1
            event = None
        elif result is Step.START_CLEAR:
            clear_since = now
        elif result is Step.FIRING:
            clear_since = None
    assert (opened, closed) == (1, 0)


def test_a_taint_waits_for_an_admin_unless_the_rule_recovers_by_itself():
    taint = OpenEvent(("n1", "3", 1), "drain", T0, clear_since=T0)
    later = T0 + timedelta(days=3)
    assert policy.step(taint, XID79, Status.CLEAR, later) is Step.CLEARING
    hot = OpenEvent(("n1", "0", 4), "taint", T0, clear_since=T0)
    assert policy.step(hot, HOT, Status.CLEAR, T0 + timedelta(seconds=599)) is Step.CLEARING
    assert policy.step(hot, HOT, Status.CLEAR, T0 + timedelta(seconds=600)) is Step.CLOSE
    # holding between the levels keeps a begun spell running, but starts none
    assert policy.step(hot, HOT, Status.HOLDING, T0 + timedelta(seconds=10)) is Step.CLEARING
    fresh = OpenEvent(("n1", "0", 4), "taint", T0)
    assert policy.step(fresh, HOT, Status.HOLDING, T0) is Step.NOTHING


def test_an_acknowledged_event_still_firing_is_latched_until_seen_clear():
    acked = OpenEvent(("n1", "3", 1), "drain", T0, closed=True, latched=True)
    assert policy.step(acked, XID79, Status.FIRING, T0) is Step.NOTHING
    assert policy.step(acked, XID79, Status.CLEAR, T0) is Step.UNLATCH
    unlatched = OpenEvent(("n1", "3", 1), "drain", T0, closed=True, latched=False)
    assert policy.step(unlatched, XID79, Status.FIRING, T0) is Step.NOTHING  # caller drops it


def test_a_node_without_dcgm_series_is_unknown_and_a_vanished_gpu_reads_clear():
    found = policy.evaluate([xid(79, node="n1", gpu="3")], RULES, {"n2": {"1"}, "n1": {"5"}})
    assert ("n1", "3", XID79.id) in found.statuses
    assert found.statuses[("n1", "3", XID79.id)] is Status.FIRING
    assert found.statuses[("n1", "5", XID79.id)] is Status.CLEAR  # series gone: clear
    assert not any(key[0] == "n2" for key in found.statuses)  # never read: unknown
    assert found.nodes_read == {"n1"}
    assert found.readings[("n1", "3", XID79.id)].value == 79


def test_node_wide_rules_read_the_node_and_gpu_rules_its_gpus():
    missing = Reading("n1", "", "", "gpu_missing", Decimal(1))
    found = policy.evaluate([missing], RULES, {})
    assert found.statuses == {("n1", "", MISSING.id): Status.FIRING}
    assert found.nodes_read == set()  # no DCGM series: the GPUs' health stays unknown


@pytest.mark.parametrize(
    ("labels", "allocatable", "want"),
    [
        ({"nvidia.com/gpu.count": "8", "nvidia.com/mig.config": "all-disabled"},
         {"nvidia.com/gpu": 7}, 1),
        ({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": 8}, 0),
        ({"nvidia.com/gpu.count": "8", "nvidia.com/mig.config": "all-1g.10gb"},
         {"nvidia.com/mig-1g.10gb": 56}, None),
        ({"nvidia.com/gpu.count": "8", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
         {"nvidia.com/gpu": 32}, None),
        ({"nvidia.com/gpu.count": "x"}, {}, None),
        ({}, {}, None),
    ],
)  # fmt: skip
def test_gpus_missing_from_a_whole_gpu_nodes_allocatable(labels, allocatable, want):
    assert policy.missing_gpus(labels, allocatable) == want


def test_what_people_read():
    assert policy.describe(XID79, xid(79)) == "XID 79 (GPU has fallen off the bus)"
    assert policy.describe(XID_ANY, xid(31)) == "XID 31 (GPU memory page fault)"
    assert policy.describe(XID_ANY, xid(7)) == "XID 7"
    assert policy.describe(WARM, temp("86.50")) == "GPU temperature 86.5 °C"
    assert policy.where("n1", "3") == "GPU 3 on node n1"
    assert policy.where("n1", "") == "node n1"


def test_the_default_policy_names_each_xid_once_drains_on_hardware_faults_and_can_clear():
    rules = policy.default_rules()
    codes = [r["xid_code"] for r in rules if r["signal"] == "xid"]
    assert len(codes) == len(set(codes)) and None in codes
    by_code = {r["xid_code"]: r["action"] for r in rules if r["signal"] == "xid"}
    assert {by_code[c] for c in (48, 79, 95, 119, 120)} == {"drain"}
    assert by_code[94] == "taint" and by_code[None] == "warn"
    for rule in rules:
        if rule["signal"] != "xid":
            assert rule["clear_below"] <= rule["threshold"], rule
        assert rule["action"] in policy.ACTIONS and rule["signal"] in policy.SIGNALS
