"""`gpu-portal admin …`, `wait --timeout` and `completion` against a stand-in for the API: what
each command asks, how it prints the answer, and how it fails (pure; the live portal is in
test_admin_cli_e2e.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.client import ApiError
from cli.main import cli

ENV = {"GPU_PORTAL_URL": "http://portal.invalid", "GPU_PORTAL_TOKEN": "t"}
ASK = {
    "id": 12, "tenant": "team-vision", "requester": "bob", "items": {"h100-80gb": 2},
    "starts_at": None, "ends_at": "2027-01-31T00:00:00Z", "justification": "Q1 fine-tuning",
    "state": "submitted", "auto_approved": False,
    "policy_reasons": ["2 units is over the auto-approval limit of 1"], "decided_by": None,
    "decided_at": None, "decision_comment": "", "extends": None,
    "created_at": "2026-12-01T09:00:00Z",
}  # fmt: skip


class FakeApi:
    """Answers by (method, path without the query); records every call."""

    def __init__(self, monkeypatch, answers: dict):
        self.answers, self.calls = answers, []
        fake = self

        def request(client, method, path, body=None, *, idempotency_key=None, raw=False):
            fake.calls.append((method, path, body))
            answer = fake.answers[(method, path.split("?")[0])]
            if callable(answer):
                answer = answer(path, body)
            if isinstance(answer, ApiError):
                raise answer
            return answer

        monkeypatch.setattr("cli.client.Client.request", request)


def page(rows):
    return {"count": len(rows), "next": None, "previous": None, "results": rows}


def run(*args):
    result = CliRunner().invoke(cli, list(args), env=ENV)
    return result.exit_code, result.stdout, result.stderr


def test_approvals_list_asks_for_the_waiting_asks_and_prints_a_table(monkeypatch):
    api = FakeApi(monkeypatch, {("GET", "/api/v1/capacity-requests/"): page([ASK])})
    code, out, err = run("admin", "approvals", "list")
    assert code == 0, err
    assert api.calls[0][1].startswith("/api/v1/capacity-requests/?")
    assert "state=submitted" in api.calls[0][1] and "ordering=created_at" in api.calls[0][1]
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "TENANT", "REQUESTER", "ITEMS"]
    assert row.startswith("12  team-vision  bob        h100-80gb=2")
    assert "over the auto-approval limit" in row

    code, out, _ = run("admin", "approvals", "list", "--state", "all", "--output", "json")
    assert json.loads(out) == [ASK] and "state=" not in api.calls[-1][1]


def test_approve_sends_the_note_and_says_what_was_decided(monkeypatch):
    approved = {**ASK, "state": "approved", "decided_by": "platform", "decision_comment": "ok"}
    api = FakeApi(monkeypatch, {("POST", "/api/v1/capacity-requests/12/approve/"): approved})
    code, out, err = run("admin", "approvals", "approve", "12", "--note", "ok")
    assert code == 0, err
    assert api.calls == [("POST", "/api/v1/capacity-requests/12/approve/", {"comment": "ok"})]
    assert out.strip() == (
        "request #12 (team-vision): approved by platform: h100-80gb=2, "
        "until 2027-01-31T00:00:00Z (ok)"
    )


def test_a_refusal_is_the_apis_message_on_stderr_and_exit_5(monkeypatch):
    refused = ApiError(
        400,
        {"code": "invalid", "detail": "say why the request is rejected",
         "errors": {"comment": ["say why the request is rejected"]}},
    )  # fmt: skip
    FakeApi(monkeypatch, {("POST", "/api/v1/capacity-requests/12/reject/"): refused})
    code, out, err = run("admin", "approvals", "reject", "12")
    assert code == 5 and out == ""
    assert err.splitlines() == [
        "error: 400 invalid: say why the request is rejected",
        "  comment: say why the request is rejected",
    ]


def test_a_token_without_the_scope_is_told_which_token_it_needs(monkeypatch):
    refused = ApiError(
        403,
        {"code": "permission_denied", "detail": "this token lacks the scope 'admin' (it has "
         "['read'])"},
    )  # fmt: skip
    FakeApi(monkeypatch, {("PATCH", "/api/v1/pools/h100-80gb/"): refused})
    code, _, err = run("admin", "pools", "set", "h100-80gb", "--capacity", "16")
    assert code == 5
    assert "403 permission_denied: this token lacks the scope 'admin'" in err
    assert "hint: admin commands need a platform admin's token with the admin scope" in err


def test_pools_set_sends_only_what_is_given_and_none_as_null(monkeypatch):
    pool = {"resource_class": "h100-80gb", "capacity": 16, "borrowing_limit": None}
    api = FakeApi(monkeypatch, {("PATCH", "/api/v1/pools/h100-80gb/"): pool})
    code, out, err = run(
        "admin", "pools", "set", "h100-80gb", "--capacity", "16", "--overcommit-ratio", "1.25",
        "--borrowing-limit", "none", "--no-lend-idle",
    )  # fmt: skip
    assert code == 0, err
    assert api.calls[0][2] == {
        "capacity": 16,
        "overcommit_ratio": "1.25",
        "borrowing_limit": None,
        "lend_idle": False,
    }
    assert "capacity:        16" in out

    code, _, err = run("admin", "pools", "set", "h100-80gb")
    assert code == 2 and "nothing to set: give one or more of --capacity" in err
    code, _, err = run("admin", "pools", "set", "h100-80gb", "--max-run-s", "soon")
    assert code == 2 and "'soon' is not a valid integer" in err


def test_policy_set_keeps_the_field_not_given(monkeypatch):
    rule = {"resource_class": "h100-80gb", "max_amount": 2, "max_duration_hours": 168}
    api = FakeApi(
        monkeypatch,
        {
            ("GET", "/api/v1/auto-approval-rules/h100-80gb/"): rule,
            ("PUT", "/api/v1/auto-approval-rules/h100-80gb/"): lambda path, body: {
                "resource_class": "h100-80gb",
                **body,
            },
        },
    )
    code, out, err = run("admin", "policy", "set", "h100-80gb", "--max-amount", "4")
    assert code == 0, err
    assert api.calls[-1][2] == {"max_amount": 4, "max_duration_hours": 168}
    assert "max_amount:         4" in out


def test_onboarding_creates_the_team_then_its_people(monkeypatch):
    tenant = {"slug": "team-vision", "status": "active", "namespace": "gp-team-vision"}
    api = FakeApi(
        monkeypatch,
        {
            ("POST", "/api/v1/tenants/"): tenant,
            ("POST", "/api/v1/members/"): lambda path, body: {**body, "id": 1},
        },
    )
    code, out, err = run(
        "admin", "tenants", "create", "team-vision", "--name", "Vision", "--cost-centre", "CC-42",
        "--budget", "5000.00", "--owner", "alice", "--member", "bob",
    )  # fmt: skip
    assert code == 0, err
    assert [c[2] for c in api.calls] == [
        {"slug": "team-vision", "name": "Vision", "cost_centre": "CC-42",
         "monthly_budget": "5000.00"},
        {"tenant": "team-vision", "username": "alice", "role": "owner"},
        {"tenant": "team-vision", "username": "bob", "role": "member"},
    ]  # fmt: skip
    assert out.splitlines() == [
        "tenant team-vision created (active, namespace gp-team-vision)",
        "  alice: owner",
        "  bob: member",
    ]


def test_a_member_added_after_the_team_failing_says_the_team_exists(monkeypatch):
    FakeApi(
        monkeypatch,
        {
            ("POST", "/api/v1/tenants/"): {"slug": "t", "status": "active", "namespace": "n"},
            ("POST", "/api/v1/members/"): ApiError(
                404, {"code": "not_found", "detail": "no user 'carol'"}
            ),
        },
    )
    code, _, err = run("admin", "tenants", "create", "t", "--name", "T", "--owner", "carol")
    assert code == 5
    assert err.splitlines()[:2] == [
        "tenant t was created; adding carol as owner failed:",
        "error: 404 not_found: no user 'carol'",
    ]


def test_members_are_found_by_team_and_name(monkeypatch):
    rows = [{"id": 17, "tenant": "team-vision", "username": "bob", "role": "member"}]
    api = FakeApi(
        monkeypatch,
        {
            ("GET", "/api/v1/members/"): page(rows),
            ("PATCH", "/api/v1/members/17/"): {**rows[0], "role": "viewer"},
            ("DELETE", "/api/v1/members/17/"): None,
        },
    )
    code, out, _ = run("admin", "members", "set-role", "team-vision", "bob", "viewer")
    assert code == 0 and out.strip() == "bob is viewer of team-vision"
    assert api.calls[-1] == ("PATCH", "/api/v1/members/17/", {"role": "viewer"})
    code, _, err = run("admin", "members", "remove", "team-vision", "carol")
    assert code == 5 and "carol is not a member of team-vision" in err


def test_the_chargeback_export_is_the_portals_csv_or_its_statements_as_json(monkeypatch, tmp_path):
    csv = "tenant,cost_centre,month\r\nteam-a,CC-1,2026-11\r\n"
    statement = {"tenant": "team-a", "cost_centre": "CC-1", "month": "2026-11", "lines": []}
    api = FakeApi(
        monkeypatch,
        {
            ("GET", "/api/v1/usage/statements/csv/"): csv,
            ("GET", "/api/v1/usage/statements/"): page([statement]),
        },
    )
    result = CliRunner().invoke(
        cli, ["admin", "statements", "export", "--month", "2026-11"], env=ENV
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == csv.encode()  # byte for byte: RFC 4180's CRLF kept
    assert api.calls[-1][1] == "/api/v1/usage/statements/csv/?month=2026-11"
    code, out, _ = run("admin", "statements", "export", "--output", "json")
    assert json.loads(out) == [statement]
    target = tmp_path / "chargeback.csv"
    code, out, err = run("admin", "statements", "export", "--file", str(target))
    assert code == 0 and out == "" and f"wrote {target} (csv, 2 lines)" in err
    assert target.read_bytes() == csv.encode()


def test_why_explains_a_waiting_workload_and_says_when_nothing_waits(monkeypatch):
    waiting = {"code": "quota_full", "reason": "The team's quota is full.", "position": 2,
               "hints": ["A smaller ask fits now."], "details": "Kueue's words"}  # fmt: skip
    queued = {"id": 7, "name": "eval", "tenant": "team-a", "state": "queued",
              "queue_position": 2, "reason": "Pending", "message": "Kueue's words",
              "waiting": waiting}  # fmt: skip
    answers = {("GET", "/api/v1/workloads/7/"): queued}
    FakeApi(monkeypatch, answers)
    code, out, _ = run("admin", "why", "7")
    assert code == 0
    assert out.splitlines() == [
        "workload 7 eval: queued, position 2 (Pending)",
        "  why: The team's quota is full.",
        "  position 2 in the team's queue",
        "  sooner: A smaller ask fits now.",
        "  details: Kueue's words",
    ]
    code, out, _ = run("admin", "why", "7", "-o", "json")
    assert json.loads(out)["waiting"] == waiting
    answers[("GET", "/api/v1/workloads/7/")] = {**queued, "state": "running", "waiting": None,
                                                 "reason": "", "message": ""}  # fmt: skip
    code, out, _ = run("admin", "why", "7")
    assert out.splitlines()[-1] == "  not waiting: it is running"


def test_queues_show_each_teams_queue_in_a_row(monkeypatch):
    queue = {"queue": "gp-team-a", "pending": 3, "admitted": 1, "active": True, "reason": "",
             "lines": [{"flavor": "h100-80gb", "resource": "nvidia.com/gpu", "nominal": 4,
                        "used": 6, "borrowed": 2, "lent": 0}]}  # fmt: skip
    tenants = [
        {"slug": "team-a", "status": "active", "queue": queue},
        {"slug": "team-b", "status": "active", "queue": None},
        {"slug": "old", "status": "archived", "queue": None},
    ]
    FakeApi(monkeypatch, {("GET", "/api/v1/tenants/"): page(tenants)})
    code, out, err = run("admin", "queues")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3  # the archived team is left out
    assert lines[1].split() == [
        "team-a", "active", "3", "1", "yes", "h100-80gb", "6/4", "(+2", "borrowed)",
    ]  # fmt: skip
    assert "not read yet" in lines[2]


# --- wait --timeout ----------------------------------------------------------------------------

QUEUED = {"id": 42, "name": "low", "kind": "job", "state": "queued", "queue_position": 1,
          "reason": "Pending", "message": "", "waiting": None}  # fmt: skip


def test_a_timed_out_wait_says_the_workload_keeps_its_course(monkeypatch):
    FakeApi(monkeypatch, {("GET", "/api/v1/workloads/42/"): QUEUED})
    code, _, err = run("wait", "42", "--timeout", "0", "--interval", "0")
    assert code == 4
    assert err.splitlines()[-1] == (
        "timed out after 0 s: workload 42 low is still queued, position 1; it is NOT "
        "cancelled, it keeps waiting in the team's queue and runs once admitted: cancel it "
        "with `gpu-portal cancel 42` (or wait with --cancel-on-timeout)"
    )
    FakeApi(monkeypatch, {("GET", "/api/v1/workloads/42/"): {**QUEUED, "state": "running"}})
    code, _, err = run("wait", "42", "--timeout", "0", "--interval", "0")
    assert code == 4 and "still running; it is NOT cancelled, it keeps running" in err


def test_cancel_on_timeout_cancels_it_says_so_and_exits_6(monkeypatch):
    api = FakeApi(
        monkeypatch,
        {
            ("GET", "/api/v1/workloads/42/"): QUEUED,
            ("POST", "/api/v1/workloads/42/cancel/"): {**QUEUED, "state": "cancelled"},
        },
    )
    code, _, err = run("wait", "42", "--timeout", "0", "--interval", "0", "--cancel-on-timeout")
    assert code == 6
    assert ("POST", "/api/v1/workloads/42/cancel/", {}) in api.calls
    assert err.splitlines()[-1] == (
        "timed out after 0 s: cancelled workload 42 low (--cancel-on-timeout; it was queued); "
        "now cancelled"
    )


def test_a_workload_that_ends_as_the_timeout_cancels_it_ends_as_it_ended(monkeypatch):
    answers = iter([QUEUED, QUEUED, {**QUEUED, "state": "succeeded"}])
    FakeApi(
        monkeypatch,
        {
            ("GET", "/api/v1/workloads/42/"): lambda path, body: next(answers),
            ("POST", "/api/v1/workloads/42/cancel/"): ApiError(
                409, {"code": "invalid_transition", "detail": "it has ended"}
            ),
        },
    )
    code, _, err = run("wait", "42", "--timeout", "0", "--interval", "0", "--cancel-on-timeout")
    assert code == 0 and err.splitlines()[-1] == "workload 42 low: succeeded (Pending)"


# --- the shell's completion, and what needs no portal --------------------------------------------


def test_completion_and_help_need_neither_url_nor_token():
    result = CliRunner().invoke(cli, ["completion", "bash"], env={})
    assert result.exit_code == 0
    assert "_GPU_PORTAL_COMPLETE=bash_complete" in result.output
    assert "complete -o nosort -F _gpu_portal_completion gpu-portal" in result.output
    result = CliRunner().invoke(cli, ["completion", "zsh"], env={})
    assert result.exit_code == 0 and "#compdef gpu-portal" in result.output
    result = CliRunner().invoke(cli, ["admin", "approvals", "list"], env={})
    assert result.exit_code == 2 and "Missing option '--url'" in result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_options_and_choices(tmp_path):
    """The script as bash runs it: it calls gpu-portal back, which completes from the parser."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "gpu-portal"
    root = Path(__file__).resolve().parents[2]
    launcher.write_text(f'#!/bin/sh\ncd {root} && exec {sys.executable} -m cli "$@"\n')
    launcher.chmod(0o755)
    script = subprocess.run(
        [launcher, "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        probe = (
            f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); "
            f"COMP_CWORD={len(words) - 1}; _gpu_portal_completion gpu-portal; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env)
        return done.stdout.split()

    assert complete("gpu-portal adm") == ["admin"]
    assert complete("gpu-portal admin appr") == ["approvals"]
    assert set(complete("gpu-portal admin approvals ")) == {"approve", "list", "reject", "show"}
    assert complete("gpu-portal admin approvals list --state sub") == ["submitted"]
    assert "--cancel-on-timeout" in complete("gpu-portal wait 42 --can")
    assert complete("gpu-portal completion ") == ["bash", "zsh", "fish"]


def test_request_books_ahead_with_from(monkeypatch):
    asked = {**ASK, "state": "submitted", "policy_reasons": []}
    api = FakeApi(monkeypatch, {("POST", "/api/v1/capacity-requests/"): asked})
    code, out, err = run(
        "request", "--tenant", "team-vision", "--item", "h100-80gb=2",
        "--from", "2027-01-03T00:00:00Z", "--until", "2027-01-05T00:00:00Z", "--why", "run",
    )  # fmt: skip
    assert code == 0, err
    body = api.calls[0][2]
    assert (body["starts_at"], body["ends_at"]) == ("2027-01-03T00:00:00Z", "2027-01-05T00:00:00Z")
    assert out.strip() == "request #12: submitted"


def test_calendar_prints_a_line_a_day_and_asks_for_the_class_and_team(monkeypatch):
    cal = {
        "resource_class": "h100-80gb", "grantable": 8, "open_ended": ["2 units"],
        "days": [{"date": "2027-01-03", "free": 4, "granted": 2, "booked": 2, "own": 2}],
    }  # fmt: skip
    api = FakeApi(monkeypatch, {("GET", "/api/v1/capacity-calendar/"): {"calendars": [cal]}})
    code, out, err = run("calendar", "--class", "h100-80gb", "--tenant", "team-vision")
    assert code == 0, err
    assert "resource_class=h100-80gb" in api.calls[0][1] and "tenant=team-vision" in api.calls[0][1]
    assert "2027-01-03  free    4  granted    2  booked    2  yours 2" in out
    assert "open-ended, holding every day: 2 units" in out
