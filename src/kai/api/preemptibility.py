"""The one resolver of a job's preemptibility.

Priority orders the queue; preemptibility alone decides who may be a victim.  The
value comes from, in order:

1. the PodGroup's ``spec.preemptibility``;
2. the ``kai.scheduler/preemptibility`` label of the pod's top owner, found by
   following ownerReferences (controller reference first) through the objects of the
   snapshot, whatever their kind (Deployment, ReplicaSet, Job, JobSet, PyTorchJob,
   ...); when no pod leads to a labelled owner, the PodGroup's own ownerReferences
   (the podgrouper points them at the top owner) are followed the same way;
3. the same label on the pod;
4. the legacy rule: priority below 100 is preemptible, 100 and above is not.

Values are ``preemptible``, ``non-preemptible`` and ``semi-preemptible`` (exact, as the
CRD enum has them).  The first source that gives a value decides; if that value is
invalid the job falls back to the priority rule (not to the next source) and the
group carries a warning, never an error.

``semi-preemptible``: the job's first ``minMember`` pods (its core) are
non-preemptible, pods above ``minMember`` are preemptible.  With ``minMember`` 0 the
job is fully preemptible, with ``minMember`` equal to its pod count it is fully
non-preemptible.

Code that decides victimhood or quota asks this module (or the fields the snapshot
builder sets from it: ``Job.preemptible``, ``Job.preemptibility``,
``Job.is_task_preemptible``), never the priority.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from kai._dataclasses import dataclass
from kai.api.model import ACTIVE_ALLOCATED, Job, Task
from kai.api.objects import GenericObject, OwnerReference, PodGroupObject, PodObject

PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
PREEMPTIBLE = "preemptible"
NON_PREEMPTIBLE = "non-preemptible"
SEMI_PREEMPTIBLE = "semi-preemptible"
VALID_VALUES = (PREEMPTIBLE, NON_PREEMPTIBLE, SEMI_PREEMPTIBLE)

# Jobs of this priority and above are non-preemptible unless told otherwise.
NON_PREEMPTIBLE_PRIORITY_THRESHOLD = 100

SOURCE_PODGROUP = "podgroup"
SOURCE_OWNER = "owner"
SOURCE_POD = "pod"
SOURCE_PRIORITY = "priority"


@dataclass(frozen=True)
class Preemptibility:
    """A job's preemptibility, where it was read from, and a warning about it if any."""

    value: str  # one of VALID_VALUES
    source: str  # "podgroup", "owner", "pod" or "priority"
    warning: str | None = None

    @property
    def preemptible(self) -> bool:
        """Whether any pod of the job may be a victim (semi: those above minMember)."""
        return self.value != NON_PREEMPTIBLE


# The results of the legacy rule (frozen, so shared by every job they resolve).
_BY_PRIORITY = {v: Preemptibility(v, SOURCE_PRIORITY) for v in (PREEMPTIBLE, NON_PREEMPTIBLE)}


class _Owned(Protocol):
    # Read-only, so that objects whose namespace is always a str match too.
    @property
    def namespace(self) -> str | None: ...
    @property
    def owner_references(self) -> Sequence[OwnerReference]: ...


OwnerLookup = Callable[[str, OwnerReference], "GenericObject | None"]


def priority_rule(priority: int) -> str:
    """The legacy rule: priority below 100 is preemptible."""
    return PREEMPTIBLE if priority < NON_PREEMPTIBLE_PRIORITY_THRESHOLD else NON_PREEMPTIBLE


def top_owner(obj: _Owned, lookup: OwnerLookup, max_depth: int = 32) -> GenericObject | None:
    """Follow ownerReferences upwards as far as the snapshot has the owners.

    At each level the controller reference is followed (else the first reference).
    Returns the highest owner found, or None when the first owner is not in the
    snapshot.  Cycles end the walk.
    """
    refs: Sequence[OwnerReference] = obj.owner_references
    namespace = obj.namespace or ""
    found: GenericObject | None = None
    seen: set[tuple[str, str, str]] = set()
    for _ in range(max_depth):
        ref = _controller_ref(refs)
        if ref is None or (namespace, ref.kind, ref.name) in seen:
            break
        seen.add((namespace, ref.kind, ref.name))
        owner = lookup(namespace, ref)
        if owner is None:
            break
        found = owner
        refs = owner.owner_references
        namespace = owner.namespace or namespace
    return found


def _controller_ref(refs: Sequence[OwnerReference]) -> OwnerReference | None:
    for ref in refs:
        if ref.controller:
            return ref
    return refs[0] if refs else None


