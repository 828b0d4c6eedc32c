"""The image allow-list: entries are registry/repository prefixes that end at a path boundary,
and an empty list refuses every image (production's default: fail closed)."""

import pytest

from core.errors import InvalidInput
from scheduler.workloads.submit.input import check_image


def allowed(image: str) -> bool:
    try:
        check_image(image)
    except InvalidInput as exc:
        assert exc.code == "image_not_allowed" and exc.field == "image"
        return False
    return True


@pytest.mark.parametrize(
    ("entries", "image", "ok"),
    [
        # a registry host: everything under it, nothing that merely starts with its name
        (["registry.example.com"], "registry.example.com/team/img:tag", True),
        (["registry.example.com"], "registry.example.com/img@sha256:" + "a" * 64, True),
        (["registry.example.com"], "registry.example.com.evil.io/x", False),
        (["registry.example.com"], "registry.example.comx/x:1", False),
        (["registry.example.com"], "evil.io/registry.example.com/x:1", False),
        (["registry.example.com"], "registry.example.com:5000/x:1", False),  # another registry
        (["registry.example.com:5000"], "registry.example.com:5000/x:1", True),
        # a repository path: itself (any tag or digest) and what is below it
        (["registry.example.com/team-a"], "registry.example.com/team-a/train:1", True),
        (["registry.example.com/team-a"], "registry.example.com/team-a:1", True),
        (["registry.example.com/team-a"], "registry.example.com/team-a", True),
        (["registry.example.com/team-a"], "registry.example.com/team-ab/train:1", False),
        (["registry.example.com/team-a"], "registry.example.com/team-b/train:1", False),
        (["registry.example.com/team-a/"], "registry.example.com/team-a/train:1", True),
        # Docker Hub short names are what the kubelet pulls: docker.io/<ns>/<name>
        (["docker.io/pytorch"], "pytorch/pytorch:2.4-cuda12.4", True),
        (["docker.io/library/busybox"], "busybox:1.36", True),
        (["docker.io/library"], "busybox:1.36", True),
        (["docker.io/pytorch"], "pytorch.evil.io/pytorch:1", False),
        (["docker.io/pytorch"], "index.docker.io/pytorch/pytorch:1", True),
        (["pytorch"], "pytorch/pytorch:1", False),  # an entry names a registry first
        # the older spelling "<prefix>/*" means the same prefix; "*" alone allows any image
        (["registry.example.com/*"], "registry.example.com/ml/train:1", True),
        (["registry.example.com/*"], "registry.example.com.evil.io/ml/train:1", False),
        (["*"], "anything.example.org/x:1", True),
        # several entries: any one is enough
        (["nvcr.io/nvidia", "registry.k8s.io"], "registry.k8s.io/pause:3.10", True),
        (["nvcr.io/nvidia", "registry.k8s.io"], "nvcr.io/nvidian/x:1", False),
    ],
)
def test_entries_are_prefixes_that_end_at_a_path_boundary(settings, entries, image, ok):
    settings.WORKLOAD_IMAGE_ALLOWLIST = entries
    assert allowed(image) is ok


def test_an_empty_allow_list_refuses_every_image_and_names_the_setting(settings):
    settings.WORKLOAD_IMAGE_ALLOWLIST = []
    for image in ("registry.k8s.io/pause:3.10", "busybox:1.36", "registry.example.com/x:1"):
        with pytest.raises(InvalidInput, match="WORKLOAD_IMAGE_ALLOWLIST") as exc:
            check_image(image)
        assert exc.value.code == "image_not_allowed" and exc.value.field == "image"


def test_a_refused_image_says_which_entries_would_be_accepted(settings):
    settings.WORKLOAD_IMAGE_ALLOWLIST = ["registry.example.com/team-a"]
    with pytest.raises(InvalidInput) as exc:
        check_image("registry.example.com.evil.io/team-a/x:1")
    assert "registry.example.com/team-a" in exc.value.detail
    assert "WORKLOAD_IMAGE_ALLOWLIST" in exc.value.detail
