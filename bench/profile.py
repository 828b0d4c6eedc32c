"""py-spy on the gunicorn workers during a bench run: collapsed stacks in a folder and their top
frames, by own time and by time spent inside (for `python -m bench --only api --profile DIR`)."""

from __future__ import annotations

import collections
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

# Frames every call passes through and that say nothing of where its time goes.
_WRAPPERS = ("gunicorn/", "threading.py", "concurrent/futures", "selectors.py", "socket.py")


def start(master_pid: int, folder: Path, label: str) -> subprocess.Popen:
    """Sample the master and its workers until `stop`: py-spy, without pausing them, only the
    thread holding the GIL (where the CPU goes, not where threads wait)."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            py_spy, "record", "--pid", str(master_pid), "--subprocesses", "--nonblocking",
            "--gil", "--rate", "200", "--format", "raw", "--output", str(folder / f"{label}.txt"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop(sampler: subprocess.Popen) -> None:
    sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    try:
        sampler.wait(timeout=30)
    except subprocess.TimeoutExpired:
        sampler.kill()
        sampler.wait()


def _frames(line: str) -> tuple[list[str], int]:
    """A stack's frames as `function (file)`: a function's lines add up to one frame."""
    stack, _, count = line.rpartition(" ")
    frames = [
        re.sub(r":\d+\)$", ")", f)
        for f in stack.split(";")
        if not f.startswith(("process ", "thread "))
    ]
    return frames, int(count)


def top_frames(path: Path, n: int = 15) -> tuple[int, list, list]:
    """(samples, top frames by own samples, top frames by samples with the frame on the stack)."""
    own: collections.Counter[str] = collections.Counter()
    inside: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        frames, count = _frames(line)
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            if not any(w in frame for w in _WRAPPERS):
                inside[frame] += count
    return total, own.most_common(n), inside.most_common(n)


def report(folder: Path, label: str, n: int = 15) -> None:
    path = folder / f"{label}.txt"
    if not path.exists():
        print(f"profile {label}: no samples ({path} missing)")
        return
    total, own, inside = top_frames(path, n)
    print(f"\nprofile {label}: {total} samples ({path})")
    print("  own time:")
    for frame, count in own:
        print(f"    {100 * count / max(1, total):5.1f} %  {frame}")
    print("  inside (frame on the stack):")
    for frame, count in inside:
        print(f"    {100 * count / max(1, total):5.1f} %  {frame}")
