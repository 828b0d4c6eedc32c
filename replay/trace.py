"""Reader for the Alibaba GPU cluster trace 2023 (the FGD paper's `openb` CSVs), pure Python.

The trace is read at run time from a folder given by the caller (default: `DEFAULT_TRACE_DIR`)
and never copied into the project: it carries no licence. Every malformed cell is refused with a
`TraceError` whose text is `PATH:LINE:COLUMN (column name): what is wrong; what was expected`,
line and column 1-based (the column is the field's position in its row), so a person can open
the file at the spot.

Columns are found by header name (any order; extra columns are ignored):
- pods: `name,cpu_milli,memory_mib,num_gpu` always, then `gpu_milli,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time` where the file has them (times in seconds;
  `scheduled_time` and `deletion_time` may be empty, e.g. for pods still pending when the trace
  was cut). The family's pod lists do not all carry every column (the simulator's
  `openb_pod_list_multigpu*.csv` stop at `gpu_milli`); a missing optional column takes the
  trace tooling's default (`POD_DEFAULTS`);
- nodes: `sn,cpu_milli,memory_mib,gpu,model`.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_DIR = Path(
    os.environ.get("REPLAY_TRACE_DIR")
    or REPO_ROOT.parent / "shared" / "data" / "traces" / "alibaba-gpu-v2023"
)
POD_FILE = "openb_pod_list_default.csv"
NODE_FILE = "openb_node_list_gpu_node.csv"

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu")
# What a pod list without the column means, as the trace's own tooling reads it
# (hkust-adsl/kubernetes-scheduler-simulator, data/pod_csv_to_yaml.py and data/README.md):
# no `gpu_milli` asks whole GPUs; no `gpu_spec` (or `nan`) is no model constraint. The README
# documents no default for `qos`, `pod_phase` or the times: they read as unknown (empty, None),
# and a pod without times is not `timed`, so an over-time replay cannot use it.
POD_DEFAULTS = {
    "gpu_milli": "whole GPUs: 1000 per GPU asked, 0 without GPUs",
    "gpu_spec": "any model",
    "qos": "unknown (empty)",
    "pod_phase": "unknown (empty)",
    "creation_time": "unknown (0, and the pod is not timed)",
    "deletion_time": "unknown (None)",
    "scheduled_time": "unknown (None)",
}
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

FULL_GPU_MILLI = 1000
MIG_COMPUTE_PROFILES = (1, 2, 3, 4, 7)  # compute slices of the A100/H100 MIG profiles
MIG_MEMORY_PROFILES = (1, 2, 4, 8)  # memory slices of the same profiles (of 8)

_INTEGER = re.compile(r"-?[0-9]+")


class TraceError(ValueError):
    """A trace file that cannot be read. `str()` is `PATH:LINE:COLUMN (column name): what is
    wrong; what was expected`; problems of the whole file (missing, a directory) have no line:
    `PATH: what is wrong`."""

    def __init__(
        self,
        path: Path | str,
        line: int | None,
        column: int | None,
        message: str,
        field: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}:{column or 1}"
        if field:
            where += f" ({field})"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class TracePod:
    name: str
    line: int  # 1-based line of the file, for messages
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; 1000 is a whole GPU
    gpu_spec: str  # allowed GPU models, `|`-separated; empty: any
    qos: str
    phase: str
    creation: int
    deletion: int | None
    scheduled: int | None
    timed: bool = True  # the file had `creation_time`: `creation` is the trace's, not a default

    @property
    def gpu_request_milli(self) -> int:
        """What load ρ and A_req count: thousandths of a GPU over all the pod's GPUs."""
        return self.num_gpu * self.gpu_milli

    @property
    def fractional(self) -> bool:
        """A shared-GPU ask: part of one GPU."""
        return self.num_gpu == 1 and self.gpu_milli < FULL_GPU_MILLI

    @cached_property  # asked at every placement try: parse gpu_spec once
    def models(self) -> frozenset[str]:
        """The trace models `gpu_spec` allows (`V100M16|V100M32`); empty: any model. Empty
        names are dropped and `nan` is no constraint, as the trace's tooling reads the column."""
        names = {m.strip() for m in self.gpu_spec.split("|")}
        return frozenset(m for m in names if m and m.lower() != "nan")

    @property
    def run_seconds(self) -> int | None:
        if self.deletion is None or self.scheduled is None:
            return None
        return self.deletion - self.scheduled


