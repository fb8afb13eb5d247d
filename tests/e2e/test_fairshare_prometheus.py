"""Time-based fair share against a real Prometheus: kai exports queues' allocations and
the cluster's capacity, Prometheus scrapes them, kai reads the decayed usage back with
PromQL and schedules with it.

Prometheus is Debian's package (``ci/prometheus``), run on loopback by the tests.
Without it the tests skip, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai.fairshare import UsageParams
from kai.fairshare_prometheus import PrometheusUsageClient
from kai.k8s.metrics import SchedulerMetrics
from kai.k8s.server import HealthServer
from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.conftest import _unavailable
from tests.e2e.controlplane import free_port
from tests.e2e.prometheus import Prometheus, PrometheusUnavailable

GIB = 2.0**30


def _prometheus() -> Prometheus:
    try:
        return Prometheus()
    except PrometheusUnavailable as err:
        _unavailable(f"Prometheus: {err}")
        raise  # not reached: _unavailable skips or fails


def _start(prom: Prometheus, targets: list[str]) -> Prometheus:
    try:
        return prom.start(targets)
    except PrometheusUnavailable as err:
        _unavailable(f"Prometheus: {err}")
        raise  # not reached: _unavailable skips or fails


class _Exporter:
    """kai's metrics object served on loopback, its values set by the test."""

    def __init__(self) -> None:
        self.metrics = SchedulerMetrics()
        self.port = free_port()
        self.server = HealthServer(
            f"127.0.0.1:{self.port}",
            metrics=self.metrics.render,
            healthy=lambda: (True, "ok"),
            ready=lambda: (True, "ok"),
        )
        self.server.start()

    def set(self, gpus: dict[str, float], capacity_gpus: float = 16.0) -> None:
        queues = {
            name: type("Q", (), {"allocated": {"gpu": g, "cpu": 1000.0 * g, "memory": GIB * g}})()
            for name, g in gpus.items()
        }
        capacity = {"gpu": capacity_gpus, "cpu": 1000.0 * capacity_gpus, "memory": GIB * 64}
        self.metrics.set_usage_inputs(queues, capacity)


@pytest.fixture
def exporter_and_prometheus() -> Iterator[tuple[_Exporter, Prometheus]]:
    prom = _prometheus()
    exporter = _Exporter()
    _start(prom, [f"127.0.0.1:{exporter.port}"])
    try:
        yield exporter, prom
    finally:
        prom.stop()
        exporter.server.stop()


def _samples(prom: Prometheus, metric: str) -> int:
    result = prom.query(f"count_over_time({metric}[10m])")
    return int(float(result[0]["value"][1])) if result else 0


def test_usage_is_each_queues_decayed_share_of_capacity(
    exporter_and_prometheus: tuple[_Exporter, Prometheus],
) -> None:
    exporter, prom = exporter_and_prometheus
    exporter.set({"a": 12.0, "b": 4.0})
    wait_for(lambda: _samples(prom, "kai_cluster_capacity_gpus") >= 4, 60, "four scrapes")
    extra = {"queryResolution": "1s"}
    decayed = PrometheusUsageClient(
        prom.url, UsageParams(half_life=5.0, window=600.0, extra_params=extra)
    )
    plain = PrometheusUsageClient(prom.url, UsageParams(window=600.0, extra_params=extra))
    # A constant split is the same share whatever the decay: usage and capacity are
    # summed over the same steps.
    for client in (decayed, plain):
        table = client.fetch()
        assert table["a"]["gpu"] == pytest.approx(0.75, abs=1e-9)
        assert table["b"]["gpu"] == pytest.approx(0.25, abs=1e-9)
        assert table["a"]["cpu"] == pytest.approx(0.75, abs=1e-9)
        assert table["a"]["memory"] == pytest.approx(12 / 64, abs=1e-9)

    # The cluster changes hands: b now holds everything.  Recent use weighs more with a
    # half-life, so b's usage is above the undecayed average and a's below it.
    before = _samples(prom, "kai_cluster_capacity_gpus")
    exporter.set({"a": 0.0, "b": 16.0})
    wait_for(
        lambda: _samples(prom, "kai_cluster_capacity_gpus") >= before + 4, 60, "four more scrapes"
    )
    now = time.time()
    with_decay, without = decayed.fetch(now), plain.fetch(now)
    assert with_decay["b"]["gpu"] > without["b"]["gpu"] > 0.25
    assert with_decay["a"]["gpu"] < without["a"]["gpu"] < 0.75
    for table in (with_decay, without):
        assert table["a"]["gpu"] + table["b"]["gpu"] == pytest.approx(1.0, abs=1e-9)


def _running(cluster: Cluster, name: str) -> bool:
    pod = cluster.pods().get(name)
    return bool(pod and pod.spec.node_name and pod.status.phase == "Running")


def test_kai_run_reclaims_from_the_queue_with_more_history(cluster: Cluster, tmp_path: Path):
    """Two queues with no quota and equal weight share a 16-GPU node.  Queue a ran the
    whole node from the start; when b asks for it, a's history (read from Prometheus)
    leaves a no over-quota share, so b reclaims the node.  Without history each would
    deserve 8 GPUs and b's 16-GPU job could not reclaim anything."""
    cluster.node("n0", gpus=16)
    cluster.wait_nodes_ready()
    cluster.queue("a", gpu_quota=0)
    b = cluster.queue("b", gpu_quota=0)

    prom = _prometheus()
    try:
        conf = tmp_path / "scheduler.yaml"
        conf.write_text(
            json.dumps(
                {
                    "kValue": 3,
                    "usageDBConfig": {
                        "clientType": "prometheus",
                        "connectionString": prom.url,
                        "usageParams": {
                            "windowSize": "10m",
                            "halfLifePeriod": "1m",
                            "fetchInterval": "1s",
                            "extraParams": {"queryResolution": "1s"},
                        },
                    },
                }
            )
        )
        cluster.pod_group("first", "a")
        cluster.pod("first-0", group="first", gpus=16)
        kai = cluster.kai(f"--scheduler-conf={conf}")
        _start(prom, [f"127.0.0.1:{kai.metrics_port}"])
        wait_for(lambda: _running(cluster, "first-0"), 60, "queue a's job running")

        cluster.pod_group("second", "b")
        cluster.pod("second-0", group="second", gpus=16)
        wait_for(lambda: cluster.bound("second-0"), 120, "queue b's job bound after a reclaim")
        assert "first-0" not in cluster.pods() or not cluster.placement().get("first-0")
        evicted = [e for e in cluster.events() if e.reason == "Evicted"]
        assert {e.involved_object.name for e in evicted} == {"first-0"}
        usage = prom.query(f'kai_queue_allocated_gpus{{queue_name="{b}"}}')
        assert usage, "Prometheus never scraped kai's allocation metrics"
        assert kai.proc.poll() is None
    finally:
        prom.stop()
