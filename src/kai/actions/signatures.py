"""Scheduling signatures: skip jobs no easier to place than one that already failed.

Reclaim, preempt and consolidation search victims for one pending job at a time, and
that search is the expensive part of an action.  Many pending jobs are alike (the same
pods of one workload submitted many times), and once the search failed for one of them,
a job with the same placement constraints that asks for no less cannot succeed either
in the same action.  So each action execution keeps, per key, the *representative* of
the failed jobs -- the one with the smallest pending footprint -- and does not try a job
that is not easier than it (KAI's ``MinimalJobRepresentatives``, reference sec. 3.9).

* A pod's signature hashes what constrains where it may run beyond its resource
  request: node selector, required and preferred node affinity, tolerations (key,
  operator, value, effect), priority and priority class.  The parsed pod model has no
  volumes, topology spread constraints or host ports, so those cannot take part.
* A job's signature hashes the sorted signatures of its pods that are not actively
  allocated (the ones it still has to place).  Queue and PodGroup are not part of it.
* The key is (leaf queue, signature) for reclaim and preempt, the signature alone for
  consolidation.
* A job is *easier* than the representative of its key if it has fewer pending pods,
  or if, with both sides' pending request vectors sorted the same way, some position
  of it is strictly smaller (<= in every component, not equal) than the
  representative's.  A job with no pending pod, or against a representative with none,
  is not easier.
* A job that failed (not for lack of time) replaces the representative if there is
  none, or if it has no more pending pods and each of its sorted pending request
  vectors is <= the representative's at the same position.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from kai._dataclasses import dataclass
from kai.api.model import ACTIVE_ALLOCATED, Job, Task, TaskStatus
from kai.api.objects import NodeSelectorTerm, PodObject, PreferredSchedulingTerm, Toleration
from kai.framework.session import Session


def pod_signature(pod: PodObject) -> str:
    """Stable hash of the pod's placement constraints (not of its resource request)."""
    required, preferred = pod.required_node_affinity, pod.preferred_node_affinity
    # Hashable, and the containers' types kept where the hash prints them.
    return _constraints_digest(
        tuple(sorted(pod.node_selector.items())),
        None if required is None else tuple(required),
        type(preferred),
        tuple(preferred),
        tuple(pod.tolerations),
        pod.priority_class_name or "",
        type(pod.priority).__name__,  # equal numbers of other types print differently
        pod.priority,
    )