@dataclass(frozen=True)
class TraceNode:
    name: str
    line: int
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # the trace's model name (P100, T4, V100M16, G2, ...), not a catalog key


class _Row:
    """One data row with its header positions, turning cells into checked values."""

    def __init__(self, path: Path, line: int, cells: list[str], columns: dict[str, int]) -> None:
        self.path, self.line, self.cells, self.columns = path, line, cells, columns

    def error(self, column: str, message: str) -> TraceError:
        position = self.columns[column]
        return TraceError(self.path, self.line, position + 1, message, field=column)

    def has(self, column: str) -> bool:
        return column in self.columns

    def text(self, column: str, required: bool = False) -> str:
        if not self.has(column) and not required:
            return ""
        value = self.cells[self.columns[column]]
        if required and not value.strip():
            raise self.error(column, "is empty; expected a value")
        return value

    def integer(self, column: str, optional: bool = False) -> int | None:
        if optional and not self.has(column):
            return None
        value = self.cells[self.columns[column]]
        if value == "" and optional:
            return None
        if not _INTEGER.fullmatch(value):
            expected = "an integer ≥ 0 or empty" if optional else "an integer ≥ 0"
            raise self.error(column, f"{value!r} is not an integer; expected {expected}")
        number = int(value)
        if number < 0:
            raise self.error(column, f"{value!r} is negative; expected an integer ≥ 0")
        return number

    def count(self, column: str) -> int:
        number = self.integer(column)
        assert number is not None  # not optional: integer() raised on an empty cell
        return number


