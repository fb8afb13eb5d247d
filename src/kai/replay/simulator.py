"""A discrete-event cluster simulator whose every scheduling period is a real session.

The cluster (nodes, queues, priority classes, a scheduler configuration) comes from
manifests; jobs come from a trace.  Each period runs one session of kai's engine (the
configured plugins and actions, as ``kai simulate`` runs them) on the cluster's state
at that moment, then plays its decisions out:

* a bound pod starts running; a job runs once its gang (``min_member`` pods) runs, and
  finishes ``duration`` seconds later, which frees its pods' resources;
* an evicted job goes back to pending and keeps its history (submit time, first
  start, evictions); the work it had done is lost, and counted as such;
* a pipelined pod waits: it is pending again in the next session.

The state is kept between periods and changed in place: arrivals add their jobs,
finishes remove theirs, decisions change task statuses.  Nothing is rebuilt from
manifests after the start.  When a session decides nothing, the next session would
decide the same until something happens: the clock then jumps to the period of the
next arrival, finish or timer (a min-runtime protection running out, a fair-share
usage refresh).
"""

from __future__ import annotations

import heapq
import math
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

from kai._dataclasses import dataclass
from kai.actions import get_action
from kai.actions import register_builtins as register_builtin_actions
from kai.api.errors import InputError
from kai.api.model import ClusterState, Job, TaskStatus
from kai.api.objects import (
    ClusterObjects,
    NodeObject,
    PodGroupObject,
    PodObject,
    SchedulerConfigObject,
)
from kai.api.resources import CPU, GPU, MEMORY, PODS
from kai.config import SchedulerConfig
from kai.fairshare import QUEUE_USAGE_KEY, UsageParams, UsageTracker
from kai.framework.session import Decision, Session
from kai.memory import gc_paused
from kai.replay.trace import TraceJob
from kai.snapshot.builder import (
    GPU_FRACTION_ANNOTATION,
    KAI_SCHEDULER_NAME,
    POD_GROUP_ANNOTATION,
    build_state,
)

#: The clock of a replay when none is given: submit time 0 is this instant.
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)

_RUNNING = TaskStatus.RUNNING
_PENDING = TaskStatus.PENDING


@dataclass(slots=True)
class JobRecord:
    """What happened to one trace job."""

    trace: TraceJob
    first_start: float | None = None
    run_start: float | None = None  # start of the current run (None: not running)
    finish: float | None = None
    run_id: int = 0  # bumped on every (re)start: finish events of older runs are void
    evictions: int = 0
    pods: int = 0  # its pods running now
    gpus: float = 0.0  # GPUs its running pods hold now
    since: float = 0.0  # when ``gpus`` last changed
    gpu_seconds: float = 0.0  # allocated, over its whole life
    run_gpu_seconds: float = 0.0  # gpu_seconds when the current run started
    lost_gpu_seconds: float = 0.0  # work thrown away by evictions

    def account(self, now: float) -> None:
        self.gpu_seconds += (now - self.since) * self.gpus
        self.since = now


@dataclass(slots=True)
class Eviction:
    time: float
    job: str
    queue: str
    action: str
    reason: str
    pods: int
    lost_gpu_hours: float


@dataclass
class TimelineRow:
    """The cluster after the session at ``time``, until the next session."""

    time: float
    allocated: dict[str, float]  # queue -> GPUs allocated
    fair_share: dict[str, float]  # queue -> GPU fair share
    pending: dict[str, int]  # queue -> pending jobs
    running: dict[str, int]  # queue -> running jobs
    evictions: int = 0


@dataclass
class ReplayResult:
    """Everything a replay produced so far (complete or not)."""

    period: float
    start: datetime
    total_gpus: float
    queues: list[str]  # leaf queues, tree order
    parents: dict[str, str | None]
    records: dict[str, JobRecord]
    evictions: list[Eviction]
    timeline: list[TimelineRow]
    protections: dict[str, int]  # "reclaim"/"preempt" -> (session, victim job) pairs
    protected_jobs: dict[str, set[str]]  # same, distinct jobs
    sessions: int = 0
    periods: int = 0  # periods covered (sessions + the empty ones jumped over)
    session_seconds: float = 0.0  # wall time inside sessions
    wall_seconds: float = 0.0
    end: float = 0.0  # simulated seconds reached
    complete: bool = False
    stopped: str | None = None  # why the replay stopped early, if it did
    usage_source: str = "none"


