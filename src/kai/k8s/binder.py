"""Apply a session's committed decisions to the cluster.

Order: evictions first (they free what pipelined and reclaiming groups wait for), then
binds, then PodGroup annotations and status, the pending pods' ``PodScheduled``
condition, then events.  Binds run in parallel with retries; a shared-GPU pod is first
labelled with its device group (``runai-gpu-group``), which the next snapshot reads
back, and a pod whose label cannot be written is not bound (a failed bind).  When a
gang cannot be completed (a bind fails for good and the group would stay below
minMember), its remaining binds are skipped and the members bound in this cycle are
rolled back: a pod cannot be unbound, so a controller-owned member is deleted (its
controller recreates it pending) and any other member is left and reported.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from kai.engine import (
    IDLE_REASON,
    LAST_START_ANNOTATION,
    NO_PODS_REASON,
    STALE_ANNOTATION,
    SessionResult,
)
from kai.k8s.cache import POD_GROUP_ANNOTATION, CacheSnapshot, ClusterCache
from kai.k8s.client import POD_GROUP, KubeClient, status_of
from kai.k8s.metrics import SchedulerMetrics
from kai.snapshot.builder import GPU_GROUP_LABEL

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


def _controller_owned(raw: dict) -> bool:
    refs = (raw.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") for r in refs)


def with_retries(fn: Callable[[], Any], attempts: int, backoff: float) -> Any:
    """Retry connection errors, 429 and 5xx with exponential backoff; others fail at once."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:
            code = status_of(err)
            if (code != 0 and code != 429 and code < 500) or attempt == attempts - 1:
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

    def summary(self) -> str:
        return (
            f"bound {len(self.bound)}, bind failed {len(self.bind_failed)}, "
            f"rolled back {len(self.rolled_back)} in {len(self.rollback_groups)} group(s), "
            f"evicted {len(self.evicted)}, evict failed {len(self.evict_failed)}, "
            f"evict refused {len(self.evict_refused)}, "
            f"pipelined {len(self.pipelined)}, podgroups patched {len(self.patched_groups)}, "
            f"pod conditions {len(self.pod_conditions)}"
        )


