"""GPU health signals and what the policy makes of them (pure: no Django, no cluster).

dcgm-exporter writes one series per GPU, labelled with the node (`Hostname`), the GPU's index
(`gpu`) and `UUID`. From them and from the node's allocatable the portal reads, per GPU:

- `xid`: `DCGM_FI_DEV_XID_ERRORS`, a gauge holding the code of the last XID error (0: none);
- `gpu_temp`, `memory_temp`: degrees C (DCGM's "blank" values, above 2^62, are no reading);
- `ecc_uncorrectable`: double-bit volatile ECC errors in the window (a counter's increase);
- `row_remap_failure`: 1 when remapping a row of HBM failed;
- `power_throttle`: the share of the window the GPU was held back by its power limit;
- `nvlink_errors`: NVLink CRC data errors in the window;
- `gpu_missing` (per node): GPUs the node's labels say it has but its allocatable lacks.

Each rule of the policy watches one signal and says warn, taint or drain. A threshold rule fires
at `value >= threshold` and is clear only below `clear_below` (hysteresis: a reading that hovers
at the threshold neither fires nor clears); an XID rule fires while the gauge holds its code. A
rule's event is opened once and closed once: warnings close themselves after the signal has been
clear for `clear_after_s`; taints and drains close when a platform admin acknowledges them, or,
where the rule allows auto-recovery, after `clear_after_s` of clear signal. An acknowledged
event whose signal still fires is latched: the same reading opens no new event until it has been
seen clear once (the XID gauge keeps its last code until the GPU is reset).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

SIGNALS = (
    "xid",
    "gpu_temp",
    "memory_temp",
    "ecc_uncorrectable",
    "row_remap_failure",
    "power_throttle",
    "nvlink_errors",
    "gpu_missing",
)
ACTIONS = ("warn", "taint", "drain")
SEVERITY = {"warn": 0, "taint": 1, "drain": 2}
# DCGM writes a "blank" (no value) as a number near 2^63; anything this large is no reading.
DCGM_BLANK_FLOOR = Decimal(2) ** 62

# What the XID codes of the default policy mean (NVIDIA's XID catalog), for messages.
XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    63: "row remapping pending",
    64: "row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


@dataclass(frozen=True)
class Reading:
    node: str
    gpu: str  # the GPU's index on the node; "" for a node-wide reading (gpu_missing)
    uuid: str
    signal: str
    value: Decimal


@dataclass(frozen=True)
class Rule:
    id: int
    signal: str
    action: str
    xid_code: int | None = None  # xid rules: the code; None: every code no other rule names
    threshold: Decimal | None = None
    clear_below: Decimal | None = None  # None: clear below the threshold
    auto_recover: bool = False
    clear_after_s: int = 300
    waive_billing: bool = False

    @property
    def clear_level(self) -> Decimal | None:
        return self.clear_below if self.clear_below is not None else self.threshold


def parse_value(raw: object) -> Decimal | None:
    """A sample's value as Prometheus sends it ("79", "1e+00", "NaN"); None for no reading."""
    try:
        value = Decimal(str(raw))
    except (InvalidOperation, ValueError):
        return None
    if not value.is_finite() or abs(value) >= DCGM_BLANK_FLOOR:
        return None
    return value


class Status(enum.Enum):
    FIRING = "firing"
    HOLDING = "holding"  # between clear_below and threshold: neither fires nor clears
    CLEAR = "clear"


def xid_rule_for(code: int, rules: Iterable[Rule]) -> Rule | None:
    """The rule that names this code, else the catch-all XID rule, else none."""
    xid_rules = [r for r in rules if r.signal == "xid"]
    for rule in xid_rules:
        if rule.xid_code == code:
            return rule
    for rule in xid_rules:
        if rule.xid_code is None:
            return rule
    return None


