"""The short fault run (`python -m faults --short`) as part of `make test`: the portal's real web,
worker and beat with their own PostgreSQL and Redis, the local cluster, a stream of work, and
five faults (worker killed mid-reconcile, worker killed mid MIG rollout, Redis flushed,
PostgreSQL restarted, two beats): nothing lost, no 5xx but 503 with Retry-After, the rollout
resumed within 30 s and nothing applied twice. `make faults` runs every fault."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.celery]
REPO = Path(__file__).resolve().parents[2]


def test_the_short_fault_run_loses_nothing(kube_cluster):
    run = subprocess.run(
        [sys.executable, "-m", "faults", "--short", "--verbose"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = run.stdout[-6000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    faults = [row.split("|")[1].strip() for row in rows[1:]]
    assert faults == [
        "worker-kill-reconcile",
        "worker-kill-rollout",
        "redis-flushed",
        "postgres-restart",
        "beat-double",
    ]
    for row in rows[1:]:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[1] != "not recovered", report
        # grants, workloads, audit, metering, 5xx, beats, rollouts: nothing lost (a rollout
        # not applied within 30 s of its worker's restart, or applied twice, counts here)
        assert cells[2:9] == ["0"] * 7, report
    # the database restart was seen by clients as 503s (with Retry-After), never as a 500
    assert "503×" in next(r for r in rows if "postgres-restart" in r), report
