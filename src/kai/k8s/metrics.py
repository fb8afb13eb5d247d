"""Prometheus metrics of the live scheduler, named as KAI-Scheduler names them (``kai_``).

Each :class:`SchedulerMetrics` has its own registry, so tests (and several schedulers in
one process) do not collide on the global one.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# KAI: exponential buckets 5 ms .. 2560 ms.
_LATENCY_BUCKETS = tuple(5.0 * 2**i for i in range(10))
_QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")

__all__ = ["CONTENT_TYPE_LATEST", "SchedulerMetrics"]


class SchedulerMetrics:
    def __init__(self, namespace: str = "kai") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, ns = self.registry, namespace
        self.e2e_latency = Gauge(
            "e2e_scheduling_latency_milliseconds",
            "End to end latency of the last scheduling cycle (ms)",
            namespace=ns,
            registry=r,
        )
        self.open_session_latency = Gauge(
            "open_session_latency_milliseconds",
            "Snapshot of the cache into session objects, last cycle (ms)",
            namespace=ns,
            registry=r,
        )
        self.action_latency = Gauge(
            "action_scheduling_latency_milliseconds",
            "Latency of each action in the last cycle (ms)",
            ["action"],
            namespace=ns,
            registry=r,
        )
        self.task_scheduling_latency = Histogram(
            "task_scheduling_latency_milliseconds",
            "Pod creation to bind attempt (ms)",
            namespace=ns,
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.task_bind_latency = Histogram(
            "task_bind_latency_milliseconds",
            "Latency of one pod bind call, retries included (ms)",
            namespace=ns,
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.podgroups_scheduled = Counter(
            "podgroups_scheduled_by_action",
            "Pod groups bound (or pipelined) by each action",
            ["action"],
            namespace=ns,
            registry=r,
        )
        self.podgroups_acted_on = Counter(
            "podgroups_acted_on_by_action",
            "Pod groups any decision of each action touched",
            ["action"],
            namespace=ns,
            registry=r,
        )
        self.preemption_attempts = Counter(
            "total_preemption_attempts",
            "Pod groups the preempt action placed by evicting others",
            namespace=ns,
            registry=r,
        )
        self.evicted_pods = Counter(
            "pod_group_evicted_pods",  # exposed as ..._total
            "Pods evicted, per pod group",
            ["podgroup", "uid", "nodepool", "action"],
            namespace=ns,
            registry=r,
        )
        self.bind_failures = Counter(
            "bind_failures",
            "Pod binds that failed after retries",
            namespace=ns,
            registry=r,
        )
        self.gang_rollbacks = Counter(
            "bind_rollbacks",
            "Pod groups whose binds were rolled back after a bind failed",
            namespace=ns,
            registry=r,
        )
        self.cycles = Counter(
            "scheduling_cycles",
            "Scheduling cycles run, by result (ok, error)",
            ["result"],
            namespace=ns,
            registry=r,
        )
        self.bad_objects = Gauge(
            "invalid_objects",
            "Cluster objects left out of the last snapshot because they do not parse",
            namespace=ns,
            registry=r,
        )
        self.binds_in_flight = Gauge(
            "binds_in_flight",
            "Binds handed to the binder's workers and not answered by the API server yet",
            namespace=ns,
            registry=r,
        )
        self.is_leader = Gauge(
            "is_leader",
            "1 when this replica holds the leader lease (or runs without election)",
            namespace=ns,
            registry=r,
        )
        self.cache_relists = Counter(
            "cache_relists",
            "Informer relists (after 410 Gone or watch errors), by kind",
            ["kind"],
            namespace=ns,
            registry=r,
        )
        self.queue_gauges = {
            name: Gauge(name, help_, list(_QUEUE_LABELS), namespace=ns, registry=r)
            for name, help_ in (
                ("queue_fair_share_gpu", "Fair share of the queue in GPUs"),
                ("queue_fair_share_cpu_cores", "Fair share of the queue in CPU cores"),
                ("queue_fair_share_memory_gb", "Fair share of the queue in GB of memory"),
                ("queue_gpu_usage", "GPUs allocated to the queue"),
                ("queue_cpu_usage", "CPU cores allocated to the queue"),
                ("queue_memory_usage", "GB of memory allocated to the queue"),
            )
        }

        # Time-based fair share: what Prometheus integrates into queues' usage, in the
        # units KAI's queue controller exports (GPUs, cores, bytes).
        self.queue_allocated = {
            resource: Gauge(name, help_, ["queue_name"], registry=r)
            for resource, name, help_ in (
                ("gpu", "kai_queue_allocated_gpus", "GPUs allocated to the queue"),
                ("cpu", "kai_queue_allocated_cpu_cores", "CPU cores allocated to the queue"),
                ("memory", "kai_queue_allocated_memory_bytes", "Memory allocated to the queue"),
            )
        }
        self.cluster_capacity = {
            resource: Gauge(name, help_, registry=r)
            for resource, name, help_ in (
                ("gpu", "kai_cluster_capacity_gpus", "GPUs of the ready nodes scheduled"),
                ("cpu", "kai_cluster_capacity_cpu_cores", "CPU cores of the ready nodes scheduled"),
                (
                    "memory",
                    "kai_cluster_capacity_memory_bytes",
                    "Memory of the ready nodes scheduled",
                ),
            )
        }

    def set_usage_inputs(
        self, queues: Mapping[str, object], capacity: Mapping[str, float] | None
    ) -> None:
        """The allocation of every queue and the cluster's capacity (session units: GPUs,
        CPU millicores, memory bytes); ``capacity`` None clears everything (a replica
        that stopped leading must not be counted twice)."""
        for g in self.queue_allocated.values():
            g.clear()
        if capacity is None:
            for g in self.cluster_capacity.values():
                g.set(0.0)
            return
        scale = {"gpu": 1.0, "cpu": 1e-3, "memory": 1.0}
        for name, q in queues.items():
            alloc = getattr(q, "allocated", {}) or {}
            for resource, gauge in self.queue_allocated.items():
                gauge.labels(name).set(_finite(alloc.get(resource, 0.0)) * scale[resource])
        for resource, gauge in self.cluster_capacity.items():
            gauge.set(_finite(capacity.get(resource, 0.0)) * scale[resource])

    def set_queues(self, queues: Mapping[str, object]) -> None:
        """Queue gauges from a session's queues (fair share and allocation); gauges of
        queues that no longer exist are dropped."""
        for g in self.queue_gauges.values():
            g.clear()
        for name, q in queues.items():
            labels = (name, name, name)
            fair = getattr(q, "fair_share", {}) or {}
            alloc = getattr(q, "allocated", {}) or {}
            gauges = self.queue_gauges
            # Session units: GPUs, CPU millicores, memory bytes.
            gauges["queue_fair_share_gpu"].labels(*labels).set(_finite(fair.get("gpu", 0.0)))
            gauges["queue_fair_share_cpu_cores"].labels(*labels).set(
                _finite(fair.get("cpu", 0.0)) / 1000.0
            )
            gauges["queue_fair_share_memory_gb"].labels(*labels).set(
                _finite(fair.get("memory", 0.0)) / 1e9
            )
            gauges["queue_gpu_usage"].labels(*labels).set(_finite(alloc.get("gpu", 0.0)))
            gauges["queue_cpu_usage"].labels(*labels).set(_finite(alloc.get("cpu", 0.0)) / 1000.0)
            gauges["queue_memory_usage"].labels(*labels).set(
                _finite(alloc.get("memory", 0.0)) / 1e9
            )

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _finite(value: object) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return v if v == v and v not in (float("inf"), float("-inf")) else -1.0