def _read_rows(path: Path | str, required: Sequence[str], known: Sequence[str] = ()) -> list[_Row]:
    """Decode, parse and check the shape of a CSV file: header columns, field counts."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(path, None, None, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, None, None, "is a directory; expected a CSV file") from None
    except OSError as exc:
        raise TraceError(path, None, None, f"cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        line = raw.count(b"\n", 0, exc.start) + 1
        column = raw.count(b",", line_start, exc.start) + 1
        bad = raw[exc.start : exc.end]
        raise TraceError(
            path, line, column, f"byte {bad!r} is not UTF-8; expected UTF-8 text"
        ) from None
    if not text.strip():
        raise TraceError(path, 1, 1, f"is empty; expected a header with {', '.join(required)}")

    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[_Row] = []
    columns: dict[str, int] = {}
    width = 0
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or cells == [""]:
                continue  # blank lines, e.g. a trailing one
            if not columns:
                names = [c.strip() for c in cells]
                for position, name in enumerate(names):
                    if (name in required or name in known) and name in columns:
                        raise TraceError(path, line, position + 1, f"duplicate column {name!r}")
                    columns.setdefault(name, position)
                missing = [c for c in required if c not in columns]
                if missing:
                    raise TraceError(
                        path,
                        line,
                        len(names) + 1,
                        f"header lacks column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(repr, missing))}; expected "
                        f"columns {', '.join(required)} (any order)",
                    )
                width = len(names)
                continue
            if len(cells) != width:
                raise TraceError(
                    path,
                    line,
                    min(len(cells), width) + 1,
                    f"{len(cells)} fields; expected {width}, as in the header",
                )
            rows.append(_Row(path, line, cells, columns))
    except csv.Error as exc:
        raise TraceError(path, reader.line_num, 1, f"not valid CSV: {exc}") from None
    if not rows:
        raise TraceError(path, reader.line_num + 1, 1, "no rows after the header")
    return rows


def _unique(column: str, what: str) -> Callable[[_Row, str], None]:
    first_line: dict[str, int] = {}

    def check(row: _Row, name: str) -> None:
        if name in first_line:
            raise row.error(column, f"{what} {name!r} again (first on line {first_line[name]})")
        first_line[name] = row.line

    return check


def read_pods(path: Path | str) -> list[TracePod]:
    """Every pod of a pod list, GPU and non-GPU alike, in file order. Columns after
    `num_gpu` may be absent from the header (`POD_DEFAULTS`); a column that is there is checked
    cell by cell as ever."""
    rows = _read_rows(path, POD_REQUIRED, POD_COLUMNS)
    check_unique = _unique("name", "pod name")
    pods = []
    for row in rows:
        name = row.text("name", required=True)
        check_unique(row, name)
        num_gpu = row.count("num_gpu")
        if row.has("gpu_milli"):
            gpu_milli = row.count("gpu_milli")
        else:
            gpu_milli = FULL_GPU_MILLI if num_gpu else 0
        if num_gpu and not 0 < gpu_milli <= FULL_GPU_MILLI:
            raise row.error("gpu_milli", f"{gpu_milli} with num_gpu {num_gpu}; expected 1..1000")
        if num_gpu > 1 and gpu_milli != FULL_GPU_MILLI:
            # A multi-GPU ask is whole GPUs in the paper's model; a share of several is undefined.
            raise row.error("gpu_milli", f"{gpu_milli} with num_gpu {num_gpu}; expected 1000")
        if not num_gpu and gpu_milli:
            raise row.error("gpu_milli", f"{gpu_milli} with num_gpu 0; expected 0")
        timed = row.has("creation_time")
        creation = row.count("creation_time") if timed else 0
        scheduled = row.integer("scheduled_time", optional=True)
        deletion = row.integer("deletion_time", optional=True)
        if deletion is not None and deletion < creation:
            raise row.error(
                "deletion_time", f"{deletion} is before creation_time {creation}; expected later"
            )
        if scheduled is not None and scheduled < creation:
            raise row.error(
                "scheduled_time", f"{scheduled} is before creation_time {creation}; expected later"
            )
        if scheduled is not None and deletion is not None and deletion < scheduled:
            raise row.error(
                "deletion_time", f"{deletion} is before scheduled_time {scheduled}; expected later"
            )
        pods.append(
            TracePod(
                name=name,
                line=row.line,
                cpu_milli=row.count("cpu_milli"),
                memory_mib=row.count("memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=row.text("gpu_spec"),
                qos=row.text("qos"),
                phase=row.text("pod_phase"),
                creation=creation,
                deletion=deletion,
                scheduled=scheduled,
                timed=timed,
            )
        )
    return pods


def read_nodes(path: Path | str) -> list[TraceNode]:
    """Every node of a node list, in file order."""
    rows = _read_rows(path, NODE_COLUMNS)
    check_unique = _unique("sn", "node")
    nodes = []
    for row in rows:
        name = row.text("sn", required=True)
        check_unique(row, name)
        nodes.append(
            TraceNode(
                name=name,
                line=row.line,
                cpu_milli=row.count("cpu_milli"),
                memory_mib=row.count("memory_mib"),
                gpus=row.count("gpu"),
                model=row.text("model"),
            )
        )
    return nodes


def _round_up(needed: int, sizes: Sequence[int]) -> int:
    for size in sizes:
        if size >= needed:
            return size
    raise ValueError(f"{needed} slices is more than the largest profile ({sizes[-1]})")


def _slices(milli: int, slices: int) -> int:
    if not 0 < milli <= FULL_GPU_MILLI:
        raise ValueError(f"gpu milli {milli}; expected 1..1000")
    return -(-slices * milli // FULL_GPU_MILLI)  # ceiling in integers: no float rounding


def mig_compute_slices(milli: int, slices: int = 7) -> int:
    """Compute slices of the MIG profile a fractional ask maps to: ⌈slices·milli/1000⌉ rounded
    up to the next profile size of {1, 2, 3, 4, 7} (1g, 2g, 3g, 4g, 7g). 1000 milli is 7g, i.e.
    the whole GPU's compute."""
    sizes = tuple(s for s in MIG_COMPUTE_PROFILES if s < slices) + (slices,)
    return _round_up(_slices(milli, slices), sizes)


def mig_memory_slices(milli: int) -> int:
    """Sensitivity variant, as if `gpu_milli` were a memory share: ⌈8·milli/1000⌉ memory
    slices rounded up to {1, 2, 4, 8}. On an A100-80GB the smallest profile with that memory is
    1 → 1g.10gb, 2 → 1g.20gb, 4 → 3g.40gb, 8 → 7g.80gb (the trace has no GPU memory field, so
    this is a what-if, not the trace's meaning)."""
    return _round_up(_slices(milli, 8), MIG_MEMORY_PROFILES)
