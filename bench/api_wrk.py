"""The API bench's load driver: wrk (a second process) with Lua scripts for the status, floor and
submit calls, paced (each client pausing as a CI job polling its workload) or saturated (back
to back); `run_wrk` runs one load and parses the figures its `done()` prints as one JSON line into
requests, latency percentiles, errors and throughput.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# wrk's Lua: status reads pick a random workload; submits go round-robin over the tenants with
# names unique per thread. done() prints the figures as one JSON line.
WRK_COMMON = """
local counter = 0
thread_id = 0  -- a global: setup() sets it in each thread
local threads = {}
function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end
local reported = 0
function response(status, headers, body)
  if status >= 300 and reported < 2 then
    reported = reported + 1
    io.stderr:write("WRK_ERROR " .. status .. " " .. string.sub(body, 1, 300) .. "\\n")
  end
end
function done(summary, latency, requests)
  local out = string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "mean_us": %d, ' ..
    '"status_errors": %d, "connect_errors": %d, "read_errors": %d, "write_errors": %d, ' ..
    '"timeouts": %d}',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.mean, summary.errors.status, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout)
  io.stderr:write("WRK_JSON " .. out .. "\\n")
end
"""
# Paced clients: each waits 0.5–1.5 s (1 s on average) after an answer before its next call, as
# a CI job polling its workload does (the CLI polls every 2 s), on its kept-alive connection.
# Without it, wrk's clients call back to back: the saturation run, whose latency is clients /
# throughput (Little's law). A connection's first call goes at once, as a client's (or an
# ingress's) does: wrk would otherwise open every connection and stay silent on it for the
# first pause, and a gthread worker gives a new connection a thread until its first bytes come
# (up to 5 s), so the first calls of a run queued behind silent connections (issue 19).
WRK_PACED = """
local first_calls = %(connections_per_thread)d
function delay()
  if first_calls > 0 then
    first_calls = first_calls - 1
    return 0
  end
  return math.random(500, 1500)
end
"""
WRK_STATUS = """
ids = {%(ids)s}
wrk.headers["Authorization"] = "Bearer %(token)s"
request = function()
  return wrk.format("GET", "/api/v1/workloads/" .. ids[math.random(#ids)] .. "/")
end
"""
WRK_FLOOR = """
ids = {%(ids)s}
wrk.headers["Authorization"] = "Bearer %(token)s"
request = function()
  return wrk.format("GET", "/api/v1/bench-floor/" .. ids[math.random(#ids)] .. "/")
end
"""
WRK_SUBMIT = """
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer %(token)s"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local tenant = string.format("bl%%02d", counter %% %(tenants)d)
  local body = '{"tenant": "' .. tenant .. '", "name": "%(run)s' .. thread_id .. '-' .. counter ..
    '", "kind": "job", "image": "%(image)s", "command": ["python", "train.py"], ' ..
    '"resources": {"%(rc)s": 1}, "priority": "gpu-low"}'
  return wrk.format("POST", "/api/v1/workloads/", nil, body)
end
"""


def run_wrk(
    base: str,
    script: str,
    clients: int,
    seconds: int,
    workdir: Path,
    label: str,
    *,
    paced: bool = False,
) -> dict:
    path = workdir / f"{label}.lua"
    threads = min(clients, max(2, os.cpu_count() or 2))
    pacing = WRK_PACED % {"connections_per_thread": clients // threads} if paced else ""
    path.write_text(WRK_COMMON + script + pacing)
    result = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{clients}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(path),
            base,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    for error in [x for x in result.stderr.splitlines() if x.startswith("WRK_ERROR ")][:3]:
        print(f"  {label}: {error.removeprefix('WRK_ERROR ')}", flush=True)
    line = next((x for x in result.stderr.splitlines() if x.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no figures:\n{result.stdout}\n{result.stderr}")
    data = json.loads(line.removeprefix("WRK_JSON "))
    data["errors"] = (
        sum(data[k] for k in ("status_errors", "connect_errors", "read_errors", "write_errors"))
        + data["timeouts"]
    )
    data["rps"] = data["requests"] / (data["duration_us"] / 1e6)
    return data