class Replay:
    """Replays ``trace`` on ``cluster``; :meth:`run` advances it.

    ``config``: the scheduler configuration (default: the cluster's, else KAI's).
    ``period``: seconds between sessions.  ``until``: stop at this simulated second
    (default: when every job has finished or nothing more can happen).  ``start``: the
    wall-clock instant of submit time 0 (min-runtime and creation times use it).
    ``usage_params``: time-based fair share's usage parameters
    (:class:`kai.fairshare.UsageParams`; default: the configuration's
    ``usageDBConfig.usageParams``, none without it).  In a replay the usage is the
    simulated history itself, not what the configured database holds.
    """

    def __init__(
        self,
        cluster: ClusterObjects,
        trace: Iterable[TraceJob],
        *,
        config: SchedulerConfig | SchedulerConfigObject | None = None,
        period: float = 10.0,
        until: float | None = None,
        start: datetime = EPOCH,
        backend: str | None = None,
        usage_params: UsageParams | None = None,
    ) -> None:
        if not period > 0:
            raise InputError(f"{period!r} must be a positive number of seconds", obj="--period")
        if config is None or isinstance(config, SchedulerConfigObject):
            config = SchedulerConfig.from_object(config or cluster.config)
        self.config = config
        self.period = float(period)
        self.until = until
        self.start = start
        self.backend = backend
        # Kept for rebuilding equivalent manifests (tests) and for arrivals' state.
        self.cluster = cluster
        self.state = build_state(cluster)
        self._template = _ArrivalTemplate(cluster, self.state)
        self._trace: Iterator[TraceJob] = iter(trace)
        self._next_job: TraceJob | None = None
        self._trace_done = False
        queues = self.state.queues
        self.leaf_queues = [q for q in _tree_order(queues) if queues[q].is_leaf]
        self.total_gpus = float(self.state.nodes.allocatable[:, GPU].sum())
        self._priority_classes = {pc.name for pc in cluster.priority_classes}
        self.result = ReplayResult(
            period=self.period,
            start=start,
            total_gpus=self.total_gpus,
            queues=self.leaf_queues,
            parents={name: q.parent for name, q in queues.items()},
            records={},
            evictions=[],
            timeline=[],
            protections={"reclaim": 0, "preempt": 0},
            protected_jobs={"reclaim": set(), "preempt": set()},
        )
        self.records = self.result.records
        self.now = 0.0  # the next session's time, in seconds from the start
        self._finishes: list[tuple[float, int, str, int]] = []  # (time, seq, job, run_id)
        self._timers: list[float] = []
        self._seq = 0
        # Jobs in the state, by key.  Pods in the cluster files are background load:
        # scheduled like the rest, but not in the per-job figures.
        self._live: dict[str, Job] = dict(self.state.jobs)
        self._pending_jobs: set[str] = set()
        self._min_runtimes = _min_runtimes(config, cluster)
        self._allocated: dict[str, float] = dict.fromkeys(queues, 0.0)  # GPUs
        self._cpu_memory: dict[str, list[float]] = {q: [0.0, 0.0] for q in queues}
        self._running_count: dict[str, int] = dict.fromkeys(queues, 0)
        self._pending_count: dict[str, int] = dict.fromkeys(queues, 0)
        if usage_params is None and config.usage_db is not None:
            usage_params = config.usage_db.params
        self._usage = None
        if usage_params is not None:
            alloc = self.state.nodes.allocatable
            capacity = {
                "gpu": self.total_gpus,
                "cpu": float(alloc[:, CPU].sum()),
                "memory": float(alloc[:, MEMORY].sum()),
            }
            self._usage = _UsageFeed(usage_params, capacity)
        if self._usage is not None:
            self.result.usage_source = "simulated history"
        self._jobs_dirty = False
        # The state's flat task list is read only by plugins that look at every pod on
        # the nodes (load-aware scheduling); sessions of other plugins skip keeping it.
        self._task_list = any(
            option.name == "loadaware" for tier in config.tiers for option in tier
        )
        self._fair_share: dict[str, float] = {}
        self.last_decisions: list[Decision] = []  # the last session's decisions
        # Hooks for tests and progress displays: called after every session.
        self.on_session: Callable[[Replay], None] | None = None

    # ------------------------------------------------------------------ driving
    def run(self, progress: Callable[[float, ReplayResult], None] | None = None) -> ReplayResult:
        """Simulate until the end (or ``until``); Ctrl-C or a trace error stop it
        with everything simulated so far kept in :attr:`result`."""
        wall = time.perf_counter()
        try:
            # Sessions make many short-lived objects and no garbage cycles.
            with gc_paused():
                while self.step():
                    if progress is not None:
                        progress(self.now, self.result)
            self.result.complete = True
        finally:
            # The periods a simulator without jumps would have run, up to the end.
            self.result.periods = int(self.result.end // self.period + 1e-9) + 1
            self.result.wall_seconds += time.perf_counter() - wall
            self._close_accounts()
        return self.result

    def step(self) -> bool:
        """Run the session at :attr:`now` and move the clock; False when done."""
        now = self.now
        if self.until is not None and now > self.until:
            return False
        self._finish_jobs(now)
        self._arrive(now)
        if not self._live:
            arrival = self._next_arrival()
            if arrival is None:
                return False
            # An empty cluster decides nothing: on to the next arrival's period.
            nxt = max(now + self.period, self._period_of(arrival))
            if self._usage is not None:
                self._usage.record(now, nxt, {})
            self.now = nxt
            return True
        self.result.end = max(self.result.end, now)
        decisions = self._session(now)
        self.last_decisions = decisions
        evictions = self._apply(decisions, now)
        self._record_timeline(now, evictions)
        if self.on_session is not None:
            self.on_session(self)
        nxt = now + self.period
        if not decisions:
            event = self._next_event(now)
            if event is None:
                return False  # nothing can ever change: the rest never runs
            nxt = max(nxt, self._period_of(event))
        self.now = nxt
        if self._usage is not None:
            self._usage.record(now, nxt, self._allocated_resources())
        return True

    def _period_of(self, t: float) -> float:
        """The first session time at or after ``t``."""
        k = math.ceil(t / self.period - 1e-9)
        return k * self.period

    def _next_arrival(self) -> float | None:
        job = self._peek()
        return None if job is None else job.submit_time

    def _next_event(self, now: float) -> float | None:
        if self._task_list:
            # Load-aware scheduling reads node metrics that age with the clock: every
            # period may decide differently, so none is jumped over.
            return now + self.period
        candidates = []
        arrival = self._next_arrival()
        if arrival is not None:
            candidates.append(arrival)
        while self._finishes:
            t, _, key, run_id = self._finishes[0]
            record = self.records[key]
            if record.run_id == run_id and record.finish is None:
                candidates.append(t)
                break
            heapq.heappop(self._finishes)
        if self._pending_jobs:
            # Time-dependent decisions matter only to jobs that wait.
            while self._timers and self._timers[0] <= now:
                heapq.heappop(self._timers)
            if self._timers:
                candidates.append(self._timers[0])
            if self._usage is not None:
                candidates.append(self._usage.next_refresh(now))
        return min(candidates) if candidates else None

    # ------------------------------------------------------------------ arrivals
    def _peek(self) -> TraceJob | None:
        if self._next_job is None and not self._trace_done:
            try:
                self._next_job = next(self._trace)
            except StopIteration:
                self._trace_done = True
        return self._next_job

    def _arrive(self, now: float) -> None:
        batch: list[TraceJob] = []
        try:
            while (job := self._peek()) is not None and job.submit_time <= now + 1e-9:
                self._next_job = None
                if job.key in self.records or any(j.key == job.key for j in batch):
                    raise InputError(
                        f"job {job.key} is in the trace twice", obj=_where(job), field="job"
                    )
                self._check(job)
                batch.append(job)
        except InputError:
            self._add_jobs(batch, now)  # the entries read before the bad one still arrive
            raise
        self._add_jobs(batch, now)

    def _add_jobs(self, batch: list[TraceJob], now: float) -> None:
        if not batch:
            return
        state = self._template.build(batch, self.start)
        for job in batch:
            key = job.key
            built = state.jobs[key]
            self.records[key] = JobRecord(job, since=job.submit_time)
            self._live[key] = built
            self._pending_jobs.add(key)
            self._pending_count[job.queue] += 1
        self._jobs_dirty = True

    def _check(self, job: TraceJob) -> None:
        queues = self.state.queues
        if job.queue not in queues:
            raise InputError(
                f"queue {job.queue!r} is not a queue of the cluster", obj=_where(job), field="queue"
            )
        if not queues[job.queue].is_leaf:
            raise InputError(
                f"queue {job.queue!r} is not a leaf queue", obj=_where(job), field="queue"
            )
        if job.priority_class not in self._priority_classes:
            raise InputError(
                f"priority class {job.priority_class!r} is not a PriorityClass of the cluster",
                obj=_where(job),
                field="priority_class",
            )

    def _sync_jobs(self) -> None:
        """Make the state's job dict hold the live jobs in name order (the order a
        state built from manifests has), and its task list their tasks."""
        state = self.state
        jobs = state.jobs
        live = self._live
        # Finished jobs leave; arrivals mostly come in name order and are appended.
        for key in [k for k in jobs if k not in live]:
            del jobs[key]
        last = next(reversed(jobs), "") if jobs else ""
        new = sorted(k for k in live if k not in jobs)
        if new and new[0] < last:
            state.jobs = jobs = {key: live[key] for key in sorted(live)}
        else:
            for key in new:
                jobs[key] = live[key]
        if self._task_list:
            state.tasks = [t for job in jobs.values() for t in job.tasks]
        self._jobs_dirty = False

    # ------------------------------------------------------------------ sessions
    def _session(self, now: float) -> list[Decision]:
        if self._jobs_dirty:
            self._sync_jobs()
        state = self.state
        for job in state.jobs.values():
            if job.fit_errors:
                job.fit_errors = []
        config = self.config
        started = time.perf_counter()
        ssn = Session(state, config, now=self.start + timedelta(seconds=now), backend=self.backend)
        if self._usage is not None:
            self._usage.prepare(ssn, now)
        plugins = config.build_plugins()
        for _, plugin in plugins:
            if plugin.name == "minruntime":
                _count_protections(plugin, self.result)
        ssn.open(plugins)
        register_builtin_actions()
        for name in config.actions:
            ssn.current_action = name
            get_action(name)(ssn)
        ssn.current_action = ""
        self._fair_share = {
            q: (ssn.queue_info("queue_fair_share", q) or {}).get("gpu", 0.0) for q in ssn.queues
        }
        ssn.close()
        decisions = ssn.decisions
        # Plugins and the session point at each other: dropping the session's fields
        # frees them by reference counting (the state stays, it is ours).
        ssn.__dict__.clear()
        self.result.sessions += 1
        self.result.session_seconds += time.perf_counter() - started
        return decisions

    def _apply(self, decisions: list[Decision], now: float) -> int:
        """Play a session's decisions out; returns the evictions it made (jobs)."""
        touched: dict[str, Job] = {}
        evicted: dict[str, Decision] = {}
        evicted_pods: dict[str, int] = {}
        for d in decisions:
            task = d.task
            if task is None or task.job is None:
                continue
            key = task.job.key
            touched[key] = task.job
            if d.type == "evict":
                evicted.setdefault(key, d)
                evicted_pods[key] = evicted_pods.get(key, 0) + 1
        nodes = self.state.nodes
        # Victims moved to another node hold their old place until their pod is gone,
        # which it is by the next period; so are the places undone placements left.
        nodes.release_holds()
        for key, job in touched.items():
            record = self.records.get(key)
            for task in job.tasks:
                status = task.status
                task.virtually_evicted = False
                if status is TaskStatus.BINDING:
                    task.status = _RUNNING
                elif status is TaskStatus.PIPELINED or status is TaskStatus.RELEASING:
                    # A pipelined pod waits for the next session; an evicted pod is gone
                    # by then (its replacement is pending).
                    nodes.remove_task(task)
                    task.status = _PENDING
                    task.node = -1
                    task.gpu_group = None
            if job.new_start_timestamp is not None:
                job.last_start_timestamp = job.new_start_timestamp
                job.new_start_timestamp = None
            if record is None:
                continue  # background load
            if key in evicted and record.run_start is not None:
                self._record_eviction(record, evicted[key], evicted_pods[key], now)
            running = sum(1 for t in job.tasks if t.status is _RUNNING)
            if 0 < running < job.min_member:
                # A broken gang cannot run: its other pods stop too and wait again.
                for task in job.tasks:
                    if task.status is _RUNNING:
                        nodes.remove_task(task)
                        task.status = _PENDING
                        task.node = -1
                        task.gpu_group = None
                running = 0
            self._set_running(record, job, running, now)
        return len(evicted)

    def _record_eviction(self, record: JobRecord, d: Decision, pods: int, now: float) -> None:
        lost = self._stop(record, now)
        record.evictions += 1
        self.result.evictions.append(
            Eviction(
                now,
                record.trace.key,
                record.trace.queue,
                d.action,
                d.reason or "",
                pods,
                lost / 3600,
            )
        )

    def _stop(self, record: JobRecord, now: float) -> float:
        """The job's run ends before its time: its work is lost; returns GPU-seconds."""
        record.account(now)
        lost = record.gpu_seconds - record.run_gpu_seconds
        record.lost_gpu_seconds += lost
        record.run_start = None
        record.run_id += 1  # its finish event is void
        queue = record.trace.queue
        self._running_count[queue] -= 1
        self._pending_jobs.add(record.trace.key)
        self._pending_count[queue] += 1
        return lost

    def _set_running(self, record: JobRecord, job: Job, running: int, now: float) -> None:
        trace = record.trace
        queue = trace.queue
        if running != record.pods:
            record.account(now)
            gpus = running * trace.gpus_per_pod
            self._allocated[queue] += gpus - record.gpus
            self._charge_cpu_memory(trace, running - record.pods)
            record.gpus = gpus
            record.pods = running
        key = trace.key
        if running >= job.min_member and running > 0:
            if record.run_start is None:
                record.run_start = now
                record.run_gpu_seconds = record.gpu_seconds
                if record.first_start is None:
                    record.first_start = now
                record.run_id += 1
                self._seq += 1
                heapq.heappush(
                    self._finishes, (now + trace.duration, self._seq, key, record.run_id)
                )
                for seconds in self._min_runtimes:
                    heapq.heappush(self._timers, now + seconds)
                self._running_count[queue] += 1
                self._pending_jobs.discard(key)
                self._pending_count[queue] -= 1
        elif record.run_start is not None:
            self._stop(record, now)  # stopped without an eviction of its own

    def _finish_jobs(self, now: float) -> None:
        nodes = self.state.nodes
        while self._finishes and self._finishes[0][0] <= now + 1e-9:
            t, _, key, run_id = heapq.heappop(self._finishes)
            record = self.records[key]
            if record.run_id != run_id or record.finish is not None:
                continue  # a run that was evicted
            record.account(t)
            record.finish = t
            self.result.end = max(self.result.end, t)
            queue = record.trace.queue
            self._allocated[queue] -= record.gpus
            self._charge_cpu_memory(record.trace, -record.pods)
            record.gpus = 0.0
            record.pods = 0
            self._running_count[queue] -= 1
            job = self._live.pop(key)
            for task in job.tasks:
                if task.node >= 0:
                    nodes.remove_task(task)
                task.status = TaskStatus.SUCCEEDED
                task.node = -1
            job.tasks.clear()  # breaks the task <-> job cycles
            self._jobs_dirty = True

    def _record_timeline(self, now: float, evictions: int) -> None:
        fair = self._fair_share
        self.result.timeline.append(
            TimelineRow(
                now,
                {q: round(self._allocated[q], 6) for q in self.leaf_queues},
                {q: fair.get(q, 0.0) for q in self.leaf_queues},
                {q: self._pending_count[q] for q in self.leaf_queues},
                {q: self._running_count[q] for q in self.leaf_queues},
                evictions,
            )
        )

    def _charge_cpu_memory(self, trace: TraceJob, pods: int) -> None:
        held = self._cpu_memory[trace.queue]
        held[0] += pods * trace.cpu_per_pod
        held[1] += pods * trace.memory_per_pod

    def _allocated_resources(self) -> dict[str, dict[str, float]]:
        """Per queue, what its running pods hold (GPUs, millicores, bytes)."""
        out = {}
        for q, gpus in self._allocated.items():
            cpu, memory = self._cpu_memory[q]
            if gpus > 0 or cpu > 0 or memory > 0:
                out[q] = {"gpu": gpus, "cpu": cpu, "memory": memory}
        return out

    def _close_accounts(self) -> None:
        """Allocation counted up to the last simulated instant (running jobs too)."""
        end = self.result.end
        for record in self.records.values():
            if record.finish is None and record.gpus > 0 and record.since < end:
                record.account(end)


# ---------------------------------------------------------------------- arrivals
class _ArrivalTemplate:
    """Builds the jobs of arriving trace entries as the snapshot builder would.

    The arriving jobs' pod groups and pods go through :func:`build_state` with the
    cluster's queues and priority classes and one empty node that declares every
    resource the cluster's nodes declare, so that resource vectors have the cluster
    state's layout.  Only the new jobs are built; the cluster's nodes are not.
    """

    def __init__(self, cluster: ClusterObjects, state: ClusterState) -> None:
        declared: dict[str, float] = {}
        for node in cluster.nodes:
            declared.update(dict.fromkeys(node.allocatable, 0.0))
        self.objects = ClusterObjects(
            nodes=[NodeObject("\0replay-layout", allocatable=declared)],
            queues=cluster.queues,
            priority_classes=cluster.priority_classes,
        )
        self.names = state.resources.names
        self.state = state
        self._requests: dict[tuple[float, float, float], dict[str, float]] = {}

    def build(self, jobs: list[TraceJob], start: datetime) -> ClusterState:
        pods: list[PodObject] = []
        groups: list[PodGroupObject] = []
        for job in jobs:
            created = start + timedelta(seconds=job.submit_time)
            groups.append(
                PodGroupObject(
                    job.job,
                    job.namespace,
                    uid=job.key,
                    creation_timestamp=created,
                    min_member=job.min_member,
                    queue=job.queue,
                    priority_class_name=job.priority_class,
                    preemptibility=job.preemptibility,
                )
            )
            requests = self._request(job)
            annotations = self._annotation(job)
            for i in range(job.pods):
                name = f"{job.job}-{i}"
                pods.append(
                    PodObject(
                        name,
                        job.namespace,
                        uid=f"{job.namespace}/{name}",
                        annotations=annotations,
                        creation_timestamp=created,
                        scheduler_name=KAI_SCHEDULER_NAME,
                        priority_class_name=job.priority_class,
                        requests=requests,
                    )
                )
        objects = self.objects
        built = build_state(
            ClusterObjects(
                nodes=objects.nodes,
                pods=pods,
                pod_groups=groups,
                queues=objects.queues,
                priority_classes=objects.priority_classes,
            )
        )
        if built.resources.names != self.names:
            # The cluster's pods asked for resources no node declares: re-lay vectors.
            for task in built.tasks:
                vec = self.state.resources.vector(built.resources.to_dict(task.request))
                vec[PODS] = 1.0
                vec.flags.writeable = False
                task.request = vec
        return built

    def _request(self, job: TraceJob) -> dict[str, float]:
        key = (job.gpus_per_pod, job.cpu_per_pod, job.memory_per_pod)
        made = self._requests.get(key)
        if made is None:
            made = {"cpu": job.cpu_per_pod, "memory": job.memory_per_pod}
            if job.gpus_per_pod >= 1:
                made["nvidia.com/gpu"] = job.gpus_per_pod
            made = self._requests[key] = made
        return made

    @staticmethod
    def _annotation(job: TraceJob) -> Any:
        values = {POD_GROUP_ANNOTATION: job.job}
        if 0 < job.gpus_per_pod < 1:
            values[GPU_FRACTION_ANNOTATION] = repr(job.gpus_per_pod)
        return MappingProxyType(values)


# ---------------------------------------------------------------------- helpers
def _where(job: TraceJob) -> str:
    return f"trace job {job.key}" + (f" (line {job.line})" if job.line else "")


def _tree_order(queues: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def walk(name: str) -> None:
        out.append(name)
        for child in queues[name].children:
            walk(child)

    for name in sorted(n for n, q in queues.items() if q.parent not in queues):
        walk(name)
    return out


def _min_runtimes(config: SchedulerConfig, cluster: ClusterObjects) -> list[float]:
    """Every min-runtime configured anywhere (seconds > 0): when one may run out."""
    values = {
        float(getattr(config, "reclaim_min_runtime", 0.0) or 0.0),
        float(getattr(config, "preempt_min_runtime", 0.0) or 0.0),
    }
    for q in cluster.queues:
        values.add(float(q.reclaim_min_runtime or 0.0))
        values.add(float(q.preempt_min_runtime or 0.0))
    args = config.plugin_arguments("minruntime") or {}
    for name in ("defaultReclaimMinRuntime", "defaultPreemptMinRuntime"):
        if name in args:
            from kai.api.quantity import parse_duration

            try:
                values.add(parse_duration(args[name]))
            except ValueError:
                pass  # the plugin reports it when the session opens
    return sorted(v for v in values if v > 0)


def _count_protections(plugin: Any, result: ReplayResult) -> None:
    """Count the victims the min-runtime plugin protects (its filters say no): asked of
    one job, or through a filter made for one leaf queue (``*_victim_filter_in``)."""
    for kind in ("reclaim", "preempt"):
        seen: set[str] = set()

        def note(victim: Job, _kind: str = kind, _seen: set[str] = seen) -> None:
            key = victim.key
            if key not in _seen:  # once per session and victim
                _seen.add(key)
                result.protections[_kind] += 1
                result.protected_jobs[_kind].add(key)

        # Weakly: the plugin keeps the wrappers, which a strong reference back would make
        # a cycle that outlives the session until the garbage collector runs.
        name = f"{kind}_victim_filter"
        inner = weakref.WeakMethod(getattr(plugin, name))

        def counted(actor: Job, victim: Job, _inner=inner, _note=note) -> bool:
            allowed = _inner()(actor, victim)
            if not allowed:
                _note(victim)
            return allowed

        setattr(plugin, name, counted)
        per_leaf = getattr(plugin, f"{name}_in", None)
        if per_leaf is None:
            continue
        inner_in = weakref.WeakMethod(per_leaf)

        def counted_in(
            actor: Job, queue: str, _inner=inner_in, _note=note
        ) -> Callable[[Job], bool]:
            accepts = _inner()(actor, queue)

            def checked(victim: Job) -> bool:
                allowed = accepts(victim)
                if not allowed:
                    _note(victim)
                return allowed

            return checked

        setattr(plugin, f"{name}_in", counted_in)


class _UsageFeed:
    """The simulated allocation history, fed to time-based fair share.

    Every period's allocation per queue is recorded; before each session the decayed,
    normalised usage is computed from it and handed to the proportion plugin the way
    :func:`kai.run_session` hands a usage table over.
    """

    def __init__(self, params: UsageParams, capacity: dict[str, float]) -> None:
        self.tracker = UsageTracker(params)
        self.capacity = capacity
        # A live scheduler refreshes its usage this often: the sessions in between see
        # the same usage, so a replay wakes up at this rate while jobs wait.
        self.refresh = params.fetch_interval
        self._table: dict[str, dict[str, float]] = {}
        self._fetched: float | None = None

    def next_refresh(self, now: float) -> float:
        return now if self._fetched is None else max(now, self._fetched + self.refresh)

    def record(self, start: float, end: float, allocated: dict[str, dict[str, float]]) -> None:
        self.tracker.record(start, end, allocated, self.capacity)

    def prepare(self, ssn: Session, now: float) -> None:
        if self._fetched is None or now - self._fetched >= self.refresh - 1e-9:
            self._table = self.tracker.usage(now)
            self._fetched = now
        if self._table:
            ssn.cache[QUEUE_USAGE_KEY] = self._table