class _Gang:
    def __init__(self, key: str, min_member: int, active_before: int) -> None:
        self.key = key
        self.min_member = min_member
        self.active_before = active_before  # members already running or binding
        self.failed = threading.Event()
        self.lock = threading.Lock()
        self.bound: list[str] = []


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
        attempts: int = 3,
        backoff: float = 0.2,
        max_applying: int = 4,
    ) -> None:
        self.client = client
        self.cache = cache
        self.metrics = metrics
        self.events = events
        self.nodepool = nodepool
        self.attempts = attempts
        self.backoff = backoff
        self.workers = workers
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-write")
        self._lock = threading.Lock()
        self._appliers: set[threading.Thread] = set()
        self._slots = threading.BoundedSemaphore(max_applying)

    def close(self, timeout: float = 30.0) -> None:
        if not self.wait_idle(timeout):
            log.warning("binds still in flight after %.0fs at shutdown", timeout)
        self.pool.shutdown(wait=True)

    # ------------------------------------------------------------------ entry point
    def apply(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        now: datetime | None = None,
        *,
        wait: bool = True,
    ) -> ApplyReport:
        """Write a session's decisions.  Evictions are sent at once; the binds and what
        follows them (gang rollback, PodGroup status, conditions, events) run in the
        background unless ``wait``: the pods count as bound in the cache from now on, so
        the next cycle neither waits for thousands of binds nor decides on them again."""
        now = now or datetime.now(timezone.utc)
        report = ApplyReport()
        members: dict[str, list[str]] = defaultdict(list)
        for pod, raw in snap.pods.items():
            members[group_of(pod, raw)].append(pod)
        self._evict(result, snap, report, now)
        if self.cache is not None:
            for d in result.decisions:
                if d.type == "bind" and d.node:
                    ns, _, name = d.pod.partition("/")
                    self.cache.assume_bound(ns, name, d.node)
        if wait:
            self._finish(result, snap, report, members, now)
            return report
        self._slots.acquire()  # back-pressure: a few cycles' binds at most in flight
        worker = threading.Thread(
            target=self._finish_in_background,
            args=(result, snap, report, members, now),
            name="kai-apply",
            daemon=True,
        )
        with self._lock:
            self._appliers.add(worker)
        worker.start()
        return report

    def _finish_in_background(self, *args: Any) -> None:
        try:
            report = self._finish(*args)
            if report.bound or report.bind_failed or report.evicted or report.pipelined:
                log.info("applied: %s", report.summary())
        except Exception:  # noqa: BLE001 - a failed write never stops the scheduler
            log.exception("applying a cycle's decisions failed")
        finally:
            with self._lock:
                self._appliers.discard(threading.current_thread())
            self._slots.release()

    def _finish(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        report: ApplyReport,
        members: dict[str, list[str]],
        now: datetime,
    ) -> ApplyReport:
        rolled = self._bind(result, snap, report, members)
        for d in result.decisions:
            if d.type == "pipeline":
                report.pipelined.append(d.pod)
                pipelined = snap.pods.get(d.pod)
                if pipelined is not None:
                    msg = f"pipelined to node {d.node}, waiting for resources being released"
                    report.events += self.events.emit(_ref(pipelined), "Pipelined", msg)
        self._count_groups(result, snap, rolled)
        self._patch_groups(result, snap, report, rolled, now)
        self._pod_conditions(result, snap, report, rolled, members, now)
        self._group_events(result, snap, report, rolled, members)
        if self.cache is not None:
            self.metrics.binds_in_flight.set(self.cache.binds_in_flight)
        return report

    def wait_idle(self, timeout: float) -> bool:
        """Wait for the binds in flight (at shutdown); False if some are still running."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                running = list(self._appliers)
            if not running:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            running[0].join(left)

    # ------------------------------------------------------------------ evictions
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

        def one(d: Any) -> tuple[Any, BaseException | None]:
            ns, _, name = d.pod.partition("/")
            try:
                with_retries(lambda: self.client.evict(ns, name), self.attempts, self.backoff)
                return d, None
            except Exception as err:  # noqa: BLE001 - reported per pod
                return d, err

        evicted_groups: set[str] = set()
        for d, err in self.pool.map(one, evicts):
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
                report.events += self.events.emit(_ref(raw), "Evicted", msg, "Normal")
        # The victim's PodGroup remembers when it was last evicted (preemption delay).
        for group in sorted(evicted_groups):
            if group in snap.pod_groups:
                self._patch_annotations(group, {LAST_EVICTION_ANNOTATION: _rfc3339(now)}, report)

    # ------------------------------------------------------------------ binds
    def _bind(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        report: ApplyReport,
        members: dict[str, list[str]],
    ) -> set[str]:
        binds = [d for d in result.decisions if d.type == "bind"]
        if not binds:
            return set()
        by_group: dict[str, list[Any]] = defaultdict(list)
        for d in binds:
            by_group[group_of(d.pod, snap.pods.get(d.pod))].append(d)
        min_members = {f"{g.namespace}/{g.name}": g.min_member for g in snap.objects.pod_groups}
        gangs = {}
        for key in by_group:
            active = sum(
                1
                for p in members.get(key, ())
                if result.pods.get(p) is not None and result.pods[p].status == "Running"
            )
            gangs[key] = _Gang(key, min_members.get(key) or 1, active)

        created = {p.key: p.creation_timestamp for p in snap.objects.pods}
        labelled_pods: list[str] = []
        labelled_lock = threading.Lock()

        def one(d: Any) -> tuple[Any, str, BaseException | None]:
            gang = gangs[group_of(d.pod, snap.pods.get(d.pod))]
            # A gang that already failed skips its remaining binds.
            if gang.failed.is_set() and gang.min_member > 1:
                return d, "skipped", None
            ns, _, name = d.pod.partition("/")
            raw = snap.pods.get(d.pod) or {}
            uid = (raw.get("metadata") or {}).get("uid")
            if d.gpu_groups:
                # The device group first: without it the next cycle would not know which
                # shared GPU the pod is on.  No label, no bind.
                try:
                    labelled = self._label_gpu_group(ns, name, raw, d.gpu_groups[0])
                except Exception as err:  # noqa: BLE001 - reported per pod
                    gang.failed.set()
                    return d, "failed", RuntimeError(f"labelling its GPU group failed: {err}")
                if labelled:
                    with labelled_lock:
                        labelled_pods.append(d.pod)
            if (created_at := created.get(d.pod)) is not None:
                waited = (datetime.now(timezone.utc) - created_at).total_seconds()
                self.metrics.task_scheduling_latency.observe(max(0.0, waited) * 1000.0)
            start = time.perf_counter()
            try:
                with_retries(
                    lambda: self.client.bind(ns, name, d.node, uid), self.attempts, self.backoff
                )
            except Exception as err:  # noqa: BLE001 - reported per pod
                gang.failed.set()
                return d, "failed", err
            finally:
                self.metrics.task_bind_latency.observe((time.perf_counter() - start) * 1000.0)
            with gang.lock:
                gang.bound.append(d.pod)
            return d, "bound", None

        # Each cycle binds on workers of its own: a few binds of a later cycle do not
        # queue behind thousands of an earlier one.
        with ThreadPoolExecutor(
            max_workers=max(1, min(self.workers, len(binds))), thread_name_prefix="kai-bind"
        ) as pool:
            outcomes = list(pool.map(one, binds))
        for d, outcome, err in outcomes:
            if outcome == "bound":
                report.bound.append(d.pod)
                continue
            if self.cache is not None:
                ns, _, name = d.pod.partition("/")
                self.cache.forget_bound(ns, name)
            if outcome == "skipped":
                report.skipped.append(d.pod)
            else:
                report.bind_failed[d.pod] = str(err)
                self.metrics.bind_failures.inc()
                log.warning("binding %s to %s failed: %s", d.pod, d.node, err)
        report.labelled.extend(sorted(labelled_pods))
        return self._rollback(gangs, snap, report)

    def _label_gpu_group(self, ns: str, name: str, raw: dict, group: str) -> bool:
        """Record a shared-GPU pod's device group on the pod (label ``runai-gpu-group``,
        annotation ``received-resource-type: Fraction``); False when it is there already."""
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
        updated = with_retries(
            lambda: self.client.patch_pod(ns, name, patch), self.attempts, self.backoff
        )
        if self.cache is not None and isinstance(updated, dict):
            self.cache.observe_write("Pod", updated)
        return True

    def _rollback(
        self, gangs: dict[str, _Gang], snap: CacheSnapshot, report: ApplyReport
    ) -> set[str]:
        now = datetime.now(timezone.utc)
        rolled: set[str] = set()
        for key, gang in gangs.items():
            if not gang.failed.is_set():
                continue
            if gang.active_before + len(gang.bound) >= gang.min_member:
                continue  # the gang is complete without the failed pod (elastic extra)
            rolled.add(key)
            report.rollback_groups.append(key)
            self.metrics.gang_rollbacks.inc()
            kept = []
            for pod in gang.bound:
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
                    report.rolled_back.append(pod)
                    if self.cache is not None:
                        self.cache.assume("Pod", ns, name, _mark_deleting(now))
                except Exception as err:  # noqa: BLE001
                    if status_of(err) == 404:
                        report.rolled_back.append(pod)
                    else:
                        kept.append(pod)
                        log.warning("rolling back %s failed: %s", pod, err)
            failed = sorted(p for p in report.bind_failed if group_of(p, snap.pods.get(p)) == key)
            msg = (
                f"binding {', '.join(failed)} failed; the gang needs {gang.min_member} pods, "
                f"so its binds of this cycle were rolled back"
            )
            if kept:
                msg += f" ({', '.join(kept)} stay bound: no controller would recreate them)"
            log.warning("pod group %s: %s", key, msg)
            involved = snap.pod_groups.get(key) or snap.pods.get(failed[0] if failed else "")
            if involved:
                report.events += self.events.emit(_ref(involved), "BindFailed", msg, "Warning")
        return rolled

    # ------------------------------------------------------------------ PodGroups
    def _count_groups(self, result: SessionResult, snap: CacheSnapshot, rolled: set[str]) -> None:
        acted: dict[str, set[str]] = defaultdict(set)
        placed: dict[str, set[str]] = defaultdict(set)
        for d in result.decisions:
            g = group_of(d.pod, snap.pods.get(d.pod))
            acted[d.action].add(g)
            if d.type in ("bind", "pipeline") and g not in rolled:
                placed[d.action].add(g)
        for action, groups in acted.items():
            self.metrics.podgroups_acted_on.labels(action).inc(len(groups))
        for action, groups in placed.items():
            self.metrics.podgroups_scheduled.labels(action).inc(len(groups))
            if action == "preempt":
                self.metrics.preemption_attempts.inc(len(groups))

    def _patch_annotations(
        self, group: str, wanted: dict[str, str | None], report: ApplyReport
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
        report.patched_groups.append(group)
        if self.cache is not None and isinstance(updated, dict):
            self.cache.observe_write(POD_GROUP.name, updated)

    def _patch_groups(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        report: ApplyReport,
        rolled: set[str],
        now: datetime,
    ) -> None:
        bound_groups = {group_of(p, snap.pods.get(p)) for p in report.bound}

        def one(item: tuple[str, Any]) -> None:
            key, g = item
            raw = snap.pod_groups.get(key)
            if raw is None:
                return  # a single pod or a missing PodGroup: nothing to patch
            current = (raw.get("metadata") or {}).get("annotations") or {}
            wanted: dict[str, str | None] = {}
            for ann, value in g.annotations.items():
                # Only a group whose binds went through really started.
                if ann == LAST_START_ANNOTATION and (key in rolled or key not in bound_groups):
                    continue
                if current.get(ann) != value:
                    wanted[ann] = value
            if STALE_ANNOTATION in current and g.scheduled and STALE_ANNOTATION not in wanted:
                if not g.annotations.get(STALE_ANNOTATION):
                    wanted[STALE_ANNOTATION] = None  # the gang recovered: clear the mark
            if wanted:
                self._patch_annotations(key, wanted, report)
            self._patch_status(key, g, raw, report, rolled, now)

        # Many pending groups mean many writes: run them on the pool.
        list(self.pool.map(one, result.pod_groups.items()))

    def _patch_status(
        self,
        key: str,
        g: Any,
        raw: dict,
        report: ApplyReport,
        rolled: set[str],
        now: datetime,
    ) -> None:
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
        message = _pending_message(g, key in rolled)
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
        if not patch:
            return
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
        if key not in report.patched_groups:
            report.patched_groups.append(key)
        if self.cache is not None and isinstance(updated, dict):
            self.cache.observe_write(POD_GROUP.name, updated)

    def _pod_conditions(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        report: ApplyReport,
        rolled: set[str],
        members: dict[str, list[str]],
        now: datetime,
    ) -> None:
        """``PodScheduled=False`` (reason ``Unschedulable``, the group's reason) on the
        pending pods of each group that waits, written only when it changed."""
        placed = set(report.bound) | set(report.rolled_back)
        todo: list[tuple[str, dict]] = []
        for key, g in result.pod_groups.items():
            message = _pending_message(g, key in rolled)
            if message is None:
                continue
            for pod in members.get(key, ()):
                res = result.pods.get(pod)
                pending = res is not None and res.status == "Pending"
                failed = pod in report.bind_failed or pod in report.skipped
                if pod in placed or not (pending or failed):
                    continue
                raw = snap.pods.get(pod) or {}
                if (raw.get("spec") or {}).get("schedulingGates"):
                    continue  # the API server says SchedulingGated; not ours to change
                condition = _scheduled_condition(raw, message, now)
                if condition is not None:
                    todo.append((pod, condition))

        def one(item: tuple[str, dict]) -> None:
            pod, condition = item
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
            report.pod_conditions.append(pod)
            if self.cache is not None and isinstance(updated, dict):
                self.cache.observe_write("Pod", updated)

        list(self.pool.map(one, todo))
        report.pod_conditions.sort()

    def _group_events(
        self,
        result: SessionResult,
        snap: CacheSnapshot,
        report: ApplyReport,
        rolled: set[str],
        members: dict[str, list[str]],
    ) -> None:
        todo: list[tuple[dict, str]] = []
        for key, g in result.pod_groups.items():
            message = _pending_message(g, key in rolled)
            if message is None:
                continue
            raw = snap.pod_groups.get(key)
            if raw is not None:
                todo.append((_ref(raw), message))
                continue
            # No PodGroup object: tell the pending pods themselves.
            for pod in members.get(key, ()):
                if result.pods.get(pod) is not None and result.pods[pod].status == "Pending":
                    todo.append((_ref(snap.pods[pod]), message))
        sent = self.pool.map(
            lambda it: self.events.emit(it[0], "Unschedulable", it[1], "Warning"), todo
        )
        report.events += sum(1 for ok in sent if ok)


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
