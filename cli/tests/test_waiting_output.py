"""`gpu-portal status` and `wait` say why a waiting workload waits (issue 29, item 6), from the
API's `waiting` object (no portal needed)."""

from click.testing import CliRunner

from cli.main import cli, waiting_lines

ENV = {"GPU_PORTAL_URL": "http://portal.invalid", "GPU_PORTAL_TOKEN": "t"}
KUEUE = "couldn't assign flavors to pod set main: insufficient unused quota … 3 more needed"
QUEUED = {
    "id": 7, "name": "eval-c", "kind": "job", "state": "queued", "queue_position": 2,
    "reason": "Pending", "message": KUEUE, "events": [],
    "waiting": {
        "code": "quota_full",
        "reason": "The team's A100-80GB quota is full: 14 of 14 slices in use by train-a "
        "(1 × 3g), eval-b (4 × 1g) and prep (1 whole GPU); its pool lets no team borrow "
        "beyond its grant.",
        "position": 2,
        "hints": ["A smaller ask fits now: 2 × A100-80GB MIG 1g.10gb instead of 4."],
        "details": KUEUE,
    },
}  # fmt: skip


def test_the_reason_the_position_the_hints_then_the_clusters_words():
    assert waiting_lines(QUEUED) == [
        "  why: The team's A100-80GB quota is full: 14 of 14 slices in use by train-a (1 × 3g), "
        "eval-b (4 × 1g) and prep (1 whole GPU); its pool lets no team borrow beyond its grant.",
        "  position 2 in the team's queue",
        "  sooner: A smaller ask fits now: 2 × A100-80GB MIG 1g.10gb instead of 4.",
        f"  details: {KUEUE}",
    ]
    assert waiting_lines({**QUEUED, "waiting": None}) == []
    assert waiting_lines({"state": "running"}) == []  # an older portal: no `waiting` at all


def test_status_prints_it_and_keeps_kueues_words_for_the_details(monkeypatch):
    monkeypatch.setattr("cli.client.Client.get", lambda self, path: QUEUED)
    result = CliRunner().invoke(cli, ["status", "7"], env=ENV)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "workload 7 eval-c: queued, position 2 (Pending)"
    assert lines[1].startswith("  why: The team's A100-80GB quota is full")
    assert lines[-1] == f"  details: {KUEUE}" and result.output.count(KUEUE) == 1


def test_wait_says_why_while_it_waits(monkeypatch):
    answers = iter([QUEUED, QUEUED, {**QUEUED, "state": "succeeded", "waiting": None}])
    monkeypatch.setattr("cli.client.Client.get", lambda self, path: next(answers))
    monkeypatch.setattr("cli.waiting.time.sleep", lambda s: None)
    result = CliRunner().invoke(cli, ["wait", "7", "--interval", "0"], env=ENV)
    assert result.exit_code == 0
    assert result.output.count("  why: The team's A100-80GB quota is full") == 1  # once