def status(rule: Rule, reading: Reading | None, rules: Iterable[Rule]) -> Status:
    """Where one GPU stands against one rule. A missing reading is clear (the caller decides
    whether the node was read at all)."""
    if reading is None:
        return Status.CLEAR
    if rule.signal == "xid":
        code = int(reading.value)
        if code and xid_rule_for(code, rules) == rule:
            return Status.FIRING
        return Status.CLEAR
    if rule.threshold is None:
        return Status.CLEAR
    if reading.value >= rule.threshold:
        return Status.FIRING
    clear_level = rule.clear_level
    if clear_level is not None and reading.value < clear_level:
        return Status.CLEAR
    return Status.HOLDING


EventKey = tuple[str, str, int]  # (node, gpu, rule id)


@dataclass
class OpenEvent:
    """What the transition needs of a stored event (open, or closed but latched)."""

    key: EventKey
    action: str
    opened_at: datetime
    clear_since: datetime | None = None
    closed: bool = False
    latched: bool = False


class Step(enum.Enum):
    OPEN = "open"  # a new event
    FIRING = "firing"  # still firing: forget any clear spell
    CLEARING = "clearing"  # clear (or holding after a clear) since clear_since: wait
    START_CLEAR = "start-clear"  # seen clear for the first time: clear_since = now
    CLOSE = "close"  # closes itself: a warning clear long enough, or an auto-recovery
    UNLATCH = "unlatch"  # an acknowledged event's signal was seen clear: it may fire again
    NOTHING = "nothing"


def step(event: OpenEvent | None, rule: Rule, now_status: Status, now: datetime) -> Step:
    """The one transition of one (GPU, rule) pair per ingest: hysteresis, latching and the
    clear spell that a closing waits for."""
    if event is None:
        return Step.OPEN if now_status is Status.FIRING else Step.NOTHING
    if event.closed:
        if event.latched and now_status is Status.CLEAR:
            return Step.UNLATCH
        return Step.NOTHING  # latched and still firing (or holding): the admin saw it
    if now_status is Status.FIRING:
        return Step.FIRING
    if now_status is Status.HOLDING:
        # Between the two levels: a clear spell that began keeps running, none begins.
        return Step.CLEARING if event.clear_since else Step.NOTHING
    if event.clear_since is None:
        return Step.START_CLEAR if rule.clear_after_s > 0 else _closing(rule, event)
    if now - event.clear_since >= timedelta(seconds=rule.clear_after_s):
        return _closing(rule, event)
    return Step.CLEARING


def _closing(rule: Rule, event: OpenEvent) -> Step:
    if event.action == "warn" or rule.auto_recover:
        return Step.CLOSE
    return Step.CLEARING  # a taint or drain waits for an admin


@dataclass
class Findings:
    """One ingest's readings against the rules: per (node, gpu, rule) its status, and the
    readings that fired (for values and messages)."""

    statuses: dict[EventKey, Status] = field(default_factory=dict)
    readings: dict[EventKey, Reading] = field(default_factory=dict)
    nodes_read: set[str] = field(default_factory=set)


def evaluate(
    readings: Iterable[Reading], rules: list[Rule], gpus: Mapping[str, set[str]]
) -> Findings:
    """Statuses of every rule on every GPU seen. `gpus`: node -> GPU indexes the caller knows
    of (from earlier events), so a GPU whose series vanished reads clear, not unknown."""
    by_gpu: dict[tuple[str, str, str], Reading] = {}
    found = Findings()
    for reading in readings:
        if reading.gpu != "":
            found.nodes_read.add(reading.node)
        by_gpu[(reading.node, reading.gpu, reading.signal)] = reading
    targets = {(node, gpu) for node, gpu, _ in by_gpu} | {
        (node, gpu) for node, indexes in gpus.items() for gpu in indexes
    }
    for node, gpu in targets:
        if gpu != "" and node not in found.nodes_read:
            continue  # no DCGM series from this node: its health is unknown, not clear
        if gpu == "" and (node, "", "gpu_missing") not in by_gpu:
            continue  # the node itself was not read (gone from the API server)
        for rule in rules:
            if (rule.signal == "gpu_missing") != (gpu == ""):
                continue  # node-wide rules read the node, the others its GPUs
            seen = by_gpu.get((node, gpu, rule.signal))
            key = (node, gpu, rule.id)
            found.statuses[key] = status(rule, seen, rules)
            if seen is not None:
                found.readings[key] = seen
    return found


