"""The allow-list rule the cluster applies (spellings rendered into the queue guard) agrees with
the portal's (`image_allowed_by`) on every image, so kubectl gets no further than the API."""

import pytest

from core.images import allowlist_spellings, image_allowed_by

ENTRIES = [
    ["registry.example.com"],
    ["registry.example.com/team-a"],
    ["docker.io/pytorch"],
    ["docker.io/pytorch/pytorch"],
    ["docker.io/library/busybox"],
    ["docker.io"],
    ["index.docker.io/nvidia/"],
    ["localhost:5000"],
    ["nvcr.io/nvidia/*", "registry.example.com/team-a"],
]
IMAGES = [
    "registry.example.com/team/img:tag",
    "registry.example.com",
    "registry.example.com.evil.io/x",
    "registry.example.com:5000/x",
    "registry.example.com/team-a/img@sha256:abc",
    "registry.example.com/team-ab/img",
    "registry.example.com/team-a:1",
    "pytorch/pytorch:2.4",
    "pytorch/other",
    "pytorch",
    "pytorch:2",
    "docker.io/pytorch/pytorch",
    "docker.io/pytorch",
    "docker.io/pytorch:1",
    "docker.io/library:1",
    "index.docker.io/pytorch/pytorch:1",
    "registry-1.docker.io/pytorch/x",
    "busybox",
    "busybox:1.36",
    "busybox@sha256:abc",
    "busybox/evil",
    "docker.io/busybox:1",
    "docker.io/library/busybox",
    "library/busybox:1",
    "busyboxes",
    "nvidia/cuda:12",
    "nvcr.io/nvidia/tritonserver:24.08-py3",
    "nvcr.io/nvidia",
    "nvcr.io/nvidiax/y",
    "localhost:5000/img",
    "localhost/img",
    "evil.io/pytorch/pytorch",
    "quay.io/x/y",
]


@pytest.mark.parametrize("entries", ENTRIES, ids=lambda e: ",".join(e))
def test_the_cluster_rule_allows_exactly_what_the_portal_allows(entries):
    rules = allowlist_spellings(entries)
    for image in IMAGES:
        portal = any(image_allowed_by(image, e) for e in entries)
        assert rules.allows(image) == portal, image


def test_a_star_allows_everything_and_an_empty_list_nothing():
    assert allowlist_spellings(["*"]).allow_all
    assert not any(allowlist_spellings([]).allows(i) for i in IMAGES)
