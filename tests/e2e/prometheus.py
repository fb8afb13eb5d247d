"""A real Prometheus server on loopback, for the time-based fair-share tests.

The binary is Debian's ``prometheus`` package (``ci/prometheus`` installs it; the
package's own service is never used).  :class:`Prometheus` runs it on a free port of
127.0.0.1 with a temporary configuration and data directory, scraping the given
``/metrics`` targets every second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.controlplane import free_port

BINARY_CANDIDATES = ("prometheus", "/usr/bin/prometheus")


class PrometheusUnavailable(RuntimeError):
    """No Prometheus binary, or it did not become ready."""


def find_binary() -> str:
    for candidate in BINARY_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    raise PrometheusUnavailable("no prometheus binary (ci/prometheus installs Debian's package)")


class Prometheus:
    """One server; its port (and so :attr:`url`) is known before it starts, so that a
    scheduler can be pointed at it first."""

    def __init__(self, *, scrape_interval: str = "1s") -> None:
        self.binary = find_binary()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.scrape_interval = scrape_interval
        self.dir = Path(tempfile.mkdtemp(prefix="kai-prometheus-"))
        self.log_path = self.dir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, targets: list[str], timeout: float = 30.0) -> Prometheus:
        """Start scraping ``targets`` (``host:port`` of ``/metrics`` endpoints)."""
        every = self.scrape_interval
        config = {
            "global": {"scrape_interval": every, "evaluation_interval": every},
            "scrape_configs": [{"job_name": "kai", "static_configs": [{"targets": targets}]}],
        }
        (self.dir / "prometheus.yml").write_text(json.dumps(config))
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusUnavailable(f"prometheus exited: {self.output()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusUnavailable(f"prometheus not ready in {timeout:.0f}s")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read().decode())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)
