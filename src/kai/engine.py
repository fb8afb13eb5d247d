"""The embeddable engine: build a snapshot, run one session, read the decisions.

This is what ``import kai`` exposes; ``kai simulate`` is a thin layer over it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from kai import _fast
from kai._dataclasses import dataclass
from kai.actions import get_action
from kai.actions import register_builtins as register_builtin_actions
from kai.api.errors import InputError
from kai.api.model import (
    ACTIVE_ALLOCATED,
    ALIVE,
    ClusterState,
    Job,
    NodeStatics,
    Task,
    TaskStatus,
)
from kai.api.objects import ClusterObjects, SchedulerConfigObject
from kai.api.preemptibility import (
    NON_PREEMPTIBLE,
    PREEMPTIBLE,
    SEMI_PREEMPTIBLE,
    published_status,
)
from kai.config import SchedulerConfig, check_action_names
from kai.fairshare import QUEUE_USAGE_KEY, UsageTable, check_usage_table
from kai.framework.session import Decision, Session, plain_copy
from kai.memory import gc_paused
from kai.snapshot.builder import KAI_SCHEDULER_NAME, PodGrouping, build_state, group_pods
from kai.snapshot.partition import partition

LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
STALE_ANNOTATION = "kai.scheduler/stale-podgroup-timestamp"


class Snapshot:
    """An immutable set of cluster objects; every session builds fresh state from it.

    Its sessions schedule the pods that name ``scheduler_name`` (the others hold their
    nodes' resources and are not touched).
    """

    def __init__(
        self, objects: ClusterObjects, *, scheduler_name: str = KAI_SCHEDULER_NAME
    ) -> None:
        self.objects = objects
        self.scheduler_name = scheduler_name
        # Parsed scheduler configurations by the actions asked for (None: the
        # configured ones): the snapshot's configuration object never changes.
        self._configs: dict[tuple[str, ...] | None, SchedulerConfig] = {}
        self._pools: dict[str, ClusterObjects] | None = None
        self._shards: dict[str, Snapshot] = {}  # by the name of their pool (pools())
        # What the last state derived from the node objects alone, for the next.
        self._node_statics: NodeStatics | None = None
        self._grouping: PodGrouping | None = None  # which job each pod belongs to
        self._earlier_pools: dict[str, NodeStatics | None] = {}  # see reuse_node_statics

    def scheduler_config(self, actions: Sequence[str] | None = None) -> SchedulerConfig:
        """The snapshot's scheduler configuration (KAI's defaults where it has none)."""
        key = None if actions is None else tuple(actions)
        config = self._configs.get(key)
        if config is None:
            config = self._configs[key] = SchedulerConfig.from_object(self.config, actions=actions)
        return config

    def pools(self) -> dict[str, ClusterObjects]:
        """The snapshot's objects per node pool (:func:`kai.snapshot.partition.partition`),
        split on the first session."""
        if self._pools is None:
            self._pools = partition(self.objects)
        return self._pools

    def shard(self, objects: ClusterObjects) -> Snapshot:
        """A snapshot of some of these objects (a node pool's), for the same scheduler:
        the same one each time for a pool of :meth:`pools`, so that its sessions share
        what they derive from its nodes."""
        name = next((n for n, pool in (self._pools or {}).items() if pool is objects), None)
        if name is None:
            return Snapshot(objects, scheduler_name=self.scheduler_name)
        shard = self._shards.get(name)
        if shard is None:
            shard = self._shards[name] = Snapshot(objects, scheduler_name=self.scheduler_name)
            shard._node_statics = self._earlier_pools.get(name)
        return shard

    def reuse_node_statics(self, earlier: Snapshot | None) -> None:
        """Start from what ``earlier``'s sessions derived from their nodes, its pools'
        included (a live scheduler's last cycle): kept where this snapshot's nodes are
        the same objects, as a cluster cache hands them out while no node changes."""
        if earlier is None:
            return
        if self._node_statics is None:
            self._node_statics = earlier._node_statics
        # The statics alone: a chain of cycles holds no earlier snapshot.
        self._earlier_pools = {name: shard._node_statics for name, shard in earlier._shards.items()}

    @classmethod
    def from_files(cls, paths: Sequence[str]) -> Snapshot:
        from kai.snapshot.loader import load_files

        return cls(load_files(list(paths)))

    @classmethod
    def from_yaml(cls, text: str, name: str = "<string>") -> Snapshot:
        from kai.snapshot.loader import load_text

        return cls(load_text(text, name))

    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]]) -> Snapshot:
        """From Kubernetes objects as Python dicts (what yaml/json loading gives)."""
        from kai.snapshot.loader import load_objects

        return cls(load_objects(objects))

    @property
    def config(self) -> SchedulerConfigObject | None:
        return self.objects.config

    def state(self) -> ClusterState:
        """A fresh state for one session."""
        if self._grouping is None:
            self._grouping = group_pods(self.objects, self.scheduler_name)
        state = build_state(
            self.objects,
            scheduler_name=self.scheduler_name,
            node_statics=self._node_statics,
            grouping=self._grouping,
        )
        self._node_statics = state.nodes.statics
        return state


# The decisions of a session's result: the session's own decision records, completed
# (pod key, pod-group annotations) and detached from the session when it is collected.
DecisionRecord = Decision


@dataclass(slots=True)
class PodResult:
    """Where a session left a pod: its status and node."""

    status: str
    node: str | None


class PodResults(Mapping[str, PodResult]):
    """Every pod's :class:`PodResult` by key (namespace/name), in key order.

    Held as three columns (keys, statuses, nodes): a session of 100,000 pods is read
    mostly whole (``kai simulate``'s document, which reads the columns) or for a few
    pods (``kai run``), so a :class:`PodResult` is made only when one is read, and the
    index of the keys at the first lookup.
    """

    __slots__ = ("_index", "keys_in_order", "nodes", "statuses")

    def __init__(self, keys: list[str], statuses: list[str], nodes: list[str | None]) -> None:
        self.keys_in_order = keys
        self.statuses = statuses
        self.nodes = nodes
        self._index: dict[str, int] | None = None

    def _position(self, key: str) -> int | None:
        index = self._index
        if index is None:
            index = self._index = {k: i for i, k in enumerate(self.keys_in_order)}
        return index.get(key)

    def __getitem__(self, key: str) -> PodResult:
        at = self._position(key)
        if at is None:
            raise KeyError(key)
        return PodResult(self.statuses[at], self.nodes[at])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._position(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_in_order)

    def __len__(self) -> int:
        return len(self.keys_in_order)

    def items(self) -> ItemsView[str, PodResult]:
        return _PodItems(self)

    def values(self) -> ValuesView[PodResult]:
        return _PodValues(self)

    def __repr__(self) -> str:
        return f"PodResults({dict(self.items())!r})"


class _PodItems(ItemsView[str, PodResult]):
    _mapping: PodResults

    def __iter__(self) -> Iterator[tuple[str, PodResult]]:
        pods = self._mapping
        for key, status, node in zip(pods.keys_in_order, pods.statuses, pods.nodes):
            yield key, PodResult(status, node)


class _PodValues(ValuesView[PodResult]):
    _mapping: PodResults

    def __iter__(self) -> Iterator[PodResult]:
        pods = self._mapping
        for status, node in zip(pods.statuses, pods.nodes):
            yield PodResult(status, node)


@dataclass(slots=True)
class PodGroupResult:
    """What a session decided for a pod group, and why."""

    name: str  # namespace/name
    queue: str | None
    preemptible: bool
    preemptibility: str
    scheduled: bool
    reason: str | None
    explain: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Read-only: groups with equal annotations (or statuses) share one mapping.
    annotations: Mapping[str, str] = field(default_factory=dict)
    # What the PodGroup controller would write into the PodGroup's status.
    status: Mapping[str, Any] = field(default_factory=dict)
    # For people reading the result (not in the JSON): the pods beyond minMember and how
    # many of them still wait, for a group whose gang runs; the evictions of its pods
    # this session.
    extra_pods: int = 0
    extra_pods_waiting: int = 0
    evictions: tuple[DecisionRecord, ...] = ()


@dataclass
class QueueResult:
    """A queue's fair share, allocation and request after a session, per resource."""

    fair_share: dict[str, float]
    allocated: dict[str, float]
    requested: dict[str, float]
    parent: str | None = None  # not in the JSON: the tree, for people reading the result


@dataclass
class SessionResult:
    """Everything a session decided: decisions, and the state of pods, pod groups and queues."""

    decisions: list[DecisionRecord]
    pods: Mapping[str, PodResult]  # a PodResults from a session
    pod_groups: dict[str, PodGroupResult]
    queues: dict[str, QueueResult]
    action_seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self, *, explain: bool = False) -> dict[str, Any]:
        """The result as JSON values (what ``kai simulate`` prints).

        Maps the result shares between pod groups or decisions (equal annotations,
        equal statuses) are one dict in the document too: copy one before changing it.
        """
        compiled = _fast.module("collect")
        if compiled is not None:
            return compiled.result_document(self, explain)
        copies: dict[int, dict[str, Any]] = {}
        groups = {}
        for key, g in self.pod_groups.items():
            entry: dict[str, Any] = {
                "queue": g.queue,
                "preemptible": g.preemptible,
                "preemptibility": g.preemptibility,
                "scheduled": g.scheduled,
                "reason": g.reason,
            }
            if g.annotations:
                entry["annotations"] = plain_copy(g.annotations, copies)
            if g.status:
                entry["status"] = plain_copy(g.status, copies)
            if g.warnings:
                entry["warnings"] = g.warnings
            if explain:
                entry["explain"] = g.explain
            groups[key] = entry
        return {
            "decisions": [d.to_json(copies) for d in self.decisions],
            "pods": {k: {"status": p.status, "node": p.node} for k, p in self.pods.items()},
            "podGroups": groups,
            "queues": {
                name: {
                    "fairShare": q.fair_share,
                    "allocated": q.allocated,
                    "requested": q.requested,
                }
                for name, q in self.queues.items()
            },
        }


def parse_now(value: str | datetime | None) -> datetime:
    if value is None:
        return datetime.now(timezone.utc)
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    from kai.api.quantity import parse_time

    return parse_time(value)


def run_session(
    snapshot: Snapshot,
    *,
    config: SchedulerConfig | SchedulerConfigObject | None = None,
    actions: Sequence[str] | None = None,
    now: str | datetime | None = None,
    backend: str | None = None,
    node_pool: str | None = None,
    queue_usage: Mapping[str, Mapping[str, float]] | None = None,
) -> SessionResult:
    """Run one scheduling session on a snapshot and return what it decided.

    A snapshot whose nodes, queues or pod groups carry the node-pool label is
    scheduled as KAI-Scheduler does, by one scheduler per pool: one session per pool,
    results merged.  ``node_pool`` runs the session of that pool alone ("" is the
    pool of the objects without the label).

    ``queue_usage`` is the queues' historical usage for time-based fair share: queue ->
    {"gpu"|"cpu"|"memory": usage normalised to the cluster's capacity over the usage
    window} (see :mod:`kai.fairshare`).  It lowers the over-quota share of queues that
    used more, by the proportion plugin's ``kValue``; without it every usage is 0.
    """
    usage = None if queue_usage is None else check_usage_table(queue_usage)
    if config is None:
        config = snapshot.scheduler_config(actions)
    elif not isinstance(config, SchedulerConfig):
        config = SchedulerConfig.from_object(config, actions=actions)
    elif actions is not None:
        check_action_names(actions)
        config = dataclasses.replace(config, actions=list(actions))
    clock = parse_now(now)
    pools = snapshot.pools()
    if node_pool is not None:
        if node_pool not in pools:
            raise InputError(
                f"no node pool {node_pool!r} in the snapshot (pools: "
                f"{', '.join(repr(p) for p in pools)})",
                obj="--node-pool",
            )
        return _run_one(snapshot.shard(pools[node_pool]), config, clock, backend, usage)
    shards = [p for p in pools.values() if p.nodes or p.pods or p.pod_groups or p.queues]
    if len(shards) <= 1:
        return _run_one(snapshot, config, clock, backend, usage)
    return _merge(
        [(_run_one(snapshot.shard(objs), config, clock, backend, usage), objs) for objs in shards]
    )


def _merge(results: list[tuple[SessionResult, ClusterObjects]]) -> SessionResult:
    """One result of the pools' sessions (each with its objects): a pod is reported by
    its own pool, not by the one where it holds a node's capacity."""
    merged = SessionResult([], {}, {}, {})
    pods: dict[str, PodResult] = {}
    for result, objects in results:
        merged.decisions.extend(result.decisions)
        if objects.occupants:
            elsewhere = {pod.key for pod in objects.occupants}
            pods.update(item for item in result.pods.items() if item[0] not in elsewhere)
        else:
            pods.update(result.pods.items())
        merged.pod_groups.update(result.pod_groups)
        merged.queues.update(result.queues)
        merged.warnings.extend(result.warnings)
        for action, seconds in result.action_seconds.items():
            merged.action_seconds[action] = merged.action_seconds.get(action, 0.0) + seconds
    keys = sorted(pods)
    merged.pods = PodResults(keys, [pods[k].status for k in keys], [pods[k].node for k in keys])
    merged.pod_groups = dict(sorted(merged.pod_groups.items()))
    merged.queues = dict(sorted(merged.queues.items()))
    return merged


def _run_one(
    snapshot: Snapshot,
    config: SchedulerConfig,
    now: datetime,
    backend: str | None,
    queue_usage: UsageTable | None = None,
) -> SessionResult:
    # A session allocates many small, long-lived objects (tasks, jobs, decisions) and
    # frees them together: the cyclic collector's passes over them cost a third of a
    # large session and find nothing, so it is paused for the session's duration, and
    # the result it returns is not walked by a young pass when the pause ends.
    with gc_paused(promote=True):
        return _session(snapshot, config, now, backend, queue_usage)


def _session(
    snapshot: Snapshot,
    config: SchedulerConfig,
    now: datetime,
    backend: str | None,
    queue_usage: UsageTable | None = None,
) -> SessionResult:
    state = snapshot.state()
    ssn = Session(state, config, now=now, backend=backend)
    if queue_usage:
        ssn.cache[QUEUE_USAGE_KEY] = queue_usage  # read by proportion when it opens
    ssn.open(config.build_plugins())
    register_builtin_actions()
    timings: dict[str, float] = {}
    for name in config.actions:
        ssn.current_action = name
        start = time.perf_counter()
        get_action(name)(ssn)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
    ssn.current_action = ""
    ssn.close()
    result = collect_result(ssn, timings)
    ssn.release()
    return result


# ------------------------------------------------------------------- results
_OUTPUT_STATUS = {
    TaskStatus.PENDING: "Pending",
    TaskStatus.GATED: "Pending",
    TaskStatus.ALLOCATED: "Pending",  # never committed
    TaskStatus.BINDING: "Binding",
    TaskStatus.PIPELINED: "Pipelined",
    TaskStatus.RELEASING: "Releasing",
    TaskStatus.BOUND: "Running",
    TaskStatus.RUNNING: "Running",
    TaskStatus.SUCCEEDED: "Succeeded",
    TaskStatus.FAILED: "Failed",
    TaskStatus.UNKNOWN: "Unknown",
}

_SCHEDULED = frozenset({TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING})
# Reasons of groups with nothing for this scheduler to do: no pods yet, or only pods
# that name another scheduler (which owns the group, its status and its events).
NO_PODS_REASON = "PodGroup has no pods in the snapshot"
IDLE_REASON = "no pods to schedule"


def _format_time(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _job_result(
    key: str,
    job: Job,
    annotations: _Annotations,
    evictions: tuple[DecisionRecord, ...] = (),
) -> PodGroupResult:
    tasks = job.tasks
    fit_errors = job.fit_errors
    if len(tasks) == 1:
        # One pod (most jobs of a large cluster): test its status once.
        status = tasks[0].status
        scheduled = status in _SCHEDULED and job.min_member <= 1
        pipelined = status is TaskStatus.PIPELINED
        idle = status not in ACTIVE_ALLOCATED and status is not TaskStatus.PENDING
    else:
        # The gang runs (or binds now); elastic pods beyond it may still wait.
        scheduled = bool(tasks) and job.count(_SCHEDULED) >= max(job.min_member, 1)
        pipelined = idle = False
        if not scheduled and tasks:
            pipelined = any(t.status is TaskStatus.PIPELINED for t in tasks)
            idle = job.count(ACTIVE_ALLOCATED) == 0 and not job.has_pending()
    if not tasks:
        reason = NO_PODS_REASON
    elif job.invalid_reason:
        reason = job.invalid_reason
    elif scheduled:
        reason = None
    elif pipelined:
        reason = "pipelined: waiting for resources that are being released"
    elif fit_errors:
        reason = fit_errors[0]  # the first action to try it (allocate) says most
    elif idle:
        reason = IDLE_REASON
    else:
        reason = "not scheduled in this session"
    extra = waiting = 0
    if scheduled and len(tasks) > job.min_member:
        # An elastic group: its gang runs, the pods beyond minMember may still wait.
        waiting = sum(1 for t in tasks if t.status is TaskStatus.PENDING)
        if waiting:
            extra = max(job.count(ALIVE) - job.min_member, waiting)
    preemptibility = job.preemptibility
    # The job's lists are handed over: the session is released after collection.
    return PodGroupResult(
        key,
        job.queue,
        job.preemptible,
        preemptibility,
        scheduled,
        reason,
        fit_errors,
        job.warnings,
        annotations(job.new_start_timestamp, job.stale_since_set),
        published_status(job) if preemptibility == SEMI_PREEMPTIBLE else _STATUS_OF[preemptibility],
        extra,
        waiting,
        evictions,
    )


class _collect:
    """The per-decision, per-pod and per-group loops of :func:`collect_result`; the
    reference for ``kai._fast.collect``, which gives the same results."""

    @staticmethod
    def finish_decisions(
        decisions: list[Decision], annotations: _Annotations
    ) -> dict[str, list[DecisionRecord]]:
        """Name each decision's pod, give a bind its group's annotations, and drop its
        task (the result does not keep the session's state alive); the evictions by
        victim group."""
        evictions: dict[str, list[DecisionRecord]] = {}
        for d in decisions:
            task = d.task
            if task is None:
                continue  # collected already
            d.pod = f"{task.namespace}/{task.name}"
            if d.type == "evict":
                if (victim := task.job) is not None:
                    evictions.setdefault(victim.key, []).append(d)
            elif d.type == "bind":
                job = task.job
                if job is not None and (last_start := job.new_start_timestamp) is not None:
                    d.pod_group_annotations = annotations(last_start)
            d.task = None
        return evictions

    @staticmethod
    def pod_results(tasks: list[Task], names: list[str]) -> PodResults:
        pending = TaskStatus.PENDING
        output_status = _OUTPUT_STATUS
        rows = sorted(  # keys are unique: the rest of a row is never compared
            (
                f"{t.namespace}/{t.name}",
                output_status[t.status],
                names[t.node]
                if t.node >= 0
                else (None if t.status is pending else t.pod.node_name),
            )
            for t in tasks
        )
        return PodResults([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    @staticmethod
    def group_results(
        jobs: dict[str, Job],
        annotations: _Annotations,
        evictions: dict[str, list[DecisionRecord]],
    ) -> dict[str, PodGroupResult]:
        return {
            key: _job_result(key, jobs[key], annotations, tuple(evictions.get(key, ())))
            for key in sorted(jobs)
        }


# The status published for a group that is not semi-preemptible, shared read-only.
_STATUS_OF = {
    value: MappingProxyType({"preemptibility": value}) for value in (PREEMPTIBLE, NON_PREEMPTIBLE)
}


class _Annotations:
    """The PodGroup annotations of a result, one shared read-only mapping per content.

    A session stamps every job it starts with the same time, so 100,000 groups need
    a handful of distinct mappings, not 100,000 dictionaries.
    """

    def __init__(self) -> None:
        self._made: dict[tuple[datetime | None, datetime | None], Mapping[str, str]] = {}

    def __call__(
        self, last_start: datetime | None, stale_since: datetime | None = None
    ) -> Mapping[str, str]:
        key = (last_start, stale_since)
        made = self._made.get(key)
        if made is None:
            values = {}
            if last_start is not None:
                values[LAST_START_ANNOTATION] = _format_time(last_start)
            if stale_since is not None:
                values[STALE_ANNOTATION] = _format_time(stale_since)
            made = self._made[key] = MappingProxyType(values)
        return made


def collect_result(ssn: Session, timings: dict[str, float] | None = None) -> SessionResult:
    """The decisions and the per-pod, per-group and per-queue report of a session.

    Lists the session built (decisions' GPU groups, jobs' fit errors and warnings) are
    handed to the result rather than copied: collect once, then release the session.
    """
    annotations = _Annotations()
    decisions = ssn.decisions
    compiled = _fast.module("collect")
    collect = _collect if compiled is None else compiled
    evictions = collect.finish_decisions(decisions, annotations)
    pods = collect.pod_results(ssn.state.all_tasks(), ssn.nodes.names)
    groups = collect.group_results(ssn.jobs, annotations, evictions)
    queues = {}
    for name in sorted(ssn.queues):
        fair = ssn.queue_info("queue_fair_share", name) or {}
        queues[name] = QueueResult(
            fair_share=fair,
            allocated=ssn.queue_info("queue_allocated", name) or {},
            requested=ssn.queue_info("queue_requested", name) or {},
            parent=ssn.queues[name].parent,
        )
    return SessionResult(decisions, pods, groups, queues, timings or {}, list(ssn.state.warnings))
