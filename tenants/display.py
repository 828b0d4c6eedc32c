"""One vocabulary on the pages: resource classes by the catalog's display names, also inside
the sentences the policy and the advice write with slugs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from catalog.models import ResourceClass


def class_names(slugs: Iterable[str] | None = None) -> dict[str, str]:
    """slug -> display name of every resource class, or of those `slugs` name (one query)."""
    classes = (
        ResourceClass.objects.all()
        if slugs is None
        else ResourceClass.objects.filter(slug__in=list(slugs))
    )
    return {rc.slug: rc.display_name for rc in classes}


def readable(text: str, names: Mapping[str, str]) -> str:
    """`text` with each whole class slug in it replaced by its display name (longest first, so
    `a100-80gb-mig-1g.10gb.me` is not read as `a100-80gb-mig-1g.10gb` followed by `.me`)."""
    if not text or not names:
        return text
    slugs = sorted((s for s in names if s in text), key=len, reverse=True)
    if not slugs:
        return text
    pattern = re.compile(
        r"(?<![\w.-])(" + "|".join(re.escape(s) for s in slugs) + r")(?![\w-]|\.\w)"
    )
    return pattern.sub(lambda m: names[m.group(1)], text)


def readable_all(texts: Iterable[str], names: Mapping[str, str]) -> list[str]:
    return [readable(t, names) for t in texts]
