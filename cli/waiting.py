"""A workload's state in a line, why it waits, and `wait`: following it until it ends, or until
the timeout, when it says what becomes of the workload (it keeps its course unless
`--cancel-on-timeout` cancels it)."""

from __future__ import annotations

import sys
import time

import click

from cli.client import ApiError, Client
from cli.output import EXIT, EXIT_TIMEOUT, EXIT_TIMEOUT_CANCELLED, fail


def _state(w: dict) -> str:
    if w["state"] == "queued" and w.get("queue_position"):
        return f"queued, position {w['queue_position']}"
    return w["state"]


def status_line(w: dict, *, message: bool = True) -> str:
    reason = f" ({w['reason']}: {w['message']})" if message and w.get("message") else ""
    if not reason and w.get("reason"):
        reason = f" ({w['reason']})"
    return f"workload {w['id']} {w['name']}: {_state(w)}{reason}"


def waiting_lines(w: dict) -> list[str]:
    """Why a waiting workload waits (the API's `waiting`): the reason, its place in the queue,
    what would get it in sooner, and the cluster's own words last."""
    waiting = w.get("waiting")
    if not waiting:
        return []
    lines = [f"  why: {waiting['reason']}"]
    if waiting.get("position"):
        lines.append(f"  position {waiting['position']} in the team's queue")
    lines += [f"  sooner: {hint}" for hint in waiting.get("hints") or []]
    if waiting.get("details"):
        lines.append(f"  details: {waiting['details']}")
    return lines


def timeout_message(w: dict, timeout: float) -> str:
    """What a timed-out `wait` leaves behind: the workload is not cancelled and keeps its
    course; how to cancel it."""
    if w["state"] == "running":
        course = "it keeps running"
    elif w["state"] == "suspended":
        course = f"it stays suspended until resumed (`gpu-portal resume {w['id']}`)"
    else:
        course = "it keeps waiting in the team's queue and runs once admitted"
    return (
        f"timed out after {timeout:g} s: workload {w['id']} {w['name']} is still {_state(w)}; "
        f"it is NOT cancelled, {course}: cancel it with `gpu-portal cancel {w['id']}` "
        "(or wait with --cancel-on-timeout)"
    )


def _cancel_on_timeout(client: Client, w: dict, timeout: float) -> None:
    try:
        cancelled = client.post(f"/api/v1/workloads/{w['id']}/cancel/")
    except ApiError as exc:
        # It may have ended between the last look and the cancel: then it ends as it ended.
        try:
            now = client.get(f"/api/v1/workloads/{w['id']}/")
        except ApiError:
            now = w
        if now["state"] in EXIT:
            click.echo(status_line(now), err=True)
            sys.exit(EXIT[now["state"]])
        click.echo(
            f"timed out after {timeout:g} s and could not cancel workload {w['id']}; "
            f"it is still {now['state']}",
            err=True,
        )
        fail(exc)
    click.echo(
        f"timed out after {timeout:g} s: cancelled workload {w['id']} {w['name']} "
        f"(--cancel-on-timeout; it was {w['state']}); now {cancelled['state']}",
        err=True,
    )
    sys.exit(EXIT_TIMEOUT_CANCELLED)


def follow(
    client: Client,
    workload_id: int,
    kind: str,
    timeout: float,
    interval: float,
    *,
    cancel_on_timeout: bool = False,
) -> None:
    """Poll until the workload ends (exit by how it ended; a deployment: once it runs) or the
    timeout (exit 4, it keeps its course; with `cancel_on_timeout`, cancelled and exit 6)."""
    deadline = time.monotonic() + timeout
    last = last_why = None
    while True:
        try:
            w = client.get(f"/api/v1/workloads/{workload_id}/")
        except ApiError as exc:
            fail(exc)
        line = status_line(w)
        if line != last:
            click.echo(line, err=True)
            last = line
        why = (w.get("waiting") or {}).get("reason")
        if why and why != last_why:  # the reason in words, each time it changes
            click.echo(f"  why: {why}", err=True)
        last_why = why
        if w["state"] in EXIT:
            sys.exit(EXIT[w["state"]])
        if kind == "deployment" and w["state"] == "running":
            sys.exit(0)
        if time.monotonic() > deadline:
            if cancel_on_timeout:
                _cancel_on_timeout(client, w, timeout)
            click.echo(timeout_message(w, timeout), err=True)
            sys.exit(EXIT_TIMEOUT)
        time.sleep(interval)
