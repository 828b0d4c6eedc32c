"""`submit --target-requests-per-s` sends the API's request-rate target and `status` shows it as
a person writes it (issue 50, item 4; no portal needed)."""

import pytest
from click.testing import CliRunner

from cli.main import cli

ENV = {"GPU_PORTAL_URL": "http://portal.invalid", "GPU_PORTAL_TOKEN": "t"}
BASE = ["submit", "--tenant", "team-a", "--name", "echo", "--kind", "deployment",
        "--image", "localhost/gpu-portal/demo-python:local", "--gpu", "b200-180gb=1"]  # fmt: skip


@pytest.fixture
def sent(monkeypatch):
    body = {}

    def post(self, path, data, idempotency_key=None):
        body.update(data)
        return {"id": 9, "name": "echo", "state": "pending", "reason": "", "message": ""}

    monkeypatch.setattr("cli.client.Client.post", post)
    return body


def test_submit_sends_requests_per_second_per_replica(sent):
    result = CliRunner().invoke(
        cli, [*BASE, "--max-replicas", "3", "--target-requests-per-s", "2.5"], env=ENV
    )
    assert result.exit_code == 0, result.output
    assert sent["autoscaling"] == {"max_replicas": 3, "target_requests_per_s": 2.5}


def test_a_request_rate_alone_is_a_target_and_no_target_names_it(sent):
    result = CliRunner().invoke(cli, [*BASE, "--max-replicas", "3"], env=ENV)
    assert result.exit_code == 2
    assert "--target-requests-per-s" in result.output


def test_status_shows_the_rate_as_written(monkeypatch):
    shown = {
        "id": 9, "name": "echo", "kind": "deployment", "state": "running", "reason": "Running",
        "message": "", "events": [],
        "autoscaling": {"min_replicas": 1, "max_replicas": 3, "target_gpu_util": None,
                        "target_latency_ms": 250, "target_requests_per_s": 2.5},
    }  # fmt: skip
    monkeypatch.setattr("cli.client.Client.get", lambda self, path: shown)
    result = CliRunner().invoke(cli, ["status", "9"], env=ENV)
    assert result.exit_code == 0, result.output
    assert (
        "  autoscaling 1-3 replicas on latency 250 ms and requests 2.5/s per replica"
        in result.output.splitlines()
    )
    shown["autoscaling"]["target_requests_per_s"] = 5.0
    result = CliRunner().invoke(cli, ["status", "9"], env=ENV)
    assert "requests 5/s per replica" in result.output
