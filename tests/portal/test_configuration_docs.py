"""docs/configuration.md names every setting the portal reads from the environment (issue 49,
8: PLATFORM_CONTACT was read, shown on pages, and in no table an operator reads)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# env("NAME", ...), env.int("NAME", ...), env.bool(\n    "NAME", ...) in the settings modules
READ = re.compile(r"\benv(?:\.[a-z_]+)?\(\s*\"([A-Z][A-Z0-9_]*)\"")


def names_read() -> set[str]:
    found: set[str] = set()
    for module in (ROOT / "portal" / "settings").glob("*.py"):
        found.update(READ.findall(module.read_text()))
    return found


def test_every_setting_read_from_the_environment_is_documented():
    docs = (ROOT / "docs" / "configuration.md").read_text()
    names = names_read()
    assert "PLATFORM_CONTACT" in names and len(names) > 100  # the pattern finds what is read
    assert sorted(n for n in names if f"`{n}`" not in docs) == []


def test_platform_contact_is_documented_with_its_default():
    docs = (ROOT / "docs" / "configuration.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `PLATFORM_CONTACT` |"))
    assert "`mailto:gpu-platform@localhost`" in row
