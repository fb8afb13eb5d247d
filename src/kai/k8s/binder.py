"""Apply a session's committed decisions to the cluster.

Order: evictions first (they free what pipelined and reclaiming groups wait for), then
binds, then PodGroup annotations and status, the pending pods' ``PodScheduled``
condition, then events.

Evictions are sent while the cycle waits.  Binds are not: binding thousands of pods
takes longer than a cycle, and the loop must go on meanwhile (KAI-Scheduler runs its
binder apart for this reason).  The cycle hands its binds to the binder's workers and
returns; from then on the cache counts each pod as bound to its node (kube-scheduler's
"assume"), so the next cycle sees the capacity used and never decides on the pod again.
A bind that fails drops the assumption: the pod is pending again.  The workers take the
binds of the cycles in flight in turn, so a later cycle's few binds do not wait behind an
earlier cycle's thousands.

Binds are retried; a shared-GPU pod is first labelled with its device group
(``runai-gpu-group``), which the next snapshot reads back, and a pod whose label cannot
be written is not bound (a failed bind).  When a gang cannot be completed (a bind fails
for good and the group would stay below minMember), its remaining binds are skipped and
the members bound in this cycle are rolled back: a pod cannot be unbound, so a
controller-owned member is deleted (its controller recreates it pending) and any other
member is left and reported.

PodGroup annotations and status, pod conditions and events are written by other
workers.  What depends on a group's binds (its last-start annotation, a rollback's
message) is written once they are answered; the rest is queued at hand-off.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field
from datetime import datetime, timezone
from typing import Any

import orjson

from kai._dataclasses import dataclass
from kai.engine import (
    IDLE_REASON,
    LAST_START_ANNOTATION,
    NO_PODS_REASON,
    STALE_ANNOTATION,
    SessionResult,
)
from kai.k8s import protobuf
from kai.k8s.cache import CacheSnapshot, ClusterCache
from kai.k8s.client import POD_GROUP, KubeClient, status_of
from kai.k8s.connections import PipelineRequest
from kai.k8s.metrics import SchedulerMetrics
from kai.snapshot.builder import GPU_GROUP_LABEL, POD_GROUP_ANNOTATION

log = logging.getLogger(__name__)

LAST_EVICTION_ANNOTATION = "kai.scheduler/last-eviction-timestamp"
UNSCHEDULABLE_CONDITION = "UnschedulableOnNodePool"
RECEIVED_RESOURCE_TYPE_ANNOTATION = "received-resource-type"
RECEIVED_TYPE_FRACTION = "Fraction"
# Group outcomes that are no scheduling problem (nothing to say in an event or a
# condition); a group whose pods all name another scheduler is that scheduler's to tell.
_QUIET_REASONS = frozenset({IDLE_REASON, NO_PODS_REASON})


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def group_of(pod_key: str, raw_pod: dict | None) -> str:
    """The engine's job key of a pod: namespace/PodGroup, or namespace/pod for a single."""
    namespace, _, name = pod_key.partition("/")
    annotations = ((raw_pod or {}).get("metadata") or {}).get("annotations") or {}
    group = annotations.get(POD_GROUP_ANNOTATION)
    return f"{namespace}/{group or name}"


def _ref(raw: dict) -> dict:
    meta = raw.get("metadata") or {}
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": raw.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }


def _uid(batch: _Batch, d: Any) -> str | None:
    """The uid of the pod a decision binds, as the cycle saw it."""
    return ((batch.snap.pods.get(d.pod) or {}).get("metadata") or {}).get("uid")


