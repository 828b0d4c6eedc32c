"""What the confirmation pages say a destructive action does (pure functions, no database)."""

from datetime import UTC, datetime, timedelta

from scheduler.workloads.pages.consequences import cancel_consequences
from tenants.consequences import (
    give_back_consequences,
    member_remove_consequences,
    token_revoke_consequences,
)

A100 = "A100-80GB MIG 3g.40gb"


def test_cancelling_a_running_job_says_its_pods_stop_and_what_they_hold():
    lines = cancel_consequences(name="train", kind="job", state="running", pods=2, held={A100: 4})
    assert lines == [
        f"Its 2 running pods stop at once and 4 × {A100} go back to the team's quota.",
        "A cancelled job does not resume: submit it again to start over.",
    ]


def test_cancelling_a_queued_service_says_where_it_was_in_the_queue():
    lines = cancel_consequences(
        name="serve", kind="deployment", state="queued", pods=1, held={A100: 1}, queue_position=3
    )
    assert lines == [
        "serve leaves the team's queue (position 3); it has not run yet.",
        "The service stops answering.",
    ]


def test_giving_back_what_running_pods_hold_says_how_much_is_over_the_new_quota():
    assert give_back_consequences(class_name=A100, amount=2, granted=3, in_use=2) == [
        f"The team's quota of {A100} goes from 3 to 1.",
        f"2 units of {A100} are held by running pods: 1 unit would be over the new quota.",
        "To have it again, the team asks again.",
    ]
    assert give_back_consequences(class_name=A100, amount=1, granted=3, in_use=1)[1] == (
        f"1 unit of {A100} is held by running pods; they still fit."
    )
    assert give_back_consequences(class_name=A100, amount=1, granted=1, in_use=0)[1] == (
        f"No running pod holds {A100} now."
    )


def test_revoking_a_token_says_when_it_was_last_used():
    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    lines = token_revoke_consequences(
        prefix="gpp_ab12", name="gitlab", last_used_at=now - timedelta(hours=2), now=now
    )
    assert lines[0] == "Anything that uses gpp_ab12… (gitlab) is refused from now on."
    assert lines[1] == "It was last used 2\xa0hours ago."
    never = token_revoke_consequences(prefix="gpp_x", name="x", last_used_at=None, now=now)
    assert never[1] == "It has never been used."


def test_removing_yourself_says_you_lose_access():
    assert member_remove_consequences(username="mia", team="Vision", is_self=True)[0] == (
        "You lose access to Vision at once, also through API tokens."
    )
    assert member_remove_consequences(username="bo", team="Vision", is_self=False)[0] == (
        "bo loses access to Vision at once, also through API tokens."
    )
