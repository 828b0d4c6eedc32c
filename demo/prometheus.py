"""Start Debian's `prometheus` binary on 127.0.0.1 with a throwaway config and data directory,
scraping given targets every second; stop it afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    def __init__(self, targets: list[str], scrape_interval: str = "1s"):
        self.targets = targets
        self.scrape_interval = scrape_interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = Path(tempfile.mkdtemp(prefix="meter-prom-"))
        self._proc: subprocess.Popen | None = None

    @staticmethod
    def binary() -> str | None:
        return shutil.which("prometheus")

    def start(self, timeout: float = 30.0) -> str:
        binary = self.binary()
        if binary is None:
            raise RuntimeError("Debian's prometheus is not installed (scripts/bootstrap.sh)")
        targets = ", ".join(f'"{t}"' for t in self.targets)
        self._dir.mkdir(parents=True, exist_ok=True)  # started again after a stop
        (self._dir / "prometheus.yml").write_text(
            "global:\n"
            f"  scrape_interval: {self.scrape_interval}\n"
            f"  evaluation_interval: {self.scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: dcgm\n"
            f"    static_configs: [{{targets: [{targets}]}}]\n"
        )
        log = open(self._dir / "prometheus.log", "wb")  # noqa: SIM115 (lives with the process)
        self._proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self._dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self._dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_tail()}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self.url
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout} s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self._dir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
