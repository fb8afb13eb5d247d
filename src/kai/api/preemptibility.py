"""The one resolver of a job's preemptibility.

Priority orders the queue; preemptibility alone decides who may be a victim.  The
value comes from, in order: the PodGroup's ``spec.preemptibility``, the
``kai.scheduler/preemptibility`` label of the pod's top owner (following
ownerReferences through the objects of the snapshot), the same label on the pod, and
finally the legacy rule (priority below 100 is preemptible).  An invalid value falls
back to the priority rule and is reported as a warning, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kai.api.objects import GenericObject, OwnerReference, PodGroupObject, PodObject

PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
PREEMPTIBLE = "preemptible"
NON_PREEMPTIBLE = "non-preemptible"
SEMI_PREEMPTIBLE = "semi-preemptible"
VALID_VALUES = (PREEMPTIBLE, NON_PREEMPTIBLE, SEMI_PREEMPTIBLE)

# Jobs of this priority and above are non-preemptible unless told otherwise.
NON_PREEMPTIBLE_PRIORITY_THRESHOLD = 100


@dataclass(frozen=True)
class Preemptibility:
    value: str  # one of VALID_VALUES
    source: str  # "podgroup", "owner", "pod" or "priority"
    warning: str | None = None

    @property
    def preemptible(self) -> bool:
        """Whether the job as a whole may be a victim (semi: only above minMember)."""
        return self.value != NON_PREEMPTIBLE


OwnerLookup = Callable[[str, OwnerReference], "GenericObject | None"]


def top_owner(pod: PodObject, lookup: OwnerLookup, max_depth: int = 16) -> GenericObject | None:
    """Follow controller ownerReferences upwards as far as the snapshot has the owners."""
    refs: Sequence[OwnerReference] = pod.owner_references
    namespace = pod.namespace
    found: GenericObject | None = None
    seen: set[tuple[str, str]] = set()
    for _ in range(max_depth):
        ref = _controller_ref(refs)
        if ref is None or (ref.kind, ref.name) in seen:
            break
        seen.add((ref.kind, ref.name))
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


def resolve_preemptibility(
    pod_group: PodGroupObject | None,
    pods: Sequence[PodObject],
    priority: int,
    lookup: OwnerLookup,
) -> Preemptibility:
    warnings: list[str] = []
    candidates: list[tuple[str, str, str]] = []  # (value, source, where)
    if pod_group is not None and pod_group.preemptibility:
        candidates.append((pod_group.preemptibility, "podgroup", "spec.preemptibility"))
    for pod in pods:
        owner = top_owner(pod, lookup)
        if owner is not None and PREEMPTIBILITY_LABEL in owner.labels:
            where = f"label {PREEMPTIBILITY_LABEL} of {owner.kind} {owner.name}"
            candidates.append((owner.labels[PREEMPTIBILITY_LABEL], "owner", where))
            break
    for pod in pods:
        if PREEMPTIBILITY_LABEL in pod.labels:
            where = f"label {PREEMPTIBILITY_LABEL} of pod {pod.key}"
            candidates.append((pod.labels[PREEMPTIBILITY_LABEL], "pod", where))
            break
    for value, source, where in candidates:
        normalized = value.strip().lower()
        if normalized in VALID_VALUES:
            warning = "; ".join(warnings) or None
            return Preemptibility(normalized, source, warning)
        warnings.append(
            f"invalid preemptibility {value!r} in {where} "
            f"(expected one of {', '.join(VALID_VALUES)}); using the priority rule"
        )
        break  # an invalid explicit value falls back to the priority rule
    legacy = PREEMPTIBLE if priority < NON_PREEMPTIBLE_PRIORITY_THRESHOLD else NON_PREEMPTIBLE
    return Preemptibility(legacy, "priority", "; ".join(warnings) or None)
