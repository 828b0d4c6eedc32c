"""Where the machine's CPU went during a phase of the scale bench: CPU seconds per command
(etcd, kube-apiserver, Kueue, PostgreSQL, this bench, ...) from /proc, before and after. On 2
shared cores this says which part limits a figure, and whether other work was running beside."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

SELF = "this bench"


def parse_stat(text: str) -> tuple[str, float]:
    """(command, CPU ticks of user + system) from one /proc/PID/stat line (pure). The command
    is in parentheses and may hold spaces or parentheses itself: split at the last one."""
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    return head.partition("(")[2], float(fields[11]) + float(fields[12])  # utime, stime


def cpu_by_command(proc: Path = Path("/proc")) -> dict[str, float]:
    tick = os.sysconf("SC_CLK_TCK")
    me = str(os.getpid())
    out: defaultdict[str, float] = defaultdict(float)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command, ticks = parse_stat((entry / "stat").read_text())
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        if command.startswith("kworker/"):  # the kernel's, one per CPU and purpose
            command = "kworker"
        out[SELF if entry.name == me else command] += ticks / tick
    return dict(out)


def process_cpu_s() -> float:
    """This process's CPU seconds, user + system, every thread's (those ended too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def threads_cpu_s(threads: Iterable[threading.Thread]) -> float:
    """CPU seconds, user + system, of these running threads of this process so far (with the
    caller's own, where it is one of them)."""
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        for t in threads
        if t.ident is not None and t.is_alive()
    )


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each command spent between two readings (pure; those that exited between
    them are lost, those that started count whole)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v > before.get(k, 0.0)}


def lines(label: str, used: dict[str, float], wall_s: float, top: int = 8) -> list[str]:
    total = sum(used.values())
    head = f"CPU during {label}: {total:.0f} s in {wall_s:.0f} s of wall time"
    rows = [head + f" ({total / wall_s:.2f} cores of {os.cpu_count()})" if wall_s > 0 else head]
    rows += [f"  {name:<24} {secs:8.1f} s  {secs / wall_s:5.2f} cores" for name, secs in
             sorted(used.items(), key=lambda kv: -kv[1])[:top]]  # fmt: skip
    return rows
