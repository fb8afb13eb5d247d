"""What an operator sees when starting kai run: where it connects, what it tried, and
quiet, bounded output when something is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.cluster import Cluster
from tests.e2e.controlplane import free_port

KAI = str(Path(sys.executable).with_name("kai"))


def _kai(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str]:
    proc = subprocess.run(
        [KAI, "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_once_dry_run_logs_the_server_and_opens_no_port(cluster: Cluster) -> None:
    cluster.node("n0", gpus=1)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=1)
    cluster.pod("job", queue="team", gpus=1)
    kubeconfig = cluster.e2e.kai_kubeconfig
    code, out = _kai(
        f"--kubeconfig={kubeconfig}",
        f"--partition-label-value={cluster.pool}",
        "--once",
        "--dry-run",
    )
    assert code == 0, out
    assert f"API server {cluster.e2e.plane.url}" in out
    assert f"kubeconfig {kubeconfig}" in out
    assert "dry-run decision" in out and f"{cluster.ns}/job" in out
    assert "serving /metrics" not in out  # no port unless --listen-address is given
    assert not cluster.placement()["job"]  # and nothing written


def test_missing_kubeconfig_names_every_source_tried(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}
    code, out = _kai("--once", env=env)
    assert code == 2
    assert "in-cluster" in out and "$KUBECONFIG" in out and "~/.kube/config" in out
    assert "Traceback" not in out
    code, out = _kai(f"--kubeconfig={tmp_path / 'absent'}", "--once", env=env)
    assert code == 2 and str(tmp_path / "absent") in out


def test_unreachable_api_server_is_one_line_per_retry(cluster: Cluster, tmp_path: Path) -> None:
    plane = cluster.e2e.plane
    dead = tmp_path / "dead.kubeconfig"
    plane.kubeconfig("token", dead)
    dead.write_text(dead.read_text().replace(f":{plane.port}", f":{free_port()}"))
    proc = subprocess.Popen(
        [
            KAI,
            "run",
            f"--kubeconfig={dead}",
            "--no-leader-elect",
            "--sync-timeout=8s",
            "--listen-address=127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1  # the cache never synced: a clear failure, not a hang
    lines = [line for line in out.splitlines() if "cannot reach" in line]
    # Backoff 1, 2, 4, 8s: a handful of lines in the 8s sync timeout, not one per
    # watched kind and attempt.
    assert 1 <= len(lines) <= 5, out
    assert "did not sync in 8s" in out
    assert "Traceback" not in out
