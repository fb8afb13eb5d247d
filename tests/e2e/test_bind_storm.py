"""Binding never stalls the scheduling loop: a pod submitted while a cycle's thousands
of binds are in flight is bound before they finish."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.e2e.cluster import Cluster, wait_for


def test_a_new_pod_is_bound_during_a_bind_storm(cluster: Cluster) -> None:
    for i in range(20):
        cluster.node(f"n{i}", gpus=0, cpu="32", memory="256Gi", pods=110)
    cluster.wait_nodes_ready()
    cluster.queue("team")
    storm = 1500
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: cluster.pod(f"storm-{i}", queue="team", cpu="100m", memory="100Mi"),
                range(storm),
            )
        )
    # 100 requests a second: the first cycle's binds take about 15 seconds.
    kai = cluster.kai("--qps=100", "--burst=10", period="1s")

    def storm_bound() -> int:
        return sum(1 for node in cluster.placement().values() if node)

    wait_for(lambda: storm_bound() >= 100, 120, "the storm's first binds")
    cluster.pod("late", queue="team", cpu="100m", memory="100Mi")
    submitted = time.monotonic()
    wait_for(lambda: cluster.bound("late"), 60, "the late pod bound")
    waited = time.monotonic() - submitted
    in_storm = storm_bound() - 1
    assert in_storm < storm - 200, f"the late pod waited for the storm ({in_storm} bound)"
    assert waited < 10, f"the late pod took {waited:.1f}s"
    wait_for(lambda: storm_bound() == storm + 1, 120, "every pod bound")
    assert "bind failed 0" in kai.output()
    assert not [
        line for line in kai.output().splitlines() if "binding" in line and "failed" in line
    ]
