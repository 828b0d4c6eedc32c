"""Kubernetes names derived from user input: DNS-1123 safe, with a short hash suffix when they had
to be shortened or changed, so that distinct inputs stay distinct."""

import hashlib
import re

_DNS_UNSAFE = re.compile(r"[^a-z0-9-]+")


def dns_label(value: str, max_len: int = 63) -> str:
    """A DNS-1123 label from any string: lower case, [a-z0-9-], trimmed, and when it had to be
    shortened or changed, a short hash of the original keeps distinct inputs distinct."""
    cleaned = _DNS_UNSAFE.sub("-", value.lower()).strip("-") or "x"
    if cleaned == value and len(value) <= max_len:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{cleaned[: max_len - 9].rstrip('-')}-{digest}"


def namespace_name(slug: str, prefix: str = "tenant-") -> str:
    return dns_label(f"{prefix}{slug}")
