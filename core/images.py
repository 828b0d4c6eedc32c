"""Image references against the platform's allow-list (WORKLOAD_IMAGE_ALLOWLIST), pure: the
portal checks a submit with `image_allowed_by`; the cluster checks every pod a team creates with
the same rule, rendered as spellings (`allowlist_spellings`) into the queue guard policy, so a
member with kubectl cannot run an image the portal would refuse."""

from __future__ import annotations

from dataclasses import dataclass, field

ALLOW_ANY_IMAGE = "*"  # an allow-list entry that lets every image through (dev and tests)
DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")


def canonical_image(image: str) -> str:
    """The reference as the kubelet resolves it: a short Docker Hub name (`busybox:1.36`,
    `pytorch/pytorch`) gets its registry and, alone, the `library/` namespace."""
    host, slash, path = image.partition("/")
    # Docker's rule: the first component is a registry only if it looks like a host name.
    if not slash or not ("." in host or ":" in host or host == "localhost"):
        host, path = DOCKER_HUB, image
    host = DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return f"{host}/{path}"


def image_allowed_by(image: str, entry: str) -> bool:
    """An entry is a registry (`registry.example.com`, `localhost:5000`) or a repository prefix
    (`registry.example.com/team-a`, `docker.io/pytorch`) that ends at a path boundary, so
    `registry.example.com` does not let `registry.example.com.evil.io/x` through. `*` allows any
    image; a trailing `/*` (the older spelling) is the same prefix."""
    entry = normal_entry(entry)
    if entry == ALLOW_ANY_IMAGE:
        return True
    if not entry:
        return False
    slash = "/" in entry
    image = canonical_image(image)
    if image == entry or image.startswith(entry + "/"):
        return True
    # A repository covers its own tags and digests; after a bare host a ':' starts a port,
    # which is another registry.
    return bool(slash) and image.startswith((entry + ":", entry + "@"))


def normal_entry(entry: str) -> str:
    """An allow-list entry without a trailing `/*` or `/`, Docker Hub's aliases as docker.io."""
    entry = entry.strip().removesuffix("/*").rstrip("/")
    host, slash, path = entry.partition("/")
    return f"{DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host}{slash}{path}"


@dataclass
class Spellings:
    """What an image reference, as written in a pod, must equal or start with to be allowed:
    every way of writing the entries (Docker Hub's aliases and short names included)."""

    allow_all: bool = False
    exact: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    any_hub_short: bool = False  # a whole-hub entry: any reference without a registry host
    any_library_short: bool = False  # docker.io/library: any one-component reference

    def allows(self, image: str) -> bool:
        """The rule as the cluster applies it (the policy's CEL says the same)."""
        first, slash, _ = image.partition("/")
        return (
            self.allow_all
            or image in self.exact
            or any(image.startswith(p) for p in self.prefixes)
            or (self.any_library_short and not slash)
            or (
                self.any_hub_short
                and (not slash or not ("." in first or ":" in first or first == "localhost"))
            )
        )


def allowlist_spellings(entries) -> Spellings:
    rules = Spellings()
    for raw in entries:
        entry = normal_entry(raw)
        if entry == ALLOW_ANY_IMAGE:
            return Spellings(allow_all=True)
        if not entry:
            continue
        host, slash, path = entry.partition("/")
        written = [entry]
        if host == DOCKER_HUB:
            written += [f"{alias}{slash}{path}" for alias in _DOCKER_HUB_ALIASES]
            if not slash:
                rules.any_hub_short = True
            elif path == "library":
                rules.any_library_short = True
                rules.prefixes.add("library/")
            elif path.startswith("library/") and "/" not in path.removeprefix("library/"):
                short = path.removeprefix("library/")  # busybox: that repository only
                for spelling in (
                    short,
                    *(f"{h}/{short}" for h in (DOCKER_HUB, *_DOCKER_HUB_ALIASES)),
                ):
                    rules.exact.add(spelling)
                    rules.prefixes |= {f"{spelling}:", f"{spelling}@"}
                written.append(path)
            elif "/" in path:
                written.append(path)  # pytorch/pytorch: a repository under a short name
            else:
                rules.prefixes.add(f"{path}/")  # pytorch: a namespace on the hub
        # a repository, with its tags and digests; a bare host or a hub namespace is no image
        repository = bool(slash) and (host != DOCKER_HUB or "/" in path)
        for w in written:
            rules.prefixes.add(f"{w}/")
            if repository:
                rules.exact.add(w)
                rules.prefixes |= {f"{w}:", f"{w}@"}
    return rules
