"""The house's rules that no import contract states, checked on the source (pure): a module's
first line says what it owns, two modules of one package never differ by an ending only, and
no module grows past 500 lines."""

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "catalog", "portal", "tenants", "scheduler", "metering", "workspaces")
# The rooms reorganised by concept (issue 45): each module says what it owns in its first line.
ROOMS = ("catalog", "scheduler/workloads", "workspaces")
MAX_LINES = 500


def modules(*tops: str) -> list[Path]:
    return sorted(
        path
        for top in tops
        for path in (ROOT / top).rglob("*.py")
        if "migrations" not in path.parts
    )


def packages(*tops: str) -> dict[Path, list[str]]:
    found: dict[Path, list[str]] = {}
    for path in modules(*tops):
        found.setdefault(path.parent, []).append(path.stem)
    return found


def endings_only(a: str, b: str) -> bool:
    """`a` and `b` are one word with different endings (reclaim/reclaiming, culls/culling,
    waiting/waiting_facts): one starts with the other, or they share all but a short ending."""
    short, long = sorted((a.replace("_", ""), b.replace("_", "")), key=len)
    if long.startswith(short):
        return True
    stem = os.path.commonprefix([short, long])
    return len(stem) >= 4 and len(short) - len(stem) <= 2


@pytest.mark.parametrize("path", modules(*ROOMS), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_of_the_rooms_says_what_it_owns_first(path):
    tree = ast.parse(path.read_text())
    if not tree.body and path.name == "__init__.py":
        pytest.fail(f"{path.relative_to(ROOT)}: say what the package holds in its docstring")
    assert ast.get_docstring(tree), f"{path.relative_to(ROOT)} starts without a docstring"


def test_no_two_modules_of_a_package_differ_by_their_ending_only():
    clashes = [
        f"{folder.relative_to(ROOT)}: {a}.py and {b}.py"
        for folder, names in packages(*APPS).items()
        for i, a in enumerate(sorted(names))
        for b in sorted(names)[i + 1 :]
        if "__init__" not in (a, b) and endings_only(a, b)
    ]
    assert clashes == []


def test_the_rule_catches_the_pairs_it_is_for():
    for a, b in [("reclaim", "reclaiming"), ("culls", "culling"), ("waiting", "waiting_facts")]:
        assert endings_only(a, b), (a, b)
    for a, b in [("grace", "reclaim"), ("waiting", "outlook"), ("idle", "leftovers")]:
        assert not endings_only(a, b), (a, b)


def test_no_module_of_the_apps_is_over_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules(*APPS)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
