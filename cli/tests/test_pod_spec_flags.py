"""`submit --cpu --memory --ephemeral-storage --shm --volume --env-from-secret
--image-pull-secret` send the API's fields (issue 15; no portal needed)."""

import click
import pytest
from click.testing import CliRunner

from cli.main import _volumes, cli

ENV = {"GPU_PORTAL_URL": "http://portal.invalid", "GPU_PORTAL_TOKEN": "t"}
BASE = ["submit", "--tenant", "team-a", "--name", "train", "--image", "pytorch/pytorch:2.4",
        "--gpu", "h100-80gb=1"]  # fmt: skip


@pytest.fixture
def sent(monkeypatch):
    body = {}

    def post(self, path, data, idempotency_key=None):
        body.update(data)
        return {"id": 9, "name": "train", "state": "pending", "reason": "", "message": ""}

    monkeypatch.setattr("cli.client.Client.post", post)
    return body


def test_volume_is_a_claim_a_path_and_maybe_ro():
    assert _volumes(("imagenet:/data:ro", "ckpt:/checkpoints")) == [
        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
        {"claim": "ckpt", "mount_path": "/checkpoints", "read_only": False},
    ]


@pytest.mark.parametrize("bad", ["imagenet", ":/data", "imagenet:data", "imagenet:"])
def test_a_volume_without_claim_and_absolute_path_is_refused(bad):
    with pytest.raises(click.BadParameter, match="CLAIM:/path"):
        _volumes((bad,))


def test_submit_sends_the_pod_asks(sent):
    result = CliRunner().invoke(
        cli,
        [*BASE, "--cpu", "8", "--memory", "64Gi", "--ephemeral-storage", "100Gi",
         "--shm", "16Gi", "--volume", "imagenet:/data:ro", "--volume", "ckpt:/ckpt",
         "--env-from-secret", "wandb", "--env-from-secret", "s3-creds",
         "--image-pull-secret", "registry-team-a", "--", "python", "train.py"],
        env=ENV,
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert {k: sent[k] for k in ("cpu", "memory", "ephemeral_storage", "shm")} == {
        "cpu": "8",
        "memory": "64Gi",
        "ephemeral_storage": "100Gi",
        "shm": "16Gi",
    }
    assert sent["volumes"] == [
        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
        {"claim": "ckpt", "mount_path": "/ckpt", "read_only": False},
    ]
    assert sent["env_from_secrets"] == ["wandb", "s3-creds"]
    assert sent["image_pull_secrets"] == ["registry-team-a"]
    assert sent["command"] == ["python", "train.py"]


def test_without_the_flags_the_namespace_defaults_apply(sent):
    result = CliRunner().invoke(cli, BASE, env=ENV)
    assert result.exit_code == 0, result.output
    assert not {"cpu", "memory", "shm", "volumes", "env_from_secrets"} & set(sent)


def test_a_bad_volume_flag_is_a_usage_error_before_any_call(sent):
    result = CliRunner().invoke(cli, [*BASE, "--volume", "imagenet"], env=ENV)
    assert result.exit_code == 2
    assert "CLAIM:/path" in result.output
    assert sent == {}


def test_submit_by_need_sends_the_need_not_resources(sent):
    args = ["submit", "--tenant", "team-a", "--name", "nb", "--image", "jupyter/base:1",
            "--model", "A100-80GB", "--gpu-memory-gb", "20"]  # fmt: skip
    result = CliRunner().invoke(cli, args, env=ENV)
    assert result.exit_code == 0, result.output
    assert sent["need"] == {"gpu_model": "A100-80GB", "gpu_memory_gb": 20}
    assert "resources" not in sent


@pytest.mark.parametrize("extra", [[], ["--gpu", "x=1", "--model", "A100-80GB"]])
def test_submit_wants_gpu_or_need_not_both(sent, extra):
    args = ["submit", "--tenant", "team-a", "--name", "nb", "--image", "i:1", *extra]
    result = CliRunner().invoke(cli, args, env=ENV)
    assert result.exit_code == 2 and "one of the two" in result.output
    assert sent == {}
