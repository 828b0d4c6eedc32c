"""Idle GPUs given back: the pure decision and the policy's checks (issue 30, item 3)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from catalog.idle_policy import IdlePolicy, check_idle_policy, strictest
from core.errors import InvalidInput
from scheduler.workloads.lifecycle.idle import Action, IdleFacts, decide

pytestmark = pytest.mark.pure

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
POLICY = IdlePolicy(threshold_pct=5, warn_after_s=1800, suspend_after_s=2700, protect_s=900)
GAP = 180  # three looks a minute apart
IDLE, BUSY = Decimal("0.02"), Decimal("0.40")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def run(minutes_list, use=IDLE, policy=POLICY, started=T0, exempt=""):
    """Looks at the given minutes, carrying what each recorded to the next, as the pass does."""
    since = seen = warned = None
    steps = []
    for m in minutes_list:
        u = use(m) if callable(use) else use
        step = decide(
            policy,
            IdleFacts(started, u, since, seen, warned, exempt),
            at(m),
            max_gap_s=GAP,
        )
        steps.append(step)
        if step.action == Action.CLEAR:
            since = seen = warned = None
        elif step.action in (Action.TRACK, Action.WARN):
            since, seen = step.idle_since, at(m)
            if step.action == Action.WARN:
                warned = at(m)
        elif step.action == Action.SUSPEND:
            break
    return steps


def test_an_idle_workload_is_warned_then_suspended_after_the_policys_times():
    steps = run(range(15, 62))  # a look a minute from the end of the protection window
    actions = [s.action for s in steps]
    assert actions[0] == Action.TRACK and steps[0].idle_since == at(15)
    warn = actions.index(Action.WARN)
    assert 15 + warn == 45  # 30 min idle
    assert "30 min below 5 % GPU use: it will be suspended after 15 min more" in steps[warn].why
    assert actions[-1] == Action.SUSPEND and 15 + len(steps) - 1 == 60  # 45 min idle
    assert steps[-1].why == "suspended after 45 min below 5 % GPU use"
    assert actions.count(Action.WARN) == 1


def test_a_busy_workload_is_never_touched():
    assert {s.action for s in run(range(0, 600), use=BUSY)} == {Action.NONE}


def test_use_at_the_threshold_is_busy_and_forgets_a_warning():
    use = lambda m: IDLE if m < 50 else Decimal("0.05")  # noqa: E731
    steps = run(range(15, 120), use=use)
    actions = [s.action for s in steps]
    assert Action.WARN in actions and Action.SUSPEND not in actions
    assert actions[50 - 15] == Action.CLEAR and set(actions[51 - 15 :]) == {Action.NONE}


def test_no_data_never_suspends_and_a_gap_starts_the_clock_again():
    steps = run(range(15, 400), use=None)
    assert {s.action for s in steps} == {Action.NONE}
    # idle, then 10 min without data (Prometheus or the worker down), then idle again: the
    # clock starts over at the first look after the gap, nothing is suspended early
    use = lambda m: None if 40 <= m < 50 else IDLE  # noqa: E731
    steps = run(range(15, 120), use=use)
    actions = [s.action for s in steps]
    assert steps[50 - 15].action == Action.TRACK and steps[50 - 15].idle_since == at(50)
    assert 15 + actions.index(Action.WARN) == 80
    assert 15 + actions.index(Action.SUSPEND) == 95


def test_the_protection_window_and_exemptions_hold():
    assert {s.action for s in run(range(0, 15))} == {Action.NONE}  # within 15 min of the start
    assert {s.action for s in run(range(0, 300), exempt="priority gpu-critical")} == {Action.NONE}
    assert {s.action for s in run(range(0, 300), policy=None)} == {Action.NONE}
    # exempted or protected while tracked: the clock is forgotten
    step = decide(
        POLICY,
        IdleFacts(T0, IDLE, at(20), at(29), None, exempt="label gpu-portal.io/idle-exempt"),
        at(30),
        max_gap_s=GAP,
    )
    assert step.action == Action.CLEAR


def test_a_late_warning_still_gives_the_promised_notice():
    # warned only at 50 min idle (the worker was away): suspended 15 min later, not at once
    facts = IdleFacts(T0, IDLE, at(0), at(49), at(50))
    assert decide(POLICY, facts, at(60), max_gap_s=GAP).action == Action.TRACK
    facts = IdleFacts(T0, IDLE, at(0), at(64), at(50))
    assert decide(POLICY, facts, at(65), max_gap_s=GAP).action == Action.SUSPEND


def test_a_run_twice_decides_the_same():
    facts = IdleFacts(T0, IDLE, at(15), at(59), at(45))
    assert decide(POLICY, facts, at(60), max_gap_s=GAP) == decide(
        POLICY, facts, at(60), max_gap_s=GAP
    )


@pytest.mark.parametrize(
    ("values", "field", "said"),
    [
        ((101, 1800, 2700, 900), "idle_threshold_pct", "from 1 to 100"),
        ((0, 1800, 2700, 900), "idle_threshold_pct", "from 1 to 100"),
        ((5, -60, 2700, 900), "idle_warn_after_s", "whole seconds from 60"),
        ((5, 1800, -1, 900), "idle_suspend_after_s", "whole seconds from 60"),
        ((5, 1800, 2700, -5), "idle_protect_s", "whole seconds from 0"),
        ((5, 1800, 1800, 0), "idle_suspend_after_s", "must be longer than idle_warn_after_s"),
        ((5, 1800, 10**9, 0), "idle_suspend_after_s", "to 604800"),
        ((True, 1800, 2700, 0), "idle_threshold_pct", "whole percentage"),
    ],
)
def test_bad_policies_say_what_to_change(values, field, said):
    with pytest.raises(InvalidInput, match=said) as caught:
        check_idle_policy(*values)
    assert caught.value.field == field


def test_a_policy_off_and_the_strictest_of_several():
    assert check_idle_policy(None, -1, -1, -1) is None  # off: the times do not matter
    assert check_idle_policy(5, 1800, 2700, 0) == IdlePolicy(5, 1800, 2700, 0)
    lax = IdlePolicy(5, 3600, 7200, 0)
    assert strictest([None, lax, POLICY]) == POLICY
    assert strictest([None, None]) is None
    assert POLICY.words == "below 5 % GPU use: warned after 30 min, suspended after 45 min"
