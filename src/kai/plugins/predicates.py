"""Node predicates: schedulability, node selector, required node affinity, taints.

Resource fit (including pod count, which every pod requests as one ``pods`` unit) is
checked by the session itself.  The static predicates here depend only on the pod's
constraints and the node's labels and taints, so each distinct set of constraints is
compiled once per session into a boolean mask over all nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kai.api.model import Job, Task
from kai.api.objects import NodeObject, NodeSelectorTerm, SelectorRequirement, Toleration
from kai.framework import Plugin, Session, register_plugin

REASON_UNSCHEDULABLE = "node(s) were unschedulable or not ready"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TAINTS = "node(s) had untolerated taint(s)"


def requirement_matches(req: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    op = req.operator
    present = req.key in labels
    value = labels.get(req.key)
    if op == "In":
        return present and value in req.values
    if op == "NotIn":
        return not present or value not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(req.values) != 1:
            return False
        try:
            left, right = int(value), int(req.values[0])  # type: ignore[arg-type]
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def term_matches(term: NodeSelectorTerm, node: NodeObject) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches no objects
    if not all(requirement_matches(r, node.labels) for r in term.match_expressions):
        return False
    fields = {"metadata.name": node.name}
    return all(requirement_matches(r, fields) for r in term.match_fields)


def tolerates(tolerations: Sequence[Toleration], key: str, value: str, effect: str) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != effect:
            continue
        if tol.operator == "Exists":
            if not tol.key or tol.key == key:
                return True
        elif tol.key == key and tol.value == value:
            return True
    return False


#: How many node masks of distinct selectors (and of distinct tolerations) are kept.
MASKS_KEPT = 1024


def _keep(masks: dict[tuple, np.ndarray], key: tuple, mask: np.ndarray) -> None:
    """Keep ``mask`` under ``key``: read-only, as sessions share it, and at most
    ``MASKS_KEPT`` of them over a long-lived scheduler's cycles."""
    mask.flags.writeable = False
    if len(masks) >= MASKS_KEPT:
        masks.clear()
    masks[key] = mask


class PredicatesPlugin(Plugin):
    name = "predicates"
    native_allocate = True

    def on_session_open(self, ssn: Session) -> None:
        nodes = ssn.nodes.objects
        schedulable = ssn.nodes.schedulable.copy()
        # The masks read the node objects alone: kept with the node table's statics,
        # for every session over the same nodes (read-only, as they are shared).
        affinity_cache: dict[tuple, np.ndarray] = ssn.nodes.derived("predicates.affinity", dict)
        taint_cache: dict[tuple, np.ndarray] = ssn.nodes.derived("predicates.taints", dict)
        ones = np.ones(len(nodes), dtype=np.bool_)

        def schedulable_fn(task: Task, job: Job) -> np.ndarray:
            return schedulable

        def affinity_fn(task: Task, job: Job) -> np.ndarray:
            pod = task.pod
            if not pod.node_selector and pod.required_node_affinity is None:
                return ones
            key = (tuple(sorted(pod.node_selector.items())), repr(pod.required_node_affinity))
            mask = affinity_cache.get(key)
            if mask is None:
                mask = np.array(
                    [
                        all(n.labels.get(k) == v for k, v in pod.node_selector.items())
                        and (
                            pod.required_node_affinity is None
                            or any(term_matches(t, n) for t in pod.required_node_affinity)
                        )
                        for n in nodes
                    ],
                    dtype=np.bool_,
                )
                _keep(affinity_cache, key, mask)
            return mask

        tainted = ssn.nodes.derived("predicates.tainted", lambda: any(n.taints for n in nodes))

        def taint_fn(task: Task, job: Job) -> np.ndarray:
            if not tainted:
                return ones
            tolerations = task.pod.tolerations
            key = tuple(tolerations)
            mask = taint_cache.get(key)
            if mask is None:
                mask = np.array(
                    [
                        not n.taints  # most nodes: nothing to tolerate
                        or all(
                            tolerates(tolerations, t.key, t.value, t.effect)
                            for t in n.taints
                            if t.effect in ("NoSchedule", "NoExecute")
                        )
                        for n in nodes
                    ],
                    dtype=np.bool_,
                )
                _keep(taint_cache, key, mask)
            return mask

        ssn.add_batch_predicate_fn(REASON_UNSCHEDULABLE, schedulable_fn)
        ssn.add_batch_predicate_fn(REASON_AFFINITY, affinity_fn)
        ssn.add_batch_predicate_fn(REASON_TAINTS, taint_fn)


register_plugin("predicates", PredicatesPlugin)
