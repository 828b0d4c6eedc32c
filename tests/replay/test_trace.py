"""The trace reader: every malformed input is a TraceError at its line and column."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from replay.trace import (
    DEFAULT_TRACE_DIR,
    NODE_FILE,
    POD_FILE,
    TraceError,
    mig_compute_slices,
    mig_memory_slices,
    read_nodes,
    read_pods,
)

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
GOOD_POD = "pod-a,6000,12288,1,460,,LS,Running,10,100,20"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def write(tmp_path: Path, *lines: str, name: str = "pods.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pod_error(tmp_path: Path, *rows: str) -> TraceError:
    with pytest.raises(TraceError) as caught:
        read_pods(write(tmp_path, POD_HEADER, *rows))
    return caught.value


def test_reads_pods_with_empty_times_and_derived_values(tmp_path):
    pods = read_pods(
        write(
            tmp_path,
            POD_HEADER,
            GOOD_POD,
            "pod-b,8000,0,8,1000,V100M16|V100M32,BE,Pending,50,,",
            "pod-c,1000,512,0,0,,BE,Running,60,70,",
            "",
        )
    )
    assert [p.name for p in pods] == ["pod-a", "pod-b", "pod-c"]
    a, b, c = pods
    assert (a.line, a.gpu_request_milli, a.fractional, a.run_seconds) == (2, 460, True, 80)
    assert (b.gpu_request_milli, b.fractional, b.gpu_spec, b.phase) == (
        8000,
        False,
        "V100M16|V100M32",
        "Pending",
    )
    assert (b.deletion, b.scheduled, b.run_seconds) == (None, None, None)
    assert (c.num_gpu, c.gpu_request_milli, c.fractional, c.run_seconds) == (0, 0, False, None)


def test_columns_in_any_order_and_extra_columns_ignored(tmp_path):
    header = ",".join(["extra", *reversed(POD_HEADER.split(","))])
    (pod,) = read_pods(write(tmp_path, header, "x,20,100,10,Running,LS,,250,1,64,100,p"))
    assert (pod.name, pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.creation) == (
        "p",
        100,
        64,
        250,
        10,
    )


def test_not_an_integer_names_line_column_and_field(tmp_path):
    error = pod_error(
        tmp_path, GOOD_POD, GOOD_POD.replace("pod-a", "pod-b").replace(",460,", ",abc,")
    )
    assert str(error) == (
        f"{tmp_path / 'pods.csv'}:3:5 (gpu_milli): 'abc' is not an integer; expected an integer ≥ 0"
    )
    assert (error.line, error.column, error.field) == (3, 5, "gpu_milli")


@pytest.mark.parametrize(
    ("row", "column", "field", "message"),
    [
        ("pod-a,-6000,12288,1,460,,LS,Running,10,100,20", 2, "cpu_milli", "is negative"),
        ("pod-a,6000,12288,1,4.5,,LS,Running,10,100,20", 5, "gpu_milli", "not an integer"),
        ("pod-a,6000,12288,1,0,,LS,Running,10,100,20", 5, "gpu_milli", "expected 1..1000"),
        ("pod-a,6000,12288,1,1001,,LS,Running,10,100,20", 5, "gpu_milli", "expected 1..1000"),
        ("pod-a,6000,12288,2,500,,LS,Running,10,100,20", 5, "gpu_milli", "expected 1000"),
        ("pod-a,6000,12288,0,500,,LS,Running,10,100,20", 5, "gpu_milli", "expected 0"),
        ("pod-a,6000,12288,1,460,,LS,Running,,100,20", 9, "creation_time", "not an integer"),
        ("pod-a,6000,12288,1,460,,LS,Running,10,5,", 10, "deletion_time", "before creation_time"),
        ("pod-a,6000,12288,1,460,,LS,Running,10,100,5", 11, "scheduled_time", "before creation"),
        ("pod-a,6000,12288,1,460,,LS,Running,10,50,60", 10, "deletion_time", "before scheduled"),
        ("pod-a,6000, 12,1,460,,LS,Running,10,100,20", 3, "memory_mib", "not an integer"),
        (",6000,12288,1,460,,LS,Running,10,100,20", 1, "name", "is empty"),
    ],
)
def test_bad_cells(tmp_path, row, column, field, message):
    error = pod_error(tmp_path, row)
    assert (error.line, error.column, error.field) == (2, column, field)
    assert message in str(error)


def test_duplicate_pod_name_points_at_the_first(tmp_path):
    error = pod_error(tmp_path, GOOD_POD, GOOD_POD)
    assert (error.line, error.column) == (3, 1)
    assert "first on line 2" in str(error)


def test_wrong_number_of_fields(tmp_path):
    short = pod_error(tmp_path, GOOD_POD, "pod-b,6000,12288,1,460")
    assert (short.line, short.column) == (3, 6)
    assert "5 fields; expected 11" in str(short)
    long = pod_error(tmp_path, GOOD_POD + ",surplus")
    assert (long.line, long.column) == (2, 12)


def test_missing_required_header_column(tmp_path):
    with pytest.raises(TraceError) as caught:
        read_pods(write(tmp_path, "name,cpu_milli,memory_mib,gpu_milli", "pod-a,1,2,460"))
    assert (caught.value.line, caught.value.column) == (1, 5)
    assert "header lacks column 'num_gpu'" in str(caught.value)


def test_fewer_columns_take_the_trace_defaults(tmp_path):
    """The family's multigpu lists stop at gpu_milli; shorter still, gpu_milli is whole GPUs."""
    short = read_pods(
        write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli", "a,6000,12288,1,460")
    )
    shortest = read_pods(
        write(tmp_path, "name,cpu_milli,memory_mib,num_gpu", "b,1,2,2", "c,1,2,0", name="s.csv")
    )
    (a,) = short
    b, c = shortest
    assert (a.gpu_milli, a.gpu_spec, a.models, a.qos, a.phase) == (460, "", frozenset(), "", "")
    assert (a.creation, a.deletion, a.scheduled, a.timed, a.run_seconds) == (
        0,
        None,
        None,
        False,
        None,
    )
    assert (b.gpu_milli, b.gpu_request_milli, c.gpu_milli) == (1000, 2000, 0)


