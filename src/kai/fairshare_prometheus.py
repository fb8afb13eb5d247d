"""Queues' historical usage from Prometheus, for ``kai run``'s time-based fair share.

``kai run`` exports every queue's allocation (``kai_queue_allocated_gpus``,
``kai_queue_allocated_cpu_cores``, ``kai_queue_allocated_memory_bytes``, label
``queue_name``) and the cluster's capacity (``kai_cluster_capacity_gpus``, ...) on its
``/metrics`` endpoint.  Prometheus scrapes them; :class:`PrometheusUsageClient` asks it
for each queue's decayed allocation over the usage window and for the decayed capacity
over the same window, and divides one by the other, per resource::

    sum by (queue_name) (sum_over_time(((ALLOCATION) * (0.5^((NOW - time()) / HALF)))[WINDOW:STEP]))
    sum_over_time(((CAPACITY) * (0.5^((NOW - time()) / HALF)))[WINDOW:STEP])

``NOW`` is the query's evaluation time, ``HALF`` the half-life in seconds (the decay
factor is left out without one), ``STEP`` the ``queryResolution`` (default 1m).  A
sliding window is ``windowSize`` long; a tumbling one reaches back to the start of the
current window.  The metric expressions can be replaced through ``extraParams``
(``gpuAllocationMetric``, ``gpuCapacityMetric``, ...), e.g. with kube-state-metrics'
``sum(kube_node_status_capacity{resource="nvidia_com_gpu"})``.

:class:`UsageLister` refreshes the table in a background thread every
``fetchInterval`` and hands the scheduler the last one it got: when Prometheus is
unreachable it logs why and scheduling goes on with the last known usage (zero before
the first answer).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from kai.api.errors import ConfigError
from kai.fairshare import RESOURCES, UsageDBConfig, UsageParams, UsageTable, config_seconds

log = logging.getLogger(__name__)

QUEUE_LABEL = "queue_name"

#: Metric names kai exports (``kai.k8s.metrics``), per resource of :data:`RESOURCES`.
ALLOCATION_METRICS = {
    "gpu": "kai_queue_allocated_gpus",
    "cpu": "kai_queue_allocated_cpu_cores",
    "memory": "kai_queue_allocated_memory_bytes",
}
CAPACITY_METRICS = {
    "gpu": "kai_cluster_capacity_gpus",
    "cpu": "kai_cluster_capacity_cpu_cores",
    "memory": "kai_cluster_capacity_memory_bytes",
}
#: ``extraParams`` keys that replace them (KAI's names).
_EXTRA_KEYS = {
    "gpu": ("gpuAllocationMetric", "gpuCapacityMetric"),
    "cpu": ("cpuAllocationMetric", "cpuCapacityMetric"),
    "memory": ("memoryAllocationMetric", "memoryCapacityMetric"),
}
DEFAULT_RESOLUTION = 60.0
DEFAULT_QUERY_TIMEOUT = 10.0


class UsageQueryError(Exception):
    """Prometheus did not answer, or answered something else than a usable vector."""


def _extra_seconds(params: UsageParams, key: str, default: float) -> float:
    field = f"usageDBConfig.usageParams.extraParams.{key}"
    return float(config_seconds(params.extra_params.get(key), field, default))


def _promql_seconds(seconds: float) -> str:
    """A PromQL duration: whole seconds, at least one."""
    return f"{max(1, round(seconds))}s"


class PrometheusUsageClient:
    """Reads the usage table from a Prometheus server's HTTP API (``/api/v1/query``).

    ``started`` (epoch seconds) is where tumbling windows start when
    ``tumblingWindowStartTime`` is not set: the scheduler's start, as in KAI.
    """

    def __init__(self, url: str, params: UsageParams, *, started: float | None = None) -> None:
        self.url = url.rstrip("/")
        self.params = params
        self.started = time.time() if started is None else started
        self.resolution = _extra_seconds(params, "queryResolution", DEFAULT_RESOLUTION)
        self.timeout = _extra_seconds(params, "usageQueryTimeout", DEFAULT_QUERY_TIMEOUT)
        extra = params.extra_params
        self.allocation = {
            r: extra.get(_EXTRA_KEYS[r][0]) or ALLOCATION_METRICS[r] for r in RESOURCES
        }
        self.capacity = {r: extra.get(_EXTRA_KEYS[r][1]) or CAPACITY_METRICS[r] for r in RESOURCES}

    # ------------------------------------------------------------------ PromQL
    def window_seconds(self, now: float) -> float:
        """How far back the window reaches from ``now``."""
        start = self.params.window_start(now, self.started)
        return max(0.0, now - start)

    def windowed(self, expr: str, now: float) -> str:
        """``expr`` decayed towards ``now`` and summed over the window, one sample a step."""
        half = self.params.half_life
        if half is not None:
            expr = f"({expr}) * (0.5^(({now:.3f} - time()) / {half:g}))"
        window = _promql_seconds(self.window_seconds(now))
        return f"sum_over_time(({expr})[{window}:{_promql_seconds(self.resolution)}])"

    def usage_query(self, resource: str, now: float) -> str:
        return f"sum by ({QUEUE_LABEL}) ({self.windowed(self.allocation[resource], now)})"

    def capacity_query(self, resource: str, now: float) -> str:
        return f"sum({self.windowed(self.capacity[resource], now)})"

    # ------------------------------------------------------------------ fetching
    def fetch(self, now: float | None = None) -> UsageTable:
        """The usage table at ``now`` (default: the wall clock).

        Raises :class:`UsageQueryError` when Prometheus cannot be reached or answers
        with an error; a resource without capacity data gives every queue 0 for it.
        """
        now = time.time() if now is None else now
        table: UsageTable = {}
        if self.window_seconds(now) < self.resolution:
            return table  # a tumbling window that just started: nothing counted yet
        for resource in RESOURCES:
            capacity = self._query(self.capacity_query(resource, now), now)
            total = sum(value for _, value in capacity)
            if not total > 0:
                continue
            for labels, value in self._query(self.usage_query(resource, now), now):
                queue = labels.get(QUEUE_LABEL)
                if queue:
                    table.setdefault(queue, {})[resource] = max(0.0, value / total)
        return table

    def _query(self, promql: str, now: float) -> list[tuple[dict[str, str], float]]:
        query = urllib.parse.urlencode({"query": promql, "time": f"{now:.3f}"})
        url = f"{self.url}/api/v1/query?{query}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:  # noqa: S310
                body = json.loads(resp.read().decode())
        except urllib.error.HTTPError as err:
            detail = _error_detail(err)
            raise UsageQueryError(
                f"HTTP {err.code} from {self.url}: {detail}; query: {promql}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise UsageQueryError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        if body.get("status") != "success":
            raise UsageQueryError(f"Prometheus error {body.get('error')!r}; query: {promql}")
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise UsageQueryError(f"expected a vector, got {data.get('resultType')!r}: {promql}")
        out = []
        for sample in data.get("result") or ():
            try:
                value = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if math.isfinite(value):
                out.append((dict(sample.get("metric") or {}), value))
        return out


def _error_detail(err: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(err.read().decode())
        return str(body.get("error") or body)
    except (ValueError, OSError):
        return str(err.reason)


def client_from_config(
    config: UsageDBConfig, *, started: float | None = None
) -> PrometheusUsageClient:
    """The Prometheus client of a ``usageDBConfig``; a ConfigError when it names no URL."""
    url = config.connection_string
    if url is None and config.connection_string_env_var:
        url = os.environ.get(config.connection_string_env_var) or None
        if url is None:
            raise ConfigError(
                f"environment variable {config.connection_string_env_var} is not set",
                obj="SchedulerConfiguration",
                field="usageDBConfig.connectionStringEnvVar",
            )
    if url is None:
        raise ConfigError(
            "kai run needs the Prometheus URL (connectionString or connectionStringEnvVar)",
            obj="SchedulerConfiguration",
            field="usageDBConfig.connectionString",
        )
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(
            f"{url!r} is not an http(s) URL",
            obj="SchedulerConfiguration",
            field="usageDBConfig.connectionString",
        )
    return PrometheusUsageClient(url, config.params, started=started)


class UsageLister:
    """The last usage table fetched, refreshed every ``fetchInterval`` in a thread.

    :meth:`table` never blocks a scheduling cycle beyond the first one, which waits up
    to ``waitTimeout`` for the first answer (or failure).  A failed fetch is logged
    with the reason and the age of the usage scheduling goes on with.
    """

    def __init__(
        self,
        fetch: Callable[[], UsageTable],
        params: UsageParams,
        *,
        where: str = "Prometheus",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self.params = params
        self.where = where
        self._clock = clock
        self._lock = threading.Lock()
        self._table: UsageTable = {}
        self._fetched_at: float | None = None
        self._first = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self.failures = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kai-usage", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def refresh(self) -> bool:
        """Fetch once now; whether it worked."""
        try:
            table = self._fetch()
        except Exception as err:  # noqa: BLE001 - any failure leaves the last table in use
            self.failures += 1
            self._failing = True
            with self._lock:
                age = None if self._fetched_at is None else self._clock() - self._fetched_at
            if age is None:
                going_on = "with zero usage (none fetched yet)"
            else:
                stale = age > self.params.staleness_period
                going_on = f"with the usage fetched {age:.0f}s ago" + (
                    " (stale: older than stalenessPeriod)" if stale else ""
                )
            log.warning(
                "time-based fair share: usage query to %s failed: %s; scheduling goes on %s",
                self.where,
                err,
                going_on,
            )
            return False
        finally:
            self._first.set()
        with self._lock:
            self._table = table
            self._fetched_at = self._clock()
        if self._failing:
            log.info(
                "time-based fair share: usage from %s is back (%d queues)", self.where, len(table)
            )
            self._failing = False
        return True

    def table(self) -> UsageTable:
        """The last usage table (empty before the first answer)."""
        if not self._first.is_set() and self._thread is not None:
            self._first.wait(self.params.wait_timeout)
        with self._lock:
            return self._table

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.params.fetch_interval)


def lister_from_config(config: UsageDBConfig, **kwargs: Any) -> UsageLister:
    client = client_from_config(config)
    return UsageLister(client.fetch, config.params, where=client.url, **kwargs)