def _owner_label(
    pod_group: PodGroupObject | None, pods: Sequence[PodObject], lookup: OwnerLookup
) -> tuple[str, str] | None:
    """(value, where) of the preemptibility label on the top owner, if any."""
    sources: list[_Owned] = list(pods)
    if pod_group is not None:
        sources.append(pod_group)
    for obj in sources:
        owner = top_owner(obj, lookup)
        if owner is not None and PREEMPTIBILITY_LABEL in owner.labels:
            ns = f"{owner.namespace}/" if owner.namespace else ""
            where = f"label {PREEMPTIBILITY_LABEL} of {owner.kind} {ns}{owner.name}"
            return owner.labels[PREEMPTIBILITY_LABEL], where
    return None


def resolve_preemptibility(
    pod_group: PodGroupObject | None,
    pods: Sequence[PodObject],
    priority: int,
    lookup: OwnerLookup,
) -> Preemptibility:
    """Resolve a job's preemptibility (see the module docstring for the order)."""
    explicit: tuple[str, str, str] | None = None  # (value, source, where)
    if pod_group is not None and pod_group.preemptibility is not None:
        explicit = (pod_group.preemptibility, SOURCE_PODGROUP, "spec.preemptibility")
    if explicit is None:
        # One pass over the pods (one pod, for most jobs) finds both later sources.
        owned = pod_group is not None and bool(pod_group.owner_references)
        labelled: PodObject | None = None
        for pod in pods:
            if pod.owner_references:
                owned = True
            if labelled is None and PREEMPTIBILITY_LABEL in pod.labels:
                labelled = pod
        if owned:
            found = _owner_label(pod_group, pods, lookup)
            if found is not None:
                explicit = (found[0], SOURCE_OWNER, found[1])
        if explicit is None and labelled is not None:
            where = f"label {PREEMPTIBILITY_LABEL} of pod {labelled.key}"
            explicit = (labelled.labels[PREEMPTIBILITY_LABEL], SOURCE_POD, where)
    legacy = priority_rule(priority)
    if explicit is None:
        return _BY_PRIORITY[legacy]
    value, source, where = explicit
    if value in VALID_VALUES:
        return Preemptibility(value, source)
    warning = (
        f"invalid preemptibility {value!r} in {where} (expected one of "
        f"{', '.join(VALID_VALUES)}); using the priority rule: priority {priority} "
        f"is {legacy}"
    )
    return Preemptibility(legacy, SOURCE_PRIORITY, warning)


# ----------------------------------------------------------- questions of actions
def can_be_victim(job: Job) -> bool:
    """Whether any pod of ``job`` may be evicted by reclaim, preempt or consolidation."""
    if job.preemptibility == SEMI_PREEMPTIBLE:
        return bool(evictable_tasks(job))
    return job.preemptible


def evictable_tasks(job: Job) -> list[Task]:
    """The job's active-allocated pods that may be evicted, in task-list order.

    All of them for a preemptible job, none for a non-preemptible one, and the pods
    above the core (the first ``minMember`` pods) for a semi-preemptible one.
    """
    active = [t for t in job.tasks if t.status in ACTIVE_ALLOCATED]
    if job.preemptibility == SEMI_PREEMPTIBLE:
        core = job.core_tasks()
        return [t for t in active if t not in core]
    return active if job.preemptible else []


def is_task_preemptible(task: Task) -> bool:
    """Whether this one pod may be a victim (its job's preemptibility, per pod)."""
    job = task.job
    return job is not None and job.is_task_preemptible(task)


def published_status(job: Job) -> dict[str, object]:
    """What the PodGroup controller publishes in the PodGroup's status."""
    status: dict[str, object] = {"preemptibility": job.preemptibility}
    if job.preemptibility == SEMI_PREEMPTIBLE:
        status["corePods"] = sorted(t.name for t in job.core_tasks())
    return status


# ------------------------------------------------------------- quota accounting
def counts_as_non_preemptible(task: Task) -> bool:
    """At an allocate or deallocate event of ``task``: are its resources non-preemptible?

    Called after the task's status changed.  For a semi-preemptible job the pods that
    fill the job up to ``minMember`` are non-preemptible: a pod just placed is if the
    job now has at most ``minMember`` active pods, a pod just removed is if the job now
    has fewer than ``minMember`` (so an event and its undo charge the same).
    """
    job = task.job
    if job is None:
        return False
    if job.preemptibility != SEMI_PREEMPTIBLE:
        return not job.preemptible
    active = job.active_allocated_count()
    if task.status in ACTIVE_ALLOCATED:
        return active <= job.min_member
    return active < job.min_member


def non_preemptible_part(job: Job, tasks: Sequence[Task]) -> list[Task]:
    """Of ``tasks`` about to be placed (in order), those that will be non-preemptible."""
    if job.preemptibility != SEMI_PREEMPTIBLE:
        return [] if job.preemptible else list(tasks)
    room = job.min_member - job.active_allocated_count()
    return list(tasks)[: max(room, 0)]