@functools.lru_cache(maxsize=4096)
def _constraints_digest(
    selector: tuple[tuple[str, str], ...],
    required: tuple[NodeSelectorTerm, ...] | None,
    preferred_type: type,
    preferred: tuple[PreferredSchedulingTerm, ...],
    tolerations: tuple[Toleration, ...],
    class_name: str,
    _priority_type: str,
    priority: int | None,
) -> str:
    """The hash of a pod's constraints, once per distinct set: the pods of a workload
    share theirs, and printing them is what the hash costs."""
    parts = (
        ("nodeSelector", selector),
        ("required", None if required is None else list(required)),
        ("preferred", preferred if preferred_type is tuple else preferred_type(preferred)),
        ("tolerations", [(t.key, t.operator, t.value, t.effect) for t in tolerations]),
        ("priorityClassName", class_name),
        ("priority", priority),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _task_signature(task: Task, cache: dict[int, tuple[PodObject, str]] | None) -> str:
    if cache is None:
        return pod_signature(task.pod)
    hit = cache.get(id(task.pod))
    if hit is not None and hit[0] is task.pod:
        return hit[1]
    signature = pod_signature(task.pod)
    cache[id(task.pod)] = (task.pod, signature)
    return signature


def job_signature(job: Job, cache: dict[int, tuple[PodObject, str]] | None = None) -> str:
    """Hash of the sorted signatures of the job's pods that are not actively allocated."""
    pods = sorted(
        [_task_signature(t, cache) for t in job.tasks if t.status not in ACTIVE_ALLOCATED]
    )
    return _signatures_digest(tuple(pods))


@functools.lru_cache(maxsize=4096)
def _signatures_digest(signatures: tuple[str, ...]) -> str:
    """The hash of a job's sorted pod signatures (alike jobs share them)."""
    digest = hashlib.sha256()
    for signature in signatures:
        digest.update(signature.encode())
    return digest.hexdigest()


def _pod_signatures(ssn: Session) -> dict[int, tuple[PodObject, str]]:
    """The state's cache of pod signatures, emptied when it holds many more pods than the
    state (those of pods gone from a state that lives across sessions)."""
    cache = ssn.state.pod_signatures
    if len(cache) > 2 * len(ssn.state.tasks) + 1024:
        cache.clear()
    return cache


def pending_footprint(job: Job) -> np.ndarray:
    """The job's Pending pods' request vectors, one row each, sorted lexicographically.

    Shared-GPU pods carry their GPU fraction and GPU memory as two extra components (the
    request vector's gpu entry is 0 for them).  Lexicographic order extends the
    componentwise order, so equal multisets give equal arrays.
    """
    return np.asarray(_footprint_rows(job), dtype=float)


def _footprint_rows(job: Job) -> list[tuple[float, ...]]:
    """The rows of :func:`pending_footprint`, sorted."""
    rows = [
        (*t.request.tolist(), t.gpu_fraction, t.gpu_memory_mib)
        for t in job.tasks
        if t.status is TaskStatus.PENDING
    ]
    rows.sort()
    return rows


@dataclass(eq=False)  # arrays: compared by identity
class Representative:
    """A failed job and its pending footprint when it failed."""

    job: Job
    footprint: np.ndarray  # sorted pending request vectors at the time it failed


def easier_than(footprint: np.ndarray, rep: np.ndarray) -> bool:
    """Whether a job with ``footprint`` may succeed where one with ``rep`` failed."""
    n, m = len(footprint), len(rep)
    if n == 0 or m == 0:
        return False
    if n < m:
        return True
    if m <= _FEW_ROWS:
        # Python floats compare as numpy's float64 do, without its cost per call on
        # small arrays (most jobs have a pod or a few to place).
        return any(map(_strictly_below, footprint[:m].tolist(), rep.tolist()))
    head = footprint[:m]
    smaller = (head <= rep).all(axis=1) & (head != rep).any(axis=1)
    return bool(smaller.any())


#: Up to how many rows :func:`easier_than` compares in Python.
_FEW_ROWS = 8


def _strictly_below(row: list[float], bound: list[float]) -> bool:
    """Whether ``row`` is <= ``bound`` in every component and differs in one."""
    differs = False
    for value, limit in zip(row, bound):
        if not value <= limit:
            return False
        if value != limit:
            differs = True
    return differs


def no_larger_than(footprint: np.ndarray, rep: np.ndarray) -> bool:
    """Whether every sorted pending vector of ``footprint`` is <= ``rep``'s at its position."""
    n, m = len(footprint), len(rep)
    if n == 0 or m == 0 or n > m:
        return False
    return bool((footprint <= rep[:n]).all())


@dataclass(eq=False)  # arrays: compared by identity
class _Known:
    """A job's signature and (once made) its pending footprint, while its pods'
    statuses are ``statuses``."""

    statuses: tuple[TaskStatus, ...]
    signature: str
    footprint: np.ndarray | None = None


#: Where a session keeps what :class:`FailedRepresentatives` learnt of its jobs: every
#: eviction action asks about the same pending jobs, most of them unchanged.
_KNOWN_KEY = "signatures.known"
#: Where it keeps the footprints its jobs share.
_FOOTPRINTS_KEY = "signatures.footprints"


class FailedRepresentatives:
    """The failed jobs of one action execution, keyed by signature (and leaf queue).

    Signatures are computed only once some job has failed (for its queue, if keyed per
    queue), so an action in which every job succeeds pays nothing for them.
    """

    def __init__(self, ssn: Session, *, per_queue: bool) -> None:
        self.per_queue = per_queue
        self._reps: dict[tuple, Representative] = {}
        self._queues: set[str | None] = set()
        self._pod_cache = _pod_signatures(ssn)
        # Per job, its pods' statuses when it was last asked about, its signature and
        # (once made) its pending footprint then: the passed-over check asks again about
        # every job left after each failure, and most have not changed since.  Shared
        # by the session's actions (a job's pods are the same objects all session long).
        self._known: dict[Job, _Known] = ssn.cache.setdefault(_KNOWN_KEY, {})
        # One read-only footprint per distinct value: alike jobs share it, and with it
        # the comparisons with a representative kept by the two footprints (below).
        self._footprints: dict[tuple, np.ndarray] = ssn.cache.setdefault(_FOOTPRINTS_KEY, {})
        self._easier: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = {}

    def _known_of(self, job: Job) -> _Known:
        """What is known of ``job`` as its pods' statuses are now."""
        statuses = tuple([t.status for t in job.tasks])
        known = self._known.get(job)
        if known is None or known.statuses != statuses:
            known = self._known[job] = _Known(statuses, job_signature(job, self._pod_cache))
        return known

    def key(self, job: Job) -> tuple:
        return self._key(job, self._known_of(job))

    def _key(self, job: Job, known: _Known) -> tuple:
        return (job.queue, known.signature) if self.per_queue else (known.signature,)

    def footprint(self, job: Job) -> np.ndarray:
        """:func:`pending_footprint` of ``job``, remembered while its pods' statuses hold
        (read only: the representatives keep it)."""
        return self._footprint(job, self._known_of(job))

    def _footprint(self, job: Job, known: _Known) -> np.ndarray:
        if known.footprint is None:
            rows = tuple(_footprint_rows(job))
            shared = self._footprints.get(rows)
            if shared is None:
                shared = self._footprints[rows] = np.asarray(rows, dtype=float)
                shared.flags.writeable = False
            known.footprint = shared
        return known.footprint

    def equivalent_failed(self, job: Job) -> Job | None:
        """The failed representative that ``job`` is not easier than (None: try the job)."""
        if not self._reps or (self.per_queue and job.queue not in self._queues):
            return None
        known = self._known_of(job)  # read once: its pods' statuses make a tuple
        rep = self._reps.get(self._key(job, known))
        if rep is None:
            return None
        footprint = self._footprint(job, known)
        # The same jobs are asked about after every failure, most of them unchanged: the
        # comparison is kept by the two (read-only) footprints it read.
        pair = (id(footprint), id(rep.footprint))
        kept = self._easier.get(pair)
        if kept is None or kept[0] is not footprint or kept[1] is not rep.footprint:
            kept = self._easier[pair] = (
                footprint,
                rep.footprint,
                easier_than(footprint, rep.footprint),
            )
        return None if kept[2] else rep.job

    def failed(self, job: Job) -> None:
        """Record a job whose victim search failed (not for lack of time)."""
        known = self._known_of(job)
        key, footprint = self._key(job, known), self._footprint(job, known)
        rep = self._reps.get(key)
        if rep is not None and not no_larger_than(footprint, rep.footprint):
            return
        self._reps[key] = Representative(job, footprint)
        self._queues.add(job.queue)

    def __len__(self) -> int:
        return len(self._reps)
