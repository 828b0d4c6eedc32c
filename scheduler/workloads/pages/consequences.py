"""What cancelling a workload does, in plain words, for its confirmation page (pure)."""

from __future__ import annotations


def cancel_consequences(
    *,
    name: str,
    kind: str,
    state: str,
    pods: int,
    held: dict[str, int],
    queue_position: int | None = None,
) -> list[str]:
    """`held`: display name of a resource class -> units all the workload's pods hold."""
    gpus = ", ".join(f"{n} × {label}" for label, n in held.items()) or "no GPUs"
    if state == "running":
        stop = "running pod stops" if pods == 1 else "running pods stop"
        lines = [f"Its {pods} {stop} at once and {gpus} go back to the team's quota."]
    elif state == "queued":
        where = f" (position {queue_position})" if queue_position else ""
        lines = [f"{name} leaves the team's queue{where}; it has not run yet."]
    else:
        lines = [f"{name} will not start (or stops if it just did); {gpus} go back to the quota."]
    if kind == "deployment":
        lines.append("The service stops answering.")
    else:
        lines.append("A cancelled job does not resume: submit it again to start over.")
    return lines
