"""`submit --secret-env NAME=SECRET/KEY` sends the API's Secret reference (no portal needed)."""

import click
import pytest
from click.testing import CliRunner

from cli.main import _secret_refs, cli


def test_secret_env_becomes_a_secret_reference():
    assert _secret_refs(("AWS_SECRET_ACCESS_KEY=s3-creds/secret-key",)) == {
        "AWS_SECRET_ACCESS_KEY": {"secret": "s3-creds", "key": "secret-key"}
    }


@pytest.mark.parametrize("bad", ["X=s3-creds", "X=/key", "X=s3-creds/", "NOEQUALS"])
def test_a_secret_env_without_secret_and_key_is_refused(bad):
    with pytest.raises(click.BadParameter):
        _secret_refs((bad,))


def test_submit_sends_plain_and_secret_env_together(monkeypatch):
    sent = {}

    def post(self, path, body, idempotency_key=None):
        sent.update(body)
        return {"id": 7, "name": "sync", "state": "pending", "reason": "", "message": ""}

    monkeypatch.setattr("cli.client.Client.post", post)
    result = CliRunner().invoke(
        cli,
        ["submit", "--tenant", "team-a", "--name", "sync", "--image", "amazon/aws-cli:2",
         "--gpu", "l4=1", "--env", "BUCKET=data",
         "--secret-env", "AWS_SECRET_ACCESS_KEY=s3-creds/secret-key"],
        env={"GPU_PORTAL_URL": "http://portal.invalid", "GPU_PORTAL_TOKEN": "t"},
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert sent["env"] == {
        "BUCKET": "data",
        "AWS_SECRET_ACCESS_KEY": {"secret": "s3-creds", "key": "secret-key"},
    }