def _controller_owned(raw: dict) -> bool:
    refs = (raw.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") for r in refs)


def retryable(err: BaseException) -> bool:
    """A connection error, 429 or 5xx: worth sending again."""
    code = status_of(err)
    return code == 0 or code == 429 or code >= 500


def with_retries(fn: Callable[[], Any], attempts: int, backoff: float) -> Any:
    """Retry connection errors, 429 and 5xx with exponential backoff; others fail at once."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:
            if not retryable(err) or attempt == attempts - 1:
                raise
            time.sleep(backoff * 2**attempt)
    return None


class EventRecorder:
    """Creates core/v1 Events, each (object, reason, message) at most once per
    ``repeat_after`` seconds: a group pending for an hour gives a handful, not 3600."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        instance: str = "",
        repeat_after: float = 600.0,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance
        self.repeat_after = repeat_after
        self._sent: dict[tuple, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.failures = 0

    def should_send(self, involved: dict, reason: str, message: str) -> bool:
        key = (involved.get("kind"), involved.get("namespace"), involved.get("name"), reason)
        now = time.monotonic()
        with self._lock:
            last = self._sent.get(key)
            if last is not None and last[0] == message and now - last[1] < self.repeat_after:
                return False
            self._sent[key] = (message, now)
            if len(self._sent) > 50_000:  # bound memory on huge, churning clusters
                cutoff = now - self.repeat_after
                self._sent = {k: v for k, v in self._sent.items() if v[1] >= cutoff}
            return True

    def emit(self, involved: dict, reason: str, message: str, type_: str = "Normal") -> bool:
        if not self.should_send(involved, reason, message):
            return False
        return self.send(involved, reason, message, type_)

    def send(self, involved: dict, reason: str, message: str, type_: str = "Normal") -> bool:
        """Create the event (``should_send`` said yes); False when that failed."""
        try:
            self.client.create_event(
                involved,
                reason=reason,
                message=message,
                type_=type_,
                component=self.component,
                instance=self.instance,
            )
            return True
        except Exception as err:  # noqa: BLE001 - events are best effort
            self.failures += 1
            log.warning(
                "event %s on %s/%s failed: %s",
                reason,
                involved.get("namespace"),
                involved.get("name"),
                err,
            )
            return False


@dataclass
class ApplyReport:
    bound: list[str] = field(default_factory=list)
    bind_failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # binds not tried: their gang failed
    rolled_back: list[str] = field(default_factory=list)  # bound, then deleted
    rollback_groups: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    evict_failed: dict[str, str] = field(default_factory=dict)
    # Evictions of pods that no node runs: refused, never sent.
    evict_refused: dict[str, str] = field(default_factory=dict)
    pipelined: list[str] = field(default_factory=list)
    patched_groups: list[str] = field(default_factory=list)
    labelled: list[str] = field(default_factory=list)  # shared-GPU pods given their group
    pod_conditions: list[str] = field(default_factory=list)  # PodScheduled=False written
    events: int = 0
    # Workers fill the report in after the cycle handed its binds over.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def summary(self) -> str:
        return (
            f"bound {len(self.bound)}, bind failed {len(self.bind_failed)}, "
            f"rolled back {len(self.rolled_back)} in {len(self.rollback_groups)} group(s), "
            f"evicted {len(self.evicted)}, evict failed {len(self.evict_failed)}, "
            f"evict refused {len(self.evict_refused)}, "
            f"pipelined {len(self.pipelined)}, podgroups patched {len(self.patched_groups)}, "
            f"pod conditions {len(self.pod_conditions)}"
        )

    def add_event(self, sent: bool) -> None:
        if sent:
            with self.lock:
                self.events += 1


# ---------------------------------------------------------------------- work queues

WriteKey = Hashable


class _WriteQueue:
    """Writes that follow the binds (PodGroup annotations and status, pod conditions,
    events), run by a few workers.

    Each write is keyed by what it changes.  A queued write that a later cycle asks for
    again is replaced by the later one (annotations are merged), a later cycle that no
    longer wants it cancels it, and one key is written by one worker at a time: a slow
    API server neither piles up repeated writes nor sees an older write land after a
    newer one.

    Binds go first: while ``hold()`` says binds are waiting, a write waits too, up to
    ``max_hold`` seconds from when it was queued.  Writes of PodGroups cost the API
    server more than binds, and a placed pod matters more than its group's bookkeeping."""

    def __init__(
        self,
        workers: int,
        may_write: Callable[[], bool],
        name: str,
        *,
        hold: Callable[[], bool] = lambda: False,
        max_hold: float = 0.0,
    ) -> None:
        self.workers = max(1, workers)
        self.may_write = may_write
        self.name = name
        self.hold = hold
        self.max_hold = max_hold
        self._cv = threading.Condition()
        # Insertion-ordered: the oldest key first; replacing a write keeps its place.
        self._queued: dict[WriteKey, tuple[Callable[[Any], None], Any]] = {}
        self._since: dict[WriteKey, float] = {}  # when each queued key was first queued
        self._running: set[WriteKey] = set()
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._seq = itertools.count()

    def put(
        self,
        key: WriteKey | None,
        write: Callable[[Any], None],
        payload: Any = None,
        merge: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.put_many([(key, write, payload, merge)])

    def put_many(
        self,
        writes: list[
            tuple[WriteKey | None, Callable[[Any], None], Any, Callable[[Any, Any], Any] | None]
        ],
        cancel: Iterable[WriteKey] = (),
    ) -> None:
        with self._cv:
            if self._closing:
                return
            for key in cancel:
                if self._queued.pop(key, None) is not None:
                    del self._since[key]
            now = time.monotonic()
            for key, write, payload, merge in writes:
                if key is None:
                    key = ("once", next(self._seq))
                old = self._queued.get(key)
                if old is None:
                    self._since[key] = now
                elif merge is not None:
                    payload = merge(old[1], payload)
                self._queued[key] = (write, payload)
            if writes and not self._threads:
                for i in range(self.workers):
                    t = threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
                    t.start()
                    self._threads.append(t)
            self._cv.notify_all()

    def _next(self) -> WriteKey | None:
        # At most `workers` keys are running: the scan stops within that many steps.
        return next((k for k in self._queued if k not in self._running), None)

    def _work(self) -> None:
        while True:
            with self._cv:
                while True:
                    key = self._next()
                    if self._closing or key is None:
                        if self._closing:
                            return
                        self._cv.wait()
                        continue
                    held = self.max_hold - (time.monotonic() - self._since[key])
                    if held > 0 and self.hold():
                        self._cv.wait(min(held, 0.05))  # binds are waiting: let them go
                        continue
                    break
                write, payload = self._queued.pop(key)
                del self._since[key]
                self._running.add(key)
            try:
                if self.may_write():
                    write(payload)
            except Exception:  # noqa: BLE001 - a failed write never stops the others
                log.exception("a write after the binds failed")
            finally:
                with self._cv:
                    self._running.discard(key)
                    self._cv.notify_all()

    def wait_idle(self, timeout: float | None) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: not self._queued and not self._running, timeout)

    def busy(self) -> bool:
        """Writes are queued or running."""
        with self._cv:
            return bool(self._queued or self._running)

    def close(self, timeout: float) -> None:
        """Stop the workers (what is still queued is dropped); wait for them."""
        with self._cv:
            self._closing = True
            self._queued.clear()
            self._since.clear()
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


class _Gang:
    """The binds of one group in one cycle, and what became of them."""

    def __init__(self, key: str, min_member: int, active_before: int) -> None:
        self.key = key
        self.min_member = min_member
        self.active_before = active_before  # members already running or binding
        self.left = 0  # binds not answered yet
        self.failed = False  # a bind (or its GPU group label) failed for good
        self.lock = threading.Lock()
        self.decisions: list[Any] = []
        self.bound: list[str] = []
        self.labelled: list[str] = []
        # pod -> (outcome, error, label written): outcome bound, failed, skipped, abandoned
        self.outcomes: dict[str, tuple[str, BaseException | None, bool]] = {}


@dataclass(eq=False)
class _Batch:
    """One cycle's binds, handed over to the workers."""

    seq: int  # the cycle's number
    result: SessionResult
    snap: CacheSnapshot
    report: ApplyReport
    now: datetime
    todo: deque[tuple[Any, _Gang]] = field(default_factory=deque)
    gangs: dict[str, _Gang] = field(default_factory=dict)
    gangs_left: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    # Made when first needed: most cycles of a large, busy cluster need neither.
    @functools.cached_property
    def members(self) -> dict[str, list[str]]:
        """The pods of each group (the engine's job key), of the whole snapshot."""
        members: dict[str, list[str]] = defaultdict(list)
        for pod, raw in self.snap.pods.items():
            members[group_of(pod, raw)].append(pod)
        return members

    @functools.cached_property
    def created(self) -> dict[str, datetime | None]:
        return {p.key: p.creation_timestamp for p in self.snap.objects.pods}


class _BindQueue:
    """Binds handed over by the cycles.  They are taken from the cycles in flight in
    turn, so a later cycle's few binds do not queue behind an earlier cycle's thousands.

    Taken by ``workers`` threads that each send one at a time, or, where the binder
    pipelines its binds, by the pipeline's thread (:meth:`take`, woken by ``on_put``)."""

    def __init__(
        self,
        workers: int,
        send: Callable[[_Batch, Any, _Gang], None],
        on_put: Callable[[], None] | None = None,
    ) -> None:
        self.workers = max(1, workers)
        self._send = send
        self._on_put = on_put
        self._cv = threading.Condition()
        self._ready: deque[_Batch] = deque()
        self._busy = 0
        self._threads: list[threading.Thread] = []
        self._closing = False

    def put(self, batch: _Batch) -> bool:
        """Queue a cycle's binds; False once closing."""
        with self._cv:
            if self._closing:
                return False
            self._ready.append(batch)
            if self._on_put is None and not self._threads:
                for i in range(self.workers):
                    t = threading.Thread(target=self._work, name=f"kai-bind-{i}", daemon=True)
                    t.start()
                    self._threads.append(t)
            self._cv.notify_all()
        if self._on_put is not None:
            self._on_put()
        return True

    def _pop(self) -> tuple[_Batch, Any, _Gang]:
        """The next bind (with the lock held and a batch ready); busy until finished."""
        batch = self._ready.popleft()
        decision, gang = batch.todo.popleft()
        if batch.todo:
            self._ready.append(batch)  # round robin between the cycles
        self._busy += 1
        return batch, decision, gang

    def take(self) -> tuple[_Batch, Any, _Gang] | None:
        """The next bind, without waiting; :meth:`finished` once it is done."""
        with self._cv:
            if self._closing or not self._ready:
                return None
            return self._pop()

    def finished(self) -> None:
        with self._cv:
            self._busy -= 1
            self._cv.notify_all()

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._ready and not self._closing:
                    self._cv.wait()
                if self._closing:
                    return
                batch, decision, gang = self._pop()
            try:
                self._send(batch, decision, gang)
            except Exception:  # noqa: BLE001 - a worker never dies
                log.exception("binding %s failed unexpectedly", decision.pod)
            finally:
                self.finished()

    def wait_idle(self, timeout: float | None) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: not self._ready and not self._busy, timeout)

    def waiting(self) -> bool:
        """Binds wait to be sent (read without the lock: a hint)."""
        return bool(self._ready)

    def close(self, timeout: float) -> list[_Batch]:
        """Stop the workers after the bind each one is sending; the batches left."""
        with self._cv:
            self._closing = True
            left = list(self._ready)
            self._ready.clear()
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return left


def _merge_annotations(old: dict[str, str | None], new: dict[str, str | None]) -> dict:
    return {**old, **new}


# ---------------------------------------------------------------------- the binder


class Binder:
    def __init__(
        self,
        client: KubeClient,
        cache: ClusterCache | None,
        metrics: SchedulerMetrics,
        events: EventRecorder,
        *,
        nodepool: str = "default",
        workers: int = 16,
        write_workers: int = 8,
        write_hold: float = 30.0,
        attempts: int = 3,
        backoff: float = 0.2,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client = client
        self.cache = cache
        self.metrics = metrics
        self.events = events
        self.nodepool = nodepool
        self.attempts = attempts
        self.backoff = backoff
        self.workers = workers
        # False once the lease is lost: nothing more is sent, queued binds are dropped.
        self.may_write = may_write
        # Plain binds go through one thread that keeps ``workers`` of them in flight
        # (connections.Pipeline); the rest, and every bind where the client cannot
        # pipeline (through a proxy), on worker threads that each send one at a time.
        self._pipeline = client.pipeline(workers, self._take_bind, name="kai-bind-io")
        self._binds = _BindQueue(
            workers,
            self._send,
            on_put=self._pipeline.wake if self._pipeline is not None else None,
        )
        self._workers: ThreadPoolExecutor | None = None  # the pipeline's, made when needed
        self._closing = False
        # Writes wait for the waiting binds, ``write_hold`` seconds at most.
        self._writes = _WriteQueue(
            write_workers,
            may_write,
            "kai-bind-write",
            hold=self._binds.waiting,
            max_hold=write_hold,
        )
        self._evict_pool: ThreadPoolExecutor | None = None
        # Taken around every change of a pod's assumption in the cache, so that a write's
        # answer never replaces a pod that a cycle has just handed over.
        self._assume_lock = threading.Lock()
        self._in_flight: dict[str, str] = {}  # pod -> node, from hand-off to its outcome
        self._sending = 0  # binds handed over and not answered yet
        self._batches = itertools.count(1)

    @property
    def binds_in_flight(self) -> int:
        with self._assume_lock:
            return self._sending

    def _count_sending(self, delta: int) -> None:
        with self._assume_lock:
            self._sending += delta
            self.metrics.binds_in_flight.set(self._sending)

    # ------------------------------------------------------------------ lifecycle
    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until every bind handed over and every write after it is done."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        # Binds queue writes: once both are idle in that order, nothing is left.
        return self._binds.wait_idle(left()) and self._writes.wait_idle(left())

    def close(self, timeout: float = 30.0) -> None:
        """Let the binds in flight finish (``timeout`` at most), then stop the workers."""
        if not self.wait_idle(timeout):
            log.warning(
                "%d bind(s) still in flight after %.0fs at shutdown", self.binds_in_flight, timeout
            )
        self._closing = True
        for batch in self._binds.close(5.0):
            batch.done.set()
        if self._pipeline is not None:
            self._pipeline.close(5.0)
        if self._workers is not None:
            self._workers.shutdown(wait=True)
        self._writes.close(5.0)
        if self._evict_pool is not None:
            self._evict_pool.shutdown(wait=True)

    # ------------------------------------------------------------------ entry point
    def apply(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        now: datetime | None = None,
        *,
        wait: bool = True,
        cycle: int | None = None,
    ) -> ApplyReport:
        """Write a session's decisions.  Evictions are sent at once; the binds are handed
        to the workers, and the pods count as bound in the cache from now on, so the next
        cycle neither waits for them nor decides on them again.  What depends on a
        group's binds (its rollback, last-start annotation, status) is written once they
        are answered; the rest is queued.  ``wait``: return once all of it is done (one
        cycle on its own); otherwise the report fills in as the workers go.  ``cycle``
        names the cycle in the log."""
        now = now or datetime.now(timezone.utc)
        report = ApplyReport()
        self._evict(result, snap, report, now)
        batch = _Batch(
            cycle if cycle is not None else next(self._batches), result, snap, report, now
        )
        self._hand_over(batch)
        self._queue_writes(batch)
        if not batch.gangs:
            self._batch_done(batch)
        elif not self._binds.put(batch):
            log.warning("shutting down: %d bind(s) not sent", len(batch.todo))
            self._batch_done(batch)
        if wait:
            batch.done.wait()
            self._writes.wait_idle(None)
        return report

    def _hand_over(self, batch: _Batch) -> None:
        """Assume the cycle's binds in the cache and group them by gang."""
        result, snap = batch.result, batch.snap
        binds = []
        with self._assume_lock:
            for d in result.decisions:
                if d.type != "bind" or not d.node:
                    continue
                if d.pod in self._in_flight:
                    # The cache shows it bound: the engine never asks this twice.
                    log.error("not binding %s again: its bind is in flight", d.pod)
                    continue
                self._in_flight[d.pod] = d.node
                binds.append(d)
                if self.cache is not None:
                    ns, _, name = d.pod.partition("/")
                    self.cache.assume_bound(ns, name, d.node)
                    if d.gpu_groups:
                        # The device group is part of the placement the next cycle sees.
                        self.cache.assume("Pod", ns, name, _mark_gpu_group(d.gpu_groups[0]))
        if not binds:
            return
        min_members = {f"{g.namespace}/{g.name}": g.min_member for g in snap.objects.pod_groups}
        for d in binds:
            key = group_of(d.pod, snap.pods.get(d.pod))
            gang = batch.gangs.get(key)
            if gang is None:
                active = 0  # a single pod (no group): its group is itself, being bound
                if key != d.pod:
                    active = sum(
                        1
                        for p in batch.members.get(key, ())
                        if (res := result.pods.get(p)) is not None and res.status == "Running"
                    )
                gang = batch.gangs[key] = _Gang(key, min_members.get(key) or 1, active)
            gang.decisions.append(d)
            gang.left += 1
            batch.todo.append((d, gang))
        batch.gangs_left = len(batch.gangs)
        self._count_sending(len(binds))

    # ------------------------------------------------------------------ evictions
    def _pool(self) -> ThreadPoolExecutor:
        if self._evict_pool is None:
            self._evict_pool = ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="kai-bind-evict"
            )
        return self._evict_pool

    def _evict(
        self, result: SessionResult, snap: CacheSnapshot, report: ApplyReport, now: datetime
    ) -> None:
        evicts = []
        for d in result.decisions:
            if d.type != "evict":
                continue
            why_not = _not_evictable(snap.pods.get(d.pod))
            if why_not is not None:
                # The engine never asks this; a pending pod must not vanish if it did.
                report.evict_refused[d.pod] = why_not
                log.error("not evicting %s: %s", d.pod, why_not)
                continue
            evicts.append(d)
        if not evicts:
            return

        def one(d: Any) -> tuple[Any, BaseException | None]:
            ns, _, name = d.pod.partition("/")
            try:
                with_retries(lambda: self.client.evict(ns, name), self.attempts, self.backoff)
                return d, None
            except Exception as err:  # noqa: BLE001 - reported per pod
                return d, err

        evicted_groups: set[str] = set()
        for d, err in self._pool().map(one, evicts):
            raw = snap.pods.get(d.pod)
            group = group_of(d.pod, raw)
            if err is not None:
                # 429: a PodDisruptionBudget forbids it now; the next cycle decides again.
                report.evict_failed[d.pod] = str(err)
                log.warning("evicting %s failed: %s", d.pod, err)
                continue
            report.evicted.append(d.pod)
            evicted_groups.add(group)
            pg_raw = snap.pod_groups.get(group)
            self.metrics.evicted_pods.labels(
                group,
                ((pg_raw or {}).get("metadata") or {}).get("uid", ""),
                self.nodepool,
                d.action,
            ).inc()
            if self.cache is not None:
                ns, _, name = d.pod.partition("/")
                self.cache.assume("Pod", ns, name, _mark_deleting(now))
            if raw is not None:
                msg = f"evicted by {d.action}" + (f": {d.reason}" if d.reason else "")
                self._queue_event(report, _ref(raw), "Evicted", msg, "Normal")
        # The victim's PodGroup remembers when it was last evicted (preemption delay).
        for group in sorted(evicted_groups):
            if group in snap.pod_groups:
                self._queue_annotations(group, {LAST_EVICTION_ANNOTATION: _rfc3339(now)}, report)

    # ------------------------------------------------------------------ binds
    def _send(self, batch: _Batch, d: Any, gang: _Gang) -> None:
        """One bind, on a worker; the last of its gang finishes the gang."""
        outcome, err, labelled = self._bind_one(batch, d, gang)
        if self._record(d, gang, outcome, err, labelled):
            self._finish_gang(batch, gang)

    def _record(
        self, d: Any, gang: _Gang, outcome: str, err: BaseException | None, labelled: bool
    ) -> bool:
        """A bind's outcome; True for the last of its gang."""
        if outcome == "failed" and err is not None and _assigned_node(err) == d.node:
            # A retry after a bind that went through but whose answer was lost.
            outcome, err = "bound", None
        with gang.lock:
            gang.outcomes[d.pod] = (outcome, err, labelled)
            if outcome == "bound":
                gang.bound.append(d.pod)
            elif outcome == "failed":
                gang.failed = True
            if labelled:
                gang.labelled.append(d.pod)
            gang.left -= 1
            last = gang.left == 0
        self._count_sending(-1)
        return last

    def _observe_waited(self, batch: _Batch, d: Any) -> None:
        if (created_at := batch.created.get(d.pod)) is not None:
            waited = (datetime.now(timezone.utc) - created_at).total_seconds()
            self.metrics.task_scheduling_latency.observe(max(0.0, waited) * 1000.0)

    def _unsent(self, gang: _Gang) -> str | None:
        """Why a bind is not sent: its gang failed already (``skipped``: a gang that
        failed skips its remaining binds) or the lease is lost (``abandoned``)."""
        if gang.failed and gang.min_member > 1:
            return "skipped"
        if not self.may_write():
            return "abandoned"
        return None

    def _bind_one(
        self, batch: _Batch, d: Any, gang: _Gang
    ) -> tuple[str, BaseException | None, bool]:
        if (unsent := self._unsent(gang)) is not None:
            return unsent, None, False
        labelled = False
        if d.gpu_groups:
            # The device group first: without it the next cycle would not know which
            # shared GPU the pod is on.  No label, no bind.
            ns, _, name = d.pod.partition("/")
            raw = batch.snap.pods.get(d.pod) or {}
            try:
                labelled = self._label_gpu_group(ns, name, raw, d.gpu_groups[0])
            except Exception as err:  # noqa: BLE001 - reported per pod
                return "failed", RuntimeError(f"labelling its GPU group failed: {err}"), False
        self._observe_waited(batch, d)
        start = time.perf_counter()
        failure = self._bind_with_retries(batch, d, self.attempts, self.backoff)
        self.metrics.task_bind_latency.observe((time.perf_counter() - start) * 1000.0)
        return ("bound", None, labelled) if failure is None else ("failed", failure, labelled)

    def _bind_with_retries(
        self, batch: _Batch, d: Any, attempts: int, backoff: float
    ) -> BaseException | None:
        """Bind ``d``'s pod, waiting for the answers (see :func:`with_retries`); the last
        error, or None once an answer said it is bound (:meth:`_record` reads the error)."""
        ns, _, name = d.pod.partition("/")
        uid = _uid(batch, d)
        try:
            with_retries(lambda: self.client.bind(ns, name, d.node, uid), attempts, backoff)
        except Exception as err:  # noqa: BLE001 - reported per pod
            return err
        return None

    # ------------------------------------------------------------------ pipelined binds
    def _worker_pool(self) -> ThreadPoolExecutor:
        if self._workers is None:
            self._workers = ThreadPoolExecutor(self.workers, thread_name_prefix="kai-bind")
        return self._workers

    def _on_worker(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` on a worker thread, then count its bind finished."""

        def run() -> None:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a worker never dies
                log.exception("binding failed unexpectedly")
            finally:
                self._binds.finished()

        self._worker_pool().submit(run)

    def _take_bind(self) -> PipelineRequest | None:
        """The next bind for the pipeline, on its thread.  A bind that is not a lone
        POST (a GPU group label first, a gang that failed, a lost lease) goes to a
        worker as it would without the pipeline."""
        assert self._pipeline is not None
        while (item := self._binds.take()) is not None:
            batch, d, gang = item
            if d.gpu_groups or self._unsent(gang) is not None:
                self._on_worker(self._send, batch, d, gang)
                continue
            ns, _, name = d.pod.partition("/")
            self._observe_waited(batch, d)
            path, body, content_type = self.client.bind_request(ns, name, d.node, _uid(batch, d))
            done = functools.partial(
                self._bind_answered, batch, d, gang, content_type, time.perf_counter()
            )
            # The answer is read only if it is a refusal: protobuf spares the API
            # server encoding it in JSON.
            return self._pipeline.request(
                "POST", path, body, content_type, done, accept=protobuf.PROTOBUF_OR_JSON
            )
        return None

    def _bind_answered(
        self,
        batch: _Batch,
        d: Any,
        gang: _Gang,
        content_type: str,
        start: float,
        _body: bytes | None,
        err: BaseException | None,
    ) -> None:
        """A pipelined bind's answer, on the pipeline's thread: quick work only."""
        if err is not None and not self._closing:
            if self.client.protobuf_refused(err, content_type):
                self._on_worker(self._send, batch, d, gang)  # again, in JSON
                return
            if retryable(err) and self.attempts > 1:
                self._on_worker(self._retry_bind, batch, d, gang, start)
                return
        self._bind_done(batch, d, gang, start, err)

    def _retry_bind(self, batch: _Batch, d: Any, gang: _Gang, start: float) -> None:
        """The retries of a pipelined bind whose first try failed, on a worker."""
        time.sleep(self.backoff)
        err = self._bind_with_retries(batch, d, self.attempts - 1, self.backoff * 2)
        self._bind_done(batch, d, gang, start, err, on_worker=True)

    def _bind_done(
        self,
        batch: _Batch,
        d: Any,
        gang: _Gang,
        start: float,
        err: BaseException | None,
        *,
        on_worker: bool = False,
    ) -> None:
        self.metrics.task_bind_latency.observe((time.perf_counter() - start) * 1000.0)
        try:
            if self._record(d, gang, "bound" if err is None else "failed", err, False):
                if gang.failed and not on_worker:
                    # A rollback deletes pods: not on the pipeline's thread.
                    self._on_worker(self._finish_gang, batch, gang)
                    return
                self._finish_gang(batch, gang)
        except Exception:  # noqa: BLE001 - the pipeline's thread must not die
            log.exception("binding %s failed unexpectedly", d.pod)
        if not on_worker:
            self._binds.finished()

    def _label_gpu_group(self, ns: str, name: str, raw: dict, group: str) -> bool:
        """Record a shared-GPU pod's device group on the pod (label ``runai-gpu-group``,
        annotation ``received-resource-type: Fraction``); False when it is there already.
        The cache has it from the hand-off, and the watch brings the pod back."""
        meta = raw.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        if (
            labels.get(GPU_GROUP_LABEL) == group
            and annotations.get(RECEIVED_RESOURCE_TYPE_ANNOTATION) == RECEIVED_TYPE_FRACTION
        ):
            return False
        patch = {
            "metadata": {
                "labels": {GPU_GROUP_LABEL: group},
                "annotations": {RECEIVED_RESOURCE_TYPE_ANNOTATION: RECEIVED_TYPE_FRACTION},
            }
        }
        with_retries(lambda: self.client.patch_pod(ns, name, patch), self.attempts, self.backoff)
        return True

    def _finish_gang(self, batch: _Batch, gang: _Gang) -> None:
        """Every bind of a gang answered: roll back an incomplete gang, drop the
        assumptions that did not hold, record the outcome and queue the group's writes."""
        snap, report = batch.snap, batch.report
        failed = {p: e for p, (o, e, _) in gang.outcomes.items() if o == "failed"}
        abandoned = sorted(p for p, (o, _, _) in gang.outcomes.items() if o == "abandoned")
        rolled = False
        rolled_back: list[str] = []
        if gang.failed and gang.active_before + len(gang.bound) < gang.min_member:
            if self.may_write():
                rolled = True
                rolled_back = self._rollback(gang, snap, report, sorted(failed))
            else:
                log.warning("pod group %s: not rolled back, the lease is lost", gang.key)
        if abandoned:
            log.warning("lost the lease: %d bind(s) of %s not sent", len(abandoned), gang.key)
        with self._assume_lock:
            for d in gang.decisions:
                del self._in_flight[d.pod]
                if gang.outcomes[d.pod][0] != "bound":
                    self._forget(batch, d, gang.outcomes[d.pod][2])
        for pod, err in failed.items():
            self.metrics.bind_failures.inc()
            log.warning("binding %s to %s failed: %s", pod, self._node_of(gang, pod), err)
        with report.lock:
            report.bound.extend(gang.bound)
            report.labelled.extend(gang.labelled)
            report.bind_failed.update({p: str(e) for p, e in failed.items()})
            report.skipped.extend(
                p for p, (o, _, _) in gang.outcomes.items() if o in ("skipped", "abandoned")
            )
            report.rolled_back.extend(rolled_back)
            if rolled:
                report.rollback_groups.append(gang.key)
        if gang.bound and not rolled:
            actions = {d.action for d in gang.decisions}
            for action in actions:
                self.metrics.podgroups_scheduled.labels(action).inc()
            if "preempt" in actions:
                self.metrics.preemption_attempts.inc()
        g = batch.result.pod_groups.get(gang.key)
        if g is not None and self.may_write():
            # Only add: a later cycle may have queued newer writes of this group already.
            writes, _ = self._group_writes(
                batch,
                gang.key,
                g,
                rolled=rolled,
                started=bool(gang.bound) and not rolled,
                cancel=False,
            )
            self._writes.put_many(writes)
        with batch.lock:
            batch.gangs_left -= 1
            finished = batch.gangs_left == 0
        if finished:
            self._batch_done(batch)

    @staticmethod
    def _node_of(gang: _Gang, pod: str) -> str:
        return next((d.node for d in gang.decisions if d.pod == pod), "")

    def _forget(self, batch: _Batch, d: Any, labelled: bool) -> None:
        """A bind that did not happen: the pod is pending again in the cache (with
        ``_assume_lock`` held)."""
        if self.cache is None:
            return
        ns, _, name = d.pod.partition("/")
        raw = batch.snap.pods.get(d.pod) or {}
        self.cache.forget_bound(ns, name)
        # What the hand-off assumed beyond the node (the GPU group) goes too, unless the
        # label was written.
        self.cache.assume("Pod", ns, name, _unmark_bound(d.node, None if labelled else raw))

    def _rollback(
        self, gang: _Gang, snap: CacheSnapshot, report: ApplyReport, failed: list[str]
    ) -> list[str]:
        """Delete the gang's members bound in this cycle (a pod cannot be unbound); a
        member no controller would recreate is left and reported."""
        self.metrics.gang_rollbacks.inc()
        now = datetime.now(timezone.utc)
        rolled_back: list[str] = []
        kept: list[str] = []
        for pod in sorted(gang.bound):
            raw = snap.pods.get(pod) or {}
            ns, _, name = pod.partition("/")
            if not _controller_owned(raw):
                kept.append(pod)
                continue
            try:
                with_retries(
                    functools.partial(self.client.delete_pod, ns, name),
                    self.attempts,
                    self.backoff,
                )
            except Exception as err:  # noqa: BLE001
                if status_of(err) != 404:
                    kept.append(pod)
                    log.warning("rolling back %s failed: %s", pod, err)
                    continue
            rolled_back.append(pod)
            if self.cache is not None:
                self.cache.assume("Pod", ns, name, _mark_deleting(now))
        msg = (
            f"binding {', '.join(failed)} failed; the gang needs {gang.min_member} pods, "
            f"so its binds of this cycle were rolled back"
        )
        if kept:
            msg += f" ({', '.join(kept)} stay bound: no controller would recreate them)"
        log.warning("pod group %s: %s", gang.key, msg)
        involved = snap.pod_groups.get(gang.key) or snap.pods.get(failed[0] if failed else "")
        if involved:
            self._queue_event(report, _ref(involved), "BindFailed", msg, "Warning")
        return rolled_back

    def _batch_done(self, batch: _Batch) -> None:
        report = batch.report
        with report.lock:
            for names in (report.bound, report.skipped, report.rolled_back, report.labelled):
                names.sort()
            report.rollback_groups.sort()
        if report.bound or report.bind_failed or report.skipped:
            log.info("cycle %d's binds done: %s", batch.seq, report.summary())
        batch.done.set()

    # ------------------------------------------------------------------ writes
    def _queue_writes(self, batch: _Batch) -> None:
        """Queue what does not wait for binds: pipelined pods' events, metrics, and the
        writes of every group with no bind in this cycle."""
        result, snap, report = batch.result, batch.snap, batch.report
        acted: dict[str, set[str]] = defaultdict(set)
        pipelined: dict[str, set[str]] = defaultdict(set)
        for d in result.decisions:
            g = group_of(d.pod, snap.pods.get(d.pod))
            acted[d.action].add(g)
            if d.type == "pipeline":
                pipelined[d.action].add(g)
                report.pipelined.append(d.pod)
                raw = snap.pods.get(d.pod)
                if raw is not None:
                    msg = f"pipelined to node {d.node}, waiting for resources being released"
                    self._queue_event(report, _ref(raw), "Pipelined", msg)
        for action, acted_groups in acted.items():
            self.metrics.podgroups_acted_on.labels(action).inc(len(acted_groups))
        for action, placed_groups in pipelined.items():
            self.metrics.podgroups_scheduled.labels(action).inc(len(placed_groups))
            if action == "preempt":
                self.metrics.preemption_attempts.inc(len(placed_groups))
        if not self.may_write():
            return
        writes: list[Any] = []
        cancels: list[WriteKey] = []
        # Nothing queued (the usual case): nothing to cancel, and no pod to look at in
        # the groups with nothing to say.
        cancel = self._writes.busy()
        for key, group in result.pod_groups.items():
            if key not in batch.gangs:
                w, c = self._group_writes(
                    batch, key, group, rolled=False, started=False, cancel=cancel
                )
                writes.extend(w)
                cancels.extend(c)
        if cancel:  # the pods handed over are pending no more
            cancels.extend(
                ("condition", d.pod) for gang in batch.gangs.values() for d in gang.decisions
            )
        self._writes.put_many(writes, cancels)

    def _group_writes(
        self, batch: _Batch, key: str, g: Any, *, rolled: bool, started: bool, cancel: bool
    ) -> tuple[list[Any], list[WriteKey]]:
        """One group's writes (annotations, status, its pending pods' PodScheduled
        condition, the event that says why it waits), and (``cancel``) the queued writes
        it no longer needs.  ``started``: its binds of this cycle went through."""
        snap, report, now = batch.snap, batch.report, batch.now
        writes: list[Any] = []
        cancels: list[WriteKey] = []
        raw = snap.pod_groups.get(key)
        message = _pending_message(g, rolled)
        if raw is not None:
            current = (raw.get("metadata") or {}).get("annotations") or {}
            wanted: dict[str, str | None] = {}
            for ann, value in g.annotations.items():
                # Only a group whose binds went through really started.
                if ann == LAST_START_ANNOTATION and not started:
                    continue
                if current.get(ann) != value:
                    wanted[ann] = value
            if STALE_ANNOTATION in current and g.scheduled and STALE_ANNOTATION not in wanted:
                if not g.annotations.get(STALE_ANNOTATION):
                    wanted[STALE_ANNOTATION] = None  # the gang recovered: clear the mark
            if wanted:
                write = functools.partial(self._write_annotations, key, report)
                writes.append((("annotations", key), write, wanted, _merge_annotations))
            patch = self._status_patch(g, raw, message, now)
            if patch:
                write = functools.partial(self._write_status, key, report)
                writes.append((("status", key), write, patch, None))
            elif cancel:
                cancels.append(("status", key))
        gang = batch.gangs.get(key)
        if message is None and not cancel:
            members: Iterable[str] = ()  # nothing to write, nothing queued to cancel
        else:
            members = batch.members.get(key, ())
        for pod in members:
            condition = None
            if message is not None:
                res = batch.result.pods.get(pod)
                pending = res is not None and res.status == "Pending"
                outcome = gang.outcomes.get(pod) if gang is not None else None
                placed = outcome is not None and (outcome[0] == "bound")
                if not placed and (pending or outcome is not None):
                    pod_raw = snap.pods.get(pod) or {}
                    # A gated pod's condition is the API server's (SchedulingGated).
                    if not (pod_raw.get("spec") or {}).get("schedulingGates"):
                        condition = _scheduled_condition(pod_raw, message, now)
            if condition is not None:
                write = functools.partial(self._write_condition, pod, report)
                writes.append((("condition", pod), write, condition, None))
            elif cancel:
                cancels.append(("condition", pod))
        if message is not None:
            if raw is not None:
                self._queue_event(report, _ref(raw), "Unschedulable", message, "Warning")
            else:
                # No PodGroup object: tell the pending pods themselves.
                for pod in batch.members.get(key, ()):
                    res = batch.result.pods.get(pod)
                    if res is not None and res.status == "Pending":
                        self._queue_event(
                            report, _ref(snap.pods[pod]), "Unschedulable", message, "Warning"
                        )
        return writes, cancels

    def _queue_event(
        self, report: ApplyReport, involved: dict, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        # Repeats are dropped here, before they take a place in the queue.
        if not self.events.should_send(involved, reason, message):
            return
        key = (
            "event",
            involved.get("kind"),
            involved.get("namespace"),
            involved.get("name"),
            reason,
        )
        self._writes.put(
            key,
            lambda _: report.add_event(self.events.send(involved, reason, message, type_)),
        )

    def _queue_annotations(
        self, group: str, wanted: dict[str, str | None], report: ApplyReport
    ) -> None:
        write = functools.partial(self._write_annotations, group, report)
        self._writes.put(("annotations", group), write, wanted, _merge_annotations)

    def _write_annotations(
        self, group: str, report: ApplyReport, wanted: dict[str, str | None]
    ) -> None:
        ns, _, name = group.partition("/")
        try:
            updated = with_retries(
                lambda: self.client.patch_pod_group(
                    ns, name, {"metadata": {"annotations": wanted}}
                ),
                self.attempts,
                self.backoff,
            )
        except Exception as err:  # noqa: BLE001
            log.warning("patching PodGroup %s annotations failed: %s", group, err)
            return
        with report.lock:
            if group not in report.patched_groups:
                report.patched_groups.append(group)
        if self.cache is not None and isinstance(updated, dict):
            self.cache.observe_write(POD_GROUP.name, updated)

    def _status_patch(self, g: Any, raw: dict, message: str | None, now: datetime) -> dict:
        """The fields of a PodGroup's status to write: the session's, and this node
        pool's Unschedulable condition (written, changed, or dropped once scheduled)."""
        status = raw.get("status") or {}
        patch: dict[str, Any] = {}
        for field_name, value in (g.status or {}).items():
            if status.get(field_name) != value:
                patch[field_name] = value
        conditions = [c for c in status.get("schedulingConditions") or [] if isinstance(c, dict)]
        ours = [
            c
            for c in conditions
            if c.get("type") == UNSCHEDULABLE_CONDITION and c.get("nodePool") == self.nodepool
        ]
        others = [c for c in conditions if c not in ours]
        if message is not None:
            if not ours or ours[0].get("message") != message:
                ids = [
                    int(c.get("transitionID", 0) or 0)
                    for c in conditions
                    if str(c.get("transitionID", "0")).isdigit()
                ]
                cond = {
                    "type": UNSCHEDULABLE_CONDITION,
                    "nodePool": self.nodepool,
                    "status": "True",
                    "reason": "Unschedulable",
                    "message": message,
                    "transitionID": str(max(ids, default=0) + 1),
                    "lastTransitionTime": _rfc3339(now),
                }
                patch["schedulingConditions"] = [*others, cond]
        elif ours and g.scheduled:
            patch["schedulingConditions"] = others  # scheduled now: the condition is stale
        return patch

    def _write_status(self, key: str, report: ApplyReport, patch: dict) -> None:
        ns, _, name = key.partition("/")
        try:
            updated = with_retries(
                lambda: self.client.patch_pod_group_status(ns, name, patch),
                self.attempts,
                self.backoff,
            )
        except Exception as err:  # noqa: BLE001
            log.warning("patching PodGroup %s status failed: %s", key, err)
            return
        with report.lock:
            if key not in report.patched_groups:
                report.patched_groups.append(key)
        if self.cache is not None and isinstance(updated, dict):
            self.cache.observe_write(POD_GROUP.name, updated)

    def _write_condition(self, pod: str, report: ApplyReport, condition: dict) -> None:
        """``PodScheduled=False`` (reason ``Unschedulable``, the group's reason) on a
        pending pod."""
        ns, _, name = pod.partition("/")
        try:
            updated = with_retries(
                lambda: self.client.patch_pod_status(ns, name, {"conditions": [condition]}),
                self.attempts,
                self.backoff,
            )
        except Exception as err:  # noqa: BLE001 - best effort, the next cycle retries
            log.warning("patching the PodScheduled condition of %s failed: %s", pod, err)
            return
        with report.lock:
            report.pod_conditions.append(pod)
            report.pod_conditions.sort()
        if self.cache is not None and isinstance(updated, dict):
            self._observe_pod(ns, name, updated)

    def _observe_pod(self, ns: str, name: str, updated: dict) -> None:
        """Store a pod a write returned, unless the cache counts it bound and the answer
        does not (a cycle handed it over meanwhile, or the watch has not yet brought the
        bind): that would make the next cycle decide on it again."""
        assert self.cache is not None
        with self._assume_lock:
            cached = self.cache.get("Pod", ns, name)
            if (cached or {}).get("spec", {}).get("nodeName") and not (
                updated.get("spec") or {}
            ).get("nodeName"):
                return
            self.cache.observe_write("Pod", updated)


def _pending_message(g: Any, rolled_back: bool) -> str | None:
    """Why a group waits, or None when it does not (or has nothing to wait for)."""
    if rolled_back:
        return "binding failed; the gang was rolled back and is retried next cycle"
    if g.scheduled or not g.reason or g.reason in _QUIET_REASONS:
        return None
    return str(g.reason)


def _scheduled_condition(raw: dict, message: str, now: datetime) -> dict | None:
    """The PodScheduled condition to write on a pending pod, or None when the pod has it
    already (same status, reason and message: no repeated writes)."""
    status = raw.get("status") or {}
    current = next(
        (
            c
            for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type") == "PodScheduled"
        ),
        None,
    )
    if (
        current is not None
        and current.get("status") == "False"
        and current.get("reason") == "Unschedulable"
        and current.get("message") == message
    ):
        return None
    # The transition time moves only when the status does (a new message is no transition).
    since = current.get("lastTransitionTime") if current is not None else None
    if current is None or current.get("status") != "False" or not since:
        since = _rfc3339(now)
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": since,
    }


def _not_evictable(raw: dict | None) -> str | None:
    """Why a pod must not go to the Eviction API, or None when it may.  Only a pod bound
    to a node is evicted: evicting anything else would delete a user's pending pod."""
    if raw is None:
        return "the pod is not in the cache"
    if not (raw.get("spec") or {}).get("nodeName"):
        return "the pod is not bound to a node"
    if (raw.get("metadata") or {}).get("deletionTimestamp"):
        return "the pod is terminating already"
    return None


def _mark_deleting(now: datetime) -> Callable[[dict], bool]:
    def mutate(raw: dict) -> bool:
        meta = raw.setdefault("metadata", {})
        if meta.get("deletionTimestamp"):
            return False
        meta["deletionTimestamp"] = _rfc3339(now)
        return True

    return mutate


def _mark_gpu_group(group: str) -> Callable[[dict], bool]:
    """The device group a shared-GPU pod is handed over with, as the label will say."""

    def mutate(raw: dict) -> bool:
        meta = raw.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), GPU_GROUP_LABEL: group}
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            RECEIVED_RESOURCE_TYPE_ANNOTATION: RECEIVED_TYPE_FRACTION,
        }
        return True

    return mutate


def _unmark_bound(node: str, before: dict | None) -> Callable[[dict], bool]:
    """Undo a hand-off's assumption: no node, and (``before``: the pod as the cycle saw
    it) no device group that was never written."""

    def mutate(raw: dict) -> bool:
        changed = False
        spec = raw.setdefault("spec", {})
        if spec.get("nodeName") == node:
            del spec["nodeName"]
            changed = True
        if before is not None:
            meta = raw.setdefault("metadata", {})
            old = before.get("metadata") or {}
            for field_name, key in (
                ("labels", GPU_GROUP_LABEL),
                ("annotations", RECEIVED_RESOURCE_TYPE_ANNOTATION),
            ):
                values = dict(meta.get(field_name) or {})
                was = (old.get(field_name) or {}).get(key)
                if values.get(key) != was:
                    if was is None:
                        values.pop(key, None)
                    else:
                        values[key] = was
                    meta[field_name] = values
                    changed = True
        return changed

    return mutate


_ASSIGNED = re.compile(r'already assigned to node "([^"]*)"')


def _assigned_node(err: BaseException) -> str | None:
    """The node a 409 Conflict of a bind says the pod is on already, if it says."""
    if status_of(err) != 409:
        return None
    body = str(getattr(err, "body", "") or "")
    try:
        # The Status's message: in the JSON text its quotes are escaped.
        message = str(orjson.loads(body).get("message") or "")
    except (orjson.JSONDecodeError, AttributeError):
        message = body
    match = _ASSIGNED.search(message)
    return match.group(1) if match else None