def test_fewer_columns_still_refuse_a_malformed_row(tmp_path):
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
    with pytest.raises(TraceError, match=r"pods\.csv:3:5 \(gpu_milli\): 'x' is not an integer"):
        read_pods(write(tmp_path, header, "a,1,2,1,460", "b,1,2,1,x"))
    with pytest.raises(TraceError, match=r"pods\.csv:2:6: 6 fields; expected 5"):
        read_pods(write(tmp_path, header, "a,1,2,1,460,LS"))


def test_gpu_spec_models(tmp_path):
    (pod,) = read_pods(write(tmp_path, POD_HEADER, "p,1,2,1,500,V100M16|V100M32|,LS,Running,0,,"))
    assert pod.models == {"V100M16", "V100M32"}


def test_duplicate_header_column(tmp_path):
    with pytest.raises(TraceError, match=r":1:12: duplicate column 'name'"):
        read_pods(write(tmp_path, POD_HEADER + ",name", GOOD_POD + ",x"))


@pytest.mark.parametrize("content", ["", "\n\n", "   \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "pods.csv"
    path.write_text(content)
    with pytest.raises(TraceError, match=r"pods\.csv:1:1: is empty; expected a header"):
        read_pods(path)


def test_header_without_rows(tmp_path):
    with pytest.raises(TraceError, match=r":2:1: no rows after the header"):
        read_pods(write(tmp_path, POD_HEADER))


def test_missing_path_and_directory(tmp_path):
    with pytest.raises(TraceError) as missing:
        read_pods(tmp_path / "nope.csv")
    assert str(missing.value) == f"{tmp_path / 'nope.csv'}: no such file"
    with pytest.raises(TraceError, match="is a directory; expected a CSV file"):
        read_nodes(tmp_path)


def test_non_utf8_bytes_point_at_their_line_and_field(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_bytes((POD_HEADER + "\n" + GOOD_POD + "\n").encode() + b"pod-b,60\xff0,1\n")
    with pytest.raises(TraceError) as caught:
        read_pods(path)
    assert (caught.value.line, caught.value.column) == (3, 2)
    assert "is not UTF-8" in str(caught.value)


def test_invalid_csv_quoting(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text(
        POD_HEADER + "\n" + GOOD_POD + "\n" + GOOD_POD.replace("pod-a", '"pod"b') + "\n"
    )
    with pytest.raises(TraceError, match=r"pods\.csv:3:1: not valid CSV"):
        read_pods(path)


def test_reads_nodes_and_refuses_bad_ones(tmp_path):
    nodes = read_nodes(
        write(tmp_path, NODE_HEADER, "n0,64000,262144,2,P100", "n1,96000,786432,8,G2", name="n.csv")
    )
    assert [(n.name, n.line, n.gpus, n.model) for n in nodes] == [
        ("n0", 2, 2, "P100"),
        ("n1", 3, 8, "G2"),
    ]
    with pytest.raises(TraceError, match=r"n\.csv:3:4 \(gpu\): '-1' is negative"):
        read_nodes(write(tmp_path, NODE_HEADER, "n0,1,1,2,P100", "n1,1,1,-1,G2", name="n.csv"))
    with pytest.raises(TraceError, match=r"n\.csv:3:1 \(sn\): node 'n0' again"):
        read_nodes(write(tmp_path, NODE_HEADER, "n0,1,1,2,P100", "n0,1,1,2,G2", name="n.csv"))


@pytest.mark.parametrize(
    ("milli", "compute", "memory"),
    [
        (1, 1, 1),
        (142, 1, 2),
        (143, 2, 2),
        (250, 2, 2),
        (285, 2, 4),
        (286, 3, 4),
        (428, 3, 4),
        (429, 4, 4),
        (500, 4, 4),
        (571, 4, 8),
        (572, 7, 8),
        (810, 7, 8),
        (1000, 7, 8),
    ],
)
def test_mig_slice_mapping(milli, compute, memory):
    assert mig_compute_slices(milli) == compute
    assert mig_memory_slices(milli) == memory


def test_mig_slice_mapping_refuses_out_of_range():
    with pytest.raises(ValueError):
        mig_compute_slices(0)
    with pytest.raises(ValueError):
        mig_memory_slices(1001)


@pytest.mark.skipif(
    not (DEFAULT_TRACE_DIR / POD_FILE).exists(),
    reason=f"the Alibaba 2023 trace is not at {DEFAULT_TRACE_DIR} (set REPLAY_TRACE_DIR)",
)
def test_real_trace_counts_match_replay_md():
    pods = read_pods(DEFAULT_TRACE_DIR / POD_FILE)
    nodes = read_nodes(DEFAULT_TRACE_DIR / NODE_FILE)
    gpu_pods = [p for p in pods if p.num_gpu]
    assert (len(pods), len(gpu_pods)) == (8152, 7064)
    assert (len(nodes), sum(n.gpus for n in nodes)) == (1213, 6212)
    fractional = [p for p in gpu_pods if p.fractional]
    assert len(fractional) == 3078
    profiles = Counter(mig_compute_slices(p.gpu_milli) for p in fractional)
    assert profiles == {1: 32, 2: 280, 3: 389, 4: 971, 7: 1406}
    assert sum(1 for p in fractional if p.gpu_milli == 810) == 1078
