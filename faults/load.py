"""A steady stream of what teams and the platform team do, through the REST API as CI would:
ask for capacity, approve it, submit workloads, cancel them. Every creating call carries an
Idempotency-Key and is retried with the same key until it gets a real answer, so a fault may
delay work but never duplicate it. Answers are tallied per phase (the fault in progress)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import requests

CLASS = "a100-80gb-mig-1g.10gb"  # what workloads run on (team-a holds 14)
ASK_CLASSES = ("h100-80gb-mig-3g.40gb", "l40s-48gb-shared")  # pools with room to grant
TENANT = "team-a"
MAX_LIVE = 3


@dataclass
class Tally:
    statuses: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)  # 5xx other than 503, and 503s
    # without Retry-After
    unreachable: int = 0
    refusals: Counter = field(default_factory=Counter)  # 4xx answers by path and message


class Load(threading.Thread):
    def __init__(self, base: str, tokens: dict[str, str]):
        super().__init__(daemon=True, name="load")
        self.base, self.tokens = base, tokens
        self.phase = "warm-up"
        self.tallies: dict[str, Tally] = defaultdict(Tally)
        self.requests_acknowledged: set[int] = set()
        self.approvals_acknowledged: set[int] = set()
        self.workloads_acknowledged: dict[str, int] = {}  # idempotency key -> workload id
        self.live: list[int] = []
        self._halt = threading.Event()
        self._paused = threading.Event()
        self._n = 0

    # --- control --------------------------------------------------------------------------

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=60)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    # --- one call, retried with its key -------------------------------------------------------

    def _call(self, who: str, method: str, path: str, body=None, *, key: str | None = None):
        """Until the portal gives an answer that is not 503/unreachable (or the run stops)."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        if key:
            headers["Idempotency-Key"] = key
        while not self._halt.is_set():
            tally = self.tallies[self.phase]
            try:
                r = requests.request(
                    method, f"{self.base}{path}", json=body, headers=headers, timeout=15
                )
            except requests.RequestException:
                tally.unreachable += 1
                time.sleep(0.5)
                continue
            tally.statuses[r.status_code] += 1
            if r.status_code == 503:
                if "Retry-After" not in r.headers:
                    tally.server_errors.append(f"{method} {path}: 503 without Retry-After")
                time.sleep(0.5)
                continue
            if r.status_code >= 500:
                tally.server_errors.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
                time.sleep(0.5)
                continue  # retried with the same key: must not duplicate
            if r.status_code >= 400:
                detail = (
                    r.json().get("detail", "")
                    if "json" in r.headers.get("Content-Type", "")
                    else ""
                )
                tally.refusals[
                    f"{method} {path.split('/')[3]} {r.status_code}: {detail[:120]}"
                ] += 1
            return r
        return None

    # --- the work -----------------------------------------------------------------------------

    def _ask_and_approve(self) -> None:
        ends = (datetime.now(UTC) + timedelta(seconds=20)).isoformat()
        self._asks = getattr(self, "_asks", 0) + 1
        body = {
            "tenant": TENANT,
            "items": {ASK_CLASSES[self._asks % 2]: 1},
            "ends_at": ends,
            "justification": "fault run",
        }
        r = self._call("alice", "POST", "/api/v1/capacity-requests/", body, key=uuid.uuid4().hex)
        if r is None or r.status_code not in (200, 201):
            return
        request = r.json()
        self.requests_acknowledged.add(request["id"])
        if request.get("state") == "submitted":
            path = f"/api/v1/capacity-requests/{request['id']}/approve/"
            r = self._call("admin", "POST", path, {"comment": "fault run"}, key=uuid.uuid4().hex)
            if r is not None and r.status_code == 200:
                self.approvals_acknowledged.add(request["id"])

    def _submit(self) -> None:
        self._n += 1
        key = uuid.uuid4().hex
        body = {
            "tenant": TENANT,
            "name": f"fault-{key[:10]}",
            "kind": "job",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {CLASS: 1},
            "priority": "gpu-low",
        }
        r = self._call("bob", "POST", "/api/v1/workloads/", body, key=key)
        if r is not None and r.status_code in (200, 201):
            self.workloads_acknowledged[key] = r.json()["id"]
            self.live.append(r.json()["id"])

    def _cancel_oldest(self) -> None:
        while len(self.live) > MAX_LIVE:
            pk = self.live.pop(0)
            self._call("bob", "POST", f"/api/v1/workloads/{pk}/cancel/", {}, key=uuid.uuid4().hex)

    def run(self) -> None:
        steps = [self._ask_and_approve, self._submit, self._cancel_oldest]
        i = 0
        while not self._halt.is_set():
            if self._paused.is_set():
                time.sleep(0.2)
                continue
            steps[i % len(steps)]()
            i += 1
            time.sleep(0.3)
