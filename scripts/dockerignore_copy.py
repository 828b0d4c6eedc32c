"""Copy a source tree into an empty directory, leaving out what `.dockerignore` excludes, as
Docker's build context would (scripts/build_image.sh; no container engine needed).

Docker's rules: one pattern a line, `#` starts a comment, paths are relative to the context root
(a leading `/` is dropped), `*` and `?` never cross `/`, `**` spans any number of directories, a
pattern excludes what it names and everything below it, `!` re-includes, the last matching line
wins. Standard library only: it runs before any dependency is installed."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression of one `.dockerignore` pattern (without its `!`)."""
    pattern = os.path.normpath(pattern.strip().lstrip("/")).replace(os.sep, "/")
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("^") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("^" + "".join(out) + "$")


def read_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(re-include?, pattern) for each rule of a `.dockerignore` file, in order."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        rules.append((negate, compile_pattern(line[1:] if negate else line)))
    return rules


def excluded(relpath: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves `relpath` (with `/` separators) out of the context: the last rule
    that matches the path or one of its parent directories decides."""
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for negate, rx in rules:
        if any(rx.match(prefix) for prefix in prefixes):
            result = not negate
    return result


def copy_context(src: Path, dest: Path) -> int:
    """Copy what the context holds from `src` to `dest`; returns how many files."""
    ignore = src / ".dockerignore"
    rules = read_rules(ignore.read_text()) if ignore.exists() else []
    prune = not any(negate for negate, _ in rules)  # a `!` may re-include below a directory
    copied = 0
    for root, dirs, files in os.walk(src):
        rel_root = Path(root).relative_to(src).as_posix()
        base = "" if rel_root == "." else f"{rel_root}/"
        if prune:
            dirs[:] = [d for d in dirs if not excluded(base + d, rules)]
        for name in files:
            path = base + name
            if excluded(path, rules):
                continue
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(root) / name, target, follow_symlinks=False)
            copied += 1
    return copied


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: dockerignore_copy.py SRC DEST")
    count = copy_context(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
    print(f"copied {count} files")
