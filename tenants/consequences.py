"""What a destructive action does, in plain words, for the confirmation pages (pure: the views
bring the numbers)."""

from __future__ import annotations

from datetime import datetime

from django.utils.timesince import timesince


def _units(n: int) -> str:
    return f"{n} unit{'' if n == 1 else 's'}"


def give_back_consequences(*, class_name: str, amount: int, granted: int, in_use: int) -> list[str]:
    """Giving `amount` units of a class back, when the team holds `granted` in all and its
    running pods hold `in_use`."""
    after = max(0, granted - amount)
    lines = [f"The team's quota of {class_name} goes from {granted} to {after}."]
    if in_use:
        are = "is" if in_use == 1 else "are"
        held = f"{_units(in_use)} of {class_name} {are} held by running pods"
        if in_use > after:
            lines.append(f"{held}: {_units(in_use - after)} would be over the new quota.")
        else:
            lines.append(f"{held}; they still fit.")
    else:
        lines.append(f"No running pod holds {class_name} now.")
    lines.append("To have it again, the team asks again.")
    return lines


def withdraw_consequences() -> list[str]:
    return ["The platform team no longer sees this ask; nothing on the cluster changes."]


def token_revoke_consequences(
    *, prefix: str, name: str, last_used_at: datetime | None, now: datetime
) -> list[str]:
    used = (
        f"It was last used {timesince(last_used_at, now)} ago."
        if last_used_at
        else "It has never been used."
    )
    return [
        f"Anything that uses {prefix}… ({name}) is refused from now on.",
        used,
        "A revoked token cannot be restored: create a new one if it is still needed.",
    ]


def member_remove_consequences(*, username: str, team: str, is_self: bool) -> list[str]:
    who = "You lose" if is_self else f"{username} loses"
    return [
        f"{who} access to {team} at once, also through API tokens.",
        "Workloads already submitted keep running; an owner can cancel them.",
    ]