def missing_gpus(labels: Mapping[str, str], allocatable: Mapping[str, int]) -> int | None:
    """GPUs a whole-GPU node's labels count but its allocatable lacks (a GPU the device plugin
    dropped: fallen off the bus, failed health check). None where the node partitions or shares
    its GPUs, whose allocatable counts instances or replicas, not GPUs."""
    try:
        count = int(labels.get("nvidia.com/gpu.count", "0"))
    except ValueError:
        return None
    if count <= 0:
        return None
    if labels.get("nvidia.com/mig.config", "all-disabled") not in ("", "all-disabled"):
        return None
    if labels.get("nvidia.com/gpu.sharing-strategy", "none") not in ("", "none"):
        return None
    return max(count - int(allocatable.get("nvidia.com/gpu", 0)), 0)


def describe(rule: Rule, reading: Reading | None) -> str:
    """What a person reads: "XID 79 (GPU has fallen off the bus)", "GPU temperature 96 C"."""
    value = reading.value if reading is not None else None
    if rule.signal == "xid":
        code = int(value) if value is not None else rule.xid_code
        name = XID_NAMES.get(code or 0)
        return f"XID {code}" + (f" ({name})" if name else "")
    shown = "" if value is None else f" {value.normalize():f}"
    return {
        "gpu_temp": f"GPU temperature{shown} °C",
        "memory_temp": f"memory temperature{shown} °C",
        "ecc_uncorrectable": f"uncorrectable ECC errors:{shown}",
        "row_remap_failure": "a failed HBM row remapping",
        "power_throttle": f"power throttling{shown} of the time",
        "nvlink_errors": f"NVLink errors:{shown}",
        "gpu_missing": f"GPUs missing from allocatable:{shown}",
    }.get(rule.signal, rule.signal)


def where(node: str, gpu: str) -> str:
    return f"GPU {gpu} on node {node}" if gpu != "" else f"node {node}"


# The defaults the console starts from. XID codes by the resolution NVIDIA's XID catalog gives:
# a GPU reset or node reboot (48, 64, 74, 79, 95, 119, 120) drains; a reset that can wait for
# running work (63 row remap pending, 94 contained ECC: only the application that hit it died)
# taints; application-level codes (13, 31, 43, 45, 92 and any other) warn.
def default_rules() -> list[dict]:
    drain = dict(action="drain", waive_billing=True)
    taint = dict(action="taint", waive_billing=True)
    rules: list[dict] = [
        dict(signal="xid", xid_code=code, **drain) for code in (48, 64, 74, 79, 95, 119, 120)
    ]
    rules += [dict(signal="xid", xid_code=code, **taint) for code in (63, 94)]
    rules += [dict(signal="xid", xid_code=None, action="warn")]
    rules += [
        dict(signal="ecc_uncorrectable", threshold=Decimal(1), clear_below=Decimal(1), **drain),
        dict(signal="row_remap_failure", threshold=Decimal(1), clear_below=Decimal(1), **drain),
        dict(signal="gpu_temp", threshold=Decimal(85), clear_below=Decimal(80), action="warn"),
        dict(
            signal="gpu_temp",
            threshold=Decimal(95),
            clear_below=Decimal(85),
            action="taint",
            auto_recover=True,
            clear_after_s=600,
        ),
        dict(signal="memory_temp", threshold=Decimal(95), clear_below=Decimal(90), action="warn"),
        dict(
            signal="power_throttle",
            threshold=Decimal("0.5"),
            clear_below=Decimal("0.3"),
            action="warn",
        ),
        dict(signal="nvlink_errors", threshold=Decimal(1), clear_below=Decimal(1), action="warn"),
        dict(
            signal="gpu_missing",
            threshold=Decimal(1),
            clear_below=Decimal(1),
            action="taint",
            auto_recover=True,
            clear_after_s=300,
            waive_billing=True,
        ),
    ]
    return rules
