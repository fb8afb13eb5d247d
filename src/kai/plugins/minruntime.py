"""minruntime: a running job is not evicted before it has run for a minimum time.

Two durations protect a job that has started (it has a last start time: the PodGroup
annotation ``kai.scheduler/last-start-timestamp``, or the start of its earliest
running pod):

* ``reclaim-min-runtime`` against reclaim (the evictor is in another queue);
* ``preempt-min-runtime`` against preemption (the evictor is in the same queue).

Both are set at node-pool level and on any queue of the tree (``spec.reclaimMinRuntime``
/ ``spec.preemptMinRuntime``).  0 means no protection; a queue that leaves the field
out inherits.  A job is protected while ``now < start + min-runtime``; a job without a
start time is never protected.

Node-pool level.  The plugin arguments ``defaultReclaimMinRuntime`` and
``defaultPreemptMinRuntime`` hold the node-pool values, as KAI-Scheduler's operator
writes them from the shard's ``minRuntime``.  The top-level ``reclaimMinRuntime`` /
``preemptMinRuntime`` fields of the SchedulerConfiguration are the defaults of those
arguments: an argument that is given wins over the top-level field, and when neither
is given the value is 0.

Resolution.

* Preempt: from the victim's leaf queue upwards, the first queue that sets
  ``preemptMinRuntime``; else the node-pool value.
* Reclaim, ``reclaimResolveMethod: lca`` (the default): take the lowest common
  ancestor of the reclaimer's and the victim's leaf queues, step one level down
  towards the victim, then walk upwards from there to the first queue that sets
  ``reclaimMinRuntime``; else the node-pool value.  Top-level queues hang under an
  implicit root, so two different top-level trees resolve from the victim's top-level
  queue.  A queue's own setting thus only governs reclaims between its children and
  from outside it, never between unrelated parts of the tree.
* Reclaim, ``reclaimResolveMethod: queue``: like preempt, from the victim's leaf queue
  upwards with ``reclaimMinRuntime``.

Resolved durations are cached per (reclaimer queue, victim queue) and per victim queue
for the session.

Enforcement.

* Victim filters: a protected job that is not elastic (``minMember`` not below its
  pod count) is never a candidate.  Elastic jobs always pass the filter.
* Scenario validators: every protected elastic victim must keep at least
  ``minMember`` active pods (active-used minus the pods the scenario evicts); a
  scenario that would take it below is rejected.  Above ``minMember`` it may lose pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta, timezone
from itertools import chain
from typing import TYPE_CHECKING, Any

from kai.api.errors import ConfigError
from kai.api.model import ACTIVE_USED, Job, QueueInfo, Task, TaskStatus, queue_path
from kai.api.quantity import parse_duration
from kai.framework import Plugin, register_plugin

if TYPE_CHECKING:
    from kai.framework.session import Session

RESOLVE_LCA = "lca"
RESOLVE_QUEUE = "queue"
RECLAIM = "reclaim"
PREEMPT = "preempt"


# ------------------------------------------------------------------ resolution
def _first_set_upwards(
    queues: Mapping[str, QueueInfo], path: list[str], start: int, attr: str
) -> float | None:
    """The first ``attr`` that is set, walking ``path`` from index ``start`` to the root."""
    for i in range(start, -1, -1):
        value = getattr(queues[path[i]], attr)
        if value is not None:
            return value
    return None


def resolve_preempt_min_runtime(
    queues: Mapping[str, QueueInfo], victim_queue: str | None, default: float
) -> float:
    """Preempt min-runtime of a job in ``victim_queue``: leaf upwards, else ``default``."""
    path = queue_path(queues, victim_queue)
    value = _first_set_upwards(queues, path, len(path) - 1, "preempt_min_runtime")
    return default if value is None else value


def resolve_reclaim_min_runtime(
    queues: Mapping[str, QueueInfo],
    reclaimer_queue: str | None,
    victim_queue: str | None,
    default: float,
    method: str = RESOLVE_LCA,
) -> float:
    """Reclaim min-runtime that protects a job of ``victim_queue`` from ``reclaimer_queue``."""
    victim_path = queue_path(queues, victim_queue)
    if not victim_path:
        return default
    if method == RESOLVE_QUEUE:
        start = len(victim_path) - 1
    else:
        reclaimer_path = queue_path(queues, reclaimer_queue)
        # Index of the lowest common ancestor; -1 is the implicit root above the
        # top-level queues.
        lca = -1
        for i, (a, b) in enumerate(zip(reclaimer_path, victim_path)):
            if a != b:
                break
            lca = i
        # One step down towards the victim (stay on the victim's leaf if the LCA is it).
        start = min(lca + 1, len(victim_path) - 1)
    value = _first_set_upwards(queues, victim_path, start, "reclaim_min_runtime")
    return default if value is None else value


# --------------------------------------------------------------------- plugin
def _accept(victim: Job) -> bool:
    return True


def _duration_arg(plugin: str, args: Mapping[str, Any], key: str) -> float | None:
    raw = args.get(key)
    if raw is None or raw == "":
        return None
    try:
        seconds = parse_duration(raw)
    except ValueError as exc:
        raise ConfigError(str(exc), obj=f"plugin {plugin}", field=f"arguments.{key}") from None
    if seconds < 0:
        raise ConfigError(
            f"duration {raw!r} must not be negative",
            obj=f"plugin {plugin}",
            field=f"arguments.{key}",
        )
    return seconds


def kept_active(job: Job, victim_tasks: Iterable[Task]) -> int:
    """Active-used pods of ``job`` that remain when the scenario's victims are gone.

    A victim task the scenario moved to another node (pipelined again) is not lost.
    """
    lost = {t for t in victim_tasks if t.job is job and t.status is not TaskStatus.PIPELINED}
    return sum(1 for t in job.tasks if t.status in ACTIVE_USED and t not in lost)


class MinRuntimePlugin(Plugin):
    name = "minruntime"
    native_allocate = True  # no role in allocate
    arguments = ("defaultReclaimMinRuntime", "defaultPreemptMinRuntime", "reclaimResolveMethod")

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.reclaim_arg = _duration_arg(self.name, self.args, "defaultReclaimMinRuntime")
        self.preempt_arg = _duration_arg(self.name, self.args, "defaultPreemptMinRuntime")
        self.resolve_method = self.arg_choice(
            "reclaimResolveMethod", RESOLVE_LCA, (RESOLVE_LCA, RESOLVE_QUEUE)
        )
        self.default_reclaim = self.reclaim_arg or 0.0
        self.default_preempt = self.preempt_arg or 0.0
        self.ssn: Session | None = None
        self._reclaim_cache: dict[tuple[str | None, str | None], float] = {}
        self._preempt_cache: dict[str | None, float] = {}

    # ---------------------------------------------------------------- session
    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        config = ssn.config
        self.default_reclaim = (
            self.reclaim_arg
            if self.reclaim_arg is not None
            else float(getattr(config, "reclaim_min_runtime", 0.0) or 0.0)
        )
        self.default_preempt = (
            self.preempt_arg
            if self.preempt_arg is not None
            else float(getattr(config, "preempt_min_runtime", 0.0) or 0.0)
        )
        self._reclaim_cache = {}
        self._preempt_cache = {}
        ssn.cache[self.name] = self
        ssn.add_reclaim_victim_filter_fn(
            self.reclaim_victim_filter, in_queue=self.reclaim_victim_filter_in
        )
        ssn.add_preempt_victim_filter_fn(self.preempt_victim_filter)
        # The validators read the victims' jobs' pod statuses and start times alone.
        ssn.add_reclaim_scenario_validator_fn(self.reclaim_scenario_validator, reads_pods_only=True)
        ssn.add_preempt_scenario_validator_fn(self.preempt_scenario_validator, reads_pods_only=True)

    def on_session_close(self, ssn: Session) -> None:
        self.ssn = None
        self._reclaim_cache = {}
        self._preempt_cache = {}

    # ------------------------------------------------------------- resolution
    def reclaim_min_runtime(self, reclaimer: Job, victim: Job) -> float:
        """Seconds of reclaim protection of ``victim`` against ``reclaimer``."""
        return self._reclaim_seconds(reclaimer.queue, victim.queue)

    def _reclaim_seconds(self, reclaimer_queue: str | None, victim_queue: str | None) -> float:
        key = (reclaimer_queue, victim_queue)
        value = self._reclaim_cache.get(key)
        if value is None:
            assert self.ssn is not None
            value = resolve_reclaim_min_runtime(
                self.ssn.queues,
                reclaimer_queue,
                victim_queue,
                self.default_reclaim,
                self.resolve_method,
            )
            self._reclaim_cache[key] = value
        return value

    def preempt_min_runtime(self, victim: Job) -> float:
        """Seconds of preempt protection of ``victim``."""
        value = self._preempt_cache.get(victim.queue)
        if value is None:
            assert self.ssn is not None
            value = resolve_preempt_min_runtime(self.ssn.queues, victim.queue, self.default_preempt)
            self._preempt_cache[victim.queue] = value
        return value

    def _protected(self, victim: Job, seconds: float) -> bool:
        start = victim.last_start_timestamp
        if start is None or seconds <= 0:
            return False
        assert self.ssn is not None
        return self.ssn.now < start + timedelta(seconds=seconds)

    def is_reclaim_protected(self, reclaimer: Job, victim: Job) -> bool:
        return self._protected(victim, self.reclaim_min_runtime(reclaimer, victim))

    def is_preempt_protected(self, preemptor: Job, victim: Job) -> bool:
        return self._protected(victim, self.preempt_min_runtime(victim))

    # ------------------------------------------------------ filters/validators
    def reclaim_victim_filter(self, reclaimer: Job, victim: Job) -> bool:
        if victim.is_elastic():
            return True  # elastic jobs are checked per scenario
        return not self.is_reclaim_protected(reclaimer, victim)

    def reclaim_victim_filter_in(self, reclaimer: Job, queue: str) -> Callable[[Job], bool]:
        """:meth:`reclaim_victim_filter` of ``reclaimer`` for the jobs of leaf ``queue``:
        their protection is resolved once, and a job that started at a UTC time is
        protected while that is after ``now - seconds`` in UTC (``now < start +
        seconds``, in the same exact arithmetic); a start in another zone is checked as
        :meth:`reclaim_victim_filter` does."""
        seconds = self._reclaim_seconds(reclaimer.queue, queue or None)
        if seconds <= 0:
            return _accept
        assert self.ssn is not None
        try:
            since = self.ssn.now.astimezone(timezone.utc) - timedelta(seconds=seconds)
        except OverflowError:  # protected since before year 1: ask of each job
            return lambda victim: self.reclaim_victim_filter(reclaimer, victim)

        def accepts(victim: Job) -> bool:
            if victim.is_elastic():
                return True  # elastic jobs are checked per scenario
            start = victim.last_start_timestamp
            if start is None:
                return True
            if start.tzinfo is timezone.utc:
                return start <= since
            return not self._protected(victim, seconds)

        return accepts

    def preempt_victim_filter(self, preemptor: Job, victim: Job) -> bool:
        if victim.is_elastic():
            return True
        return not self.is_preempt_protected(preemptor, victim)

    def reclaim_scenario_validator(
        self, pending: Job, victim_jobs: Iterable[Job], victim_tasks: Iterable[Task]
    ) -> bool:
        return self._validate(pending, victim_jobs, victim_tasks, self.is_reclaim_protected)

    def preempt_scenario_validator(
        self, pending: Job, victim_jobs: Iterable[Job], victim_tasks: Iterable[Task]
    ) -> bool:
        return self._validate(pending, victim_jobs, victim_tasks, self.is_preempt_protected)

    @staticmethod
    def _validate(pending: Job, victim_jobs, victim_tasks, protected) -> bool:
        tasks = list(victim_tasks)
        seen: set[Job] = set()
        for job in chain(victim_jobs, (t.job for t in tasks)):
            # Only an elastic job can be left below its minimum (is_elastic, inline: a
            # scenario may hold thousands of one-pod jobs).
            if job is None or job.min_member >= len(job.tasks) or job in seen:
                continue
            seen.add(job)
            if protected(pending, job) and kept_active(job, tasks) < job.min_member:
                return False
        return True


register_plugin("minruntime", MinRuntimePlugin)
