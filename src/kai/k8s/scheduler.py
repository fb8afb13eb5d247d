"""The live scheduler loop behind ``kai run``.

Start the informer cache, the HTTP endpoints and (optionally) leader election; once the
cache has synced, run a cycle, wait ``schedule_period`` from the end of that cycle (KAI's
sliding ``wait.Until``), and repeat.  A cycle snapshots the cache, runs one session and
applies its decisions.  Only the leader runs cycles; standbys keep their cache warm.  A
cycle that fails is logged and counted, never fatal.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import field
from datetime import datetime, timezone

from kai._dataclasses import dataclass
from kai.api.objects import GPU_RESOURCE, ClusterObjects
from kai.config import SchedulerConfig
from kai.engine import SessionResult, Snapshot, run_session
from kai.fairshare_prometheus import UsageLister, lister_from_config
from kai.k8s.binder import ApplyReport, Binder, EventRecorder, _ref
from kai.k8s.cache import CacheSnapshot, ClusterCache
from kai.k8s.client import KubeClient, parse_owner_resource
from kai.k8s.leader import LeaderElector, default_identity
from kai.k8s.metrics import SchedulerMetrics
from kai.k8s.server import HealthServer
from kai.memory import CycleCollector

log = logging.getLogger(__name__)


@dataclass
class SchedulerOptions:
    scheduler_name: str = "kai-scheduler"
    schedule_period: float = 1.0  # seconds between the end of a cycle and the next
    nodepool_label_key: str = "kai.scheduler/node-pool"
    partition_label_value: str = ""
    listen_address: str | None = ":8080"  # None: no HTTP endpoints
    leader_elect: bool = True
    lease_namespace: str = "kai-scheduler"
    lease_name: str = "kai-scheduler"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str | None = None
    dry_run: bool = False
    sync_timeout: float = 120.0
    backend: str | None = None
    bind_workers: int = 16
    write_workers: int = 8  # PodGroup status, pod conditions and events
    shutdown_timeout: float = 30.0  # for the binds in flight to finish
    bind_attempts: int = 3
    bind_backoff: float = 0.2
    watch_timeout: int = 300
    event_repeat_after: float = 600.0
    # Extra owner kinds to read, GROUP/VERSION/RESOURCE[=Kind] (CRDs such as JobSet).
    owner_resources: list[str] = field(default_factory=list)

    @property
    def nodepool(self) -> str:
        return self.partition_label_value or "default"


@dataclass
class CycleReport:
    ok: bool
    result: SessionResult | None = None
    applied: ApplyReport | None = None
    error: str | None = None
    seconds: float = 0.0


class Scheduler:
    def __init__(
        self,
        client: KubeClient,
        options: SchedulerOptions | None = None,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.client = client
        self.options = opts = options or SchedulerOptions()
        self.config = config or SchedulerConfig.default()
        self.identity = opts.identity or default_identity()
        self.metrics = SchedulerMetrics()
        self._last_snapshot: Snapshot | None = None  # the last cycle's (see _cycle)
        self.cache = ClusterCache(
            client,
            nodepool_label_key=opts.nodepool_label_key,
            partition_label_value=opts.partition_label_value,
            watch_timeout=opts.watch_timeout,
            extra_owner_kinds=[parse_owner_resource(r) for r in opts.owner_resources],
        )
        self.cache.on_relist = lambda kind: self.metrics.cache_relists.labels(kind).inc()
        self.events = EventRecorder(
            client,
            component=opts.scheduler_name,
            instance=self.identity,
            repeat_after=opts.event_repeat_after,
        )
        self.binder = Binder(
            client,
            self.cache,
            self.metrics,
            self.events,
            nodepool=opts.nodepool,
            workers=opts.bind_workers,
            write_workers=opts.write_workers,
            attempts=opts.bind_attempts,
            backoff=opts.bind_backoff,
            # A replica that lost the lease sends nothing more: the new leader decides.
            may_write=lambda: self.is_leader and not opts.dry_run,
        )
        self.elector: LeaderElector | None = None
        if opts.leader_elect and not opts.dry_run:
            self.elector = LeaderElector(
                client,
                opts.lease_namespace,
                opts.lease_name,
                identity=self.identity,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
                on_started=lambda: self.metrics.is_leader.set(1),
                on_stopped=self._lost_lease,
            )
        # Time-based fair share: queues' historical usage from Prometheus.
        self.usage: UsageLister | None = None
        if self.config.usage_db is not None:
            self.usage = lister_from_config(self.config.usage_db)
        self.server: HealthServer | None = None
        self.stop_event = threading.Event()
        self.collector = CycleCollector()
        self.cycles = 0
        self._heartbeat = time.monotonic()
        self._warned: frozenset[str] = frozenset()  # the last cycle's session warnings
        self._started = False
        self._looping = False

    # ------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def _lost_lease(self) -> None:
        self.metrics.is_leader.set(0)
        # The new leader exports the allocations now: Prometheus must not count both.
        self.metrics.set_usage_inputs({}, None)

    def _healthy(self) -> tuple[bool, str]:
        # The loop beats every period even as a standby; a long silence means it is stuck.
        limit = max(60.0, 20 * self.options.schedule_period)
        age = time.monotonic() - self._heartbeat
        if age > limit:
            return False, f"the scheduling loop has not run for {age:.0f}s"
        return True, "ok"

    def _ready(self) -> tuple[bool, str]:
        if not self.cache.synced:
            return False, "cache not synced"
        return True, "ok"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the cache, the endpoints and the election (not the loop)."""
        if self._started:
            return
        self._started = True
        if self.options.listen_address is not None:
            self.server = HealthServer(
                self.options.listen_address,
                metrics=self.metrics.render,
                healthy=self._healthy,
                ready=self._ready,
            )
            self.server.start()
        self.cache.start()
        if self.usage is not None:
            self.usage.start()
        if self.elector is not None:
            self.elector.start()
        else:
            self.metrics.is_leader.set(1)

    def shutdown(self) -> None:
        self.stop_event.set()
        # Binds in flight finish before the lease goes: the next leader would decide on
        # those pods again.
        self.binder.close(self.options.shutdown_timeout)
        if self.elector is not None:
            self.elector.stop(release=True)
        self.cache.stop()
        if self.usage is not None:
            self.usage.stop()
        if self.server is not None:
            self.server.stop()
        self.collector.release()
        log.info("scheduler stopped")

    def stop(self) -> None:
        """Ask the loop to end (from a signal handler or another thread)."""
        self.stop_event.set()

    def run(self) -> int:
        """The loop; returns an exit code once stopped."""
        self.start()
        try:
            if not self._wait_for_sync():
                return 1 if not self.stop_event.is_set() else 0
            log.info(
                "cache synced; scheduling every %.3gs as %s",
                self.options.schedule_period,
                self.identity,
            )
            self._looping = True
            self.collector.settle()  # the cache as listed: long-lived
            while not self.stop_event.is_set():
                self._heartbeat = time.monotonic()
                if self.is_leader:
                    self.cycle()
                self.collector.settle()
                self.stop_event.wait(self.options.schedule_period)
            return 0
        finally:
            self.shutdown()

    def run_once(self, leadership_timeout: float | None = None) -> int:
        """One cycle (after sync and, with election, after taking the lease), then stop."""
        self.start()
        try:
            if not self._wait_for_sync():
                return 1
            if self.elector is not None:
                wait = leadership_timeout
                if wait is None:
                    wait = self.options.lease_duration + 2 * self.options.retry_period
                if not self.elector.wait_for_leadership(wait):
                    log.error(
                        "another replica holds the lease %s/%s; not scheduling",
                        self.options.lease_namespace,
                        self.options.lease_name,
                    )
                    return 1
            report = self.cycle()
            return 0 if report.ok else 1
        finally:
            self.shutdown()

    def _wait_for_sync(self) -> bool:
        deadline = time.monotonic() + self.options.sync_timeout
        while not self.stop_event.is_set():
            if self.cache.wait_for_sync(0.2):
                return True
            self._heartbeat = time.monotonic()
            if time.monotonic() > deadline:
                log.error("the cache did not sync in %.0fs", self.options.sync_timeout)
                return False
        return False

    # ------------------------------------------------------------------ one cycle
    def cycle(self) -> CycleReport:
        start = time.perf_counter()
        self.cycles += 1
        try:
            with self.collector.paused():  # collected once after (run's settle)
                report = self._cycle()
            self.metrics.cycles.labels("ok").inc()
        except Exception as err:  # noqa: BLE001 - one bad cycle never stops the loop
            log.exception("scheduling cycle %d failed", self.cycles)
            self.metrics.cycles.labels("error").inc()
            report = CycleReport(False, error=f"{type(err).__name__}: {err}")
        report.seconds = time.perf_counter() - start
        self.metrics.e2e_latency.set(report.seconds * 1000.0)
        return report

    def _cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        snap = self.cache.snapshot()
        self._report_bad(snap)
        now = datetime.now(timezone.utc)
        self.metrics.open_session_latency.set((time.perf_counter() - t0) * 1000.0)
        snapshot = Snapshot(snap.objects, scheduler_name=self.options.scheduler_name)
        # Unchanged nodes are the cache's same objects: their statics are kept.
        snapshot.reuse_node_statics(self._last_snapshot)
        self._last_snapshot = snapshot
        result = run_session(
            snapshot,
            config=self.config,
            now=now,
            backend=self.options.backend,
            queue_usage=self.usage.table() if self.usage is not None else None,
        )
        self._warn(result.warnings)
        self.metrics.action_latency.clear()
        for action, seconds in result.action_seconds.items():
            self.metrics.action_latency.labels(action).set(seconds * 1000.0)
        self.metrics.set_queues(result.queues)
        self.metrics.set_usage_inputs(result.queues, _capacity(snap.objects))
        if self.options.dry_run:
            for d in result.decisions:
                log.info("dry-run decision: %s", json.dumps(d.to_json(), sort_keys=True))
            return CycleReport(True, result)
        if not self.is_leader:
            log.warning("lost the lease during the cycle; its decisions are dropped")
            return CycleReport(True, result)
        # In the loop the binds are sent while the next cycles run (the binder logs what
        # became of them); one cycle on its own (--once, embedding code) waits for them.
        applied = self.binder.apply(result, snap, now, wait=not self._looping, cycle=self.cycles)
        if not self._looping:
            if result.decisions or applied.bind_failed or applied.evict_failed:
                log.info(
                    "cycle %d: %d decision(s); %s",
                    self.cycles,
                    len(result.decisions),
                    applied.summary(),
                )
        elif result.decisions:
            binds = sum(1 for d in result.decisions if d.type == "bind")
            log.info(
                "cycle %d: %d decision(s), %d bind(s) handed over (%d in flight)",
                self.cycles,
                len(result.decisions),
                binds,
                self.binder.binds_in_flight,
            )
        return CycleReport(True, result, applied)

    def _warn(self, warnings: list[str]) -> None:
        """Log the session's warnings (a pod on a node the cluster does not have, ...)
        when they appear: one the previous cycle gave too is not logged again."""
        for message in warnings:
            if message not in self._warned:
                log.warning("%s", message)
        self._warned = frozenset(warnings)

    def _report_bad(self, snap: CacheSnapshot) -> None:
        self.metrics.bad_objects.set(len(snap.bad))
        for bad in snap.bad:
            involved = _ref(bad.raw)
            where = f"{bad.kind} {involved.get('namespace') or ''}/{involved.get('name')}"
            message = f"left out of scheduling: {bad.error}"
            if not self.events.should_send(involved, "InvalidObject", message):
                continue  # reported already
            log.warning("%s: %s", where, message)
            if not self.options.dry_run:
                self._send_invalid(involved, message)

    def _send_invalid(self, involved: dict, message: str) -> None:
        if not involved.get("namespace"):
            involved = {**involved, "namespace": "default"}  # events of cluster objects
        try:
            self.client.create_event(
                involved,
                reason="InvalidObject",
                message=message,
                type_="Warning",
                component=self.options.scheduler_name,
                instance=self.identity,
            )
        except Exception as err:  # noqa: BLE001 - best effort
            log.warning("event for an invalid object failed: %s", err)


def _capacity(objects: ClusterObjects) -> dict[str, float]:
    """What the ready nodes offer (GPUs, CPU millicores, memory bytes): the capacity
    queues' usage is normalised to."""
    total = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for node in objects.nodes:
        if node.ready:
            alloc = node.allocatable
            total["gpu"] += alloc.get(GPU_RESOURCE, 0.0)
            total["cpu"] += alloc.get("cpu", 0.0)
            total["memory"] += alloc.get("memory", 0.0)
    return total
