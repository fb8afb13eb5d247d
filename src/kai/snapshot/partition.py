"""Node pools: one scheduling shard per value of the node-pool label.

KAI-Scheduler runs one scheduler per node pool.  Each sees only the nodes, queues and
pod groups whose ``kai.scheduler/node-pool`` label carries its pool's value; the
default shard sees the objects without the label.  Every shard lists every pod: a pod
is one of a shard's pods when its pod group is the shard's, and it holds the capacity
of its node in the shard of that node (:func:`pod_pools`).  ``kai simulate`` runs one
session per pool present in the snapshot, so a labelled cluster is scheduled as it
would be by a scheduler per pool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from typing import TypeVar

from kai.api.objects import ClusterObjects, PodObject
from kai.snapshot.builder import POD_GROUP_ANNOTATION

NODE_POOL_LABEL = "kai.scheduler/node-pool"
DEFAULT_POOL = ""


_Pool = TypeVar("_Pool", bound=Hashable)


def pod_pools(
    pod: PodObject,
    node_pool: Mapping[str, _Pool],
    group_pool: Mapping[tuple[str, str], _Pool],
    pool_of: Callable[[Mapping[str, str]], _Pool],
    label: str = NODE_POOL_LABEL,
) -> tuple[_Pool, tuple[_Pool, ...]]:
    """The pools that see ``pod``: the one whose session has it among its pods, and
    the one where it only holds its node's capacity, when that is another (a tuple of
    it, or empty).

    A pod goes with its pod group; without a known group, by its own label, or, with
    none, with its node (a pod of another scheduler is on some pool's node).  Placed on
    a node of another pool, it holds that node's capacity there too: KAI-Scheduler's
    shards add every pod to its node.  ``node_pool`` and ``group_pool`` give the pools
    of the nodes and pod groups (by namespace and name), ``pool_of`` the pool of a set
    of labels."""
    node = pod.node_name
    # The pool of the pod's node, when it is on a node of the snapshot.
    node_of = (node_pool[node],) if node is not None and node in node_pool else ()
    group = pod.annotations.get(POD_GROUP_ANNOTATION)
    if group is not None and (pod.namespace, group) in group_pool:
        pool = group_pool[(pod.namespace, group)]
    elif pod.labels.get(label) is None and node_of:
        pool = node_of[0]
    else:
        pool = pool_of(pod.labels)
    return pool, tuple(other for other in node_of if other != pool)


def partition(objects: ClusterObjects, label: str = NODE_POOL_LABEL) -> dict[str, ClusterObjects]:
    """Split a snapshot into one snapshot per node pool.

    Nodes, queues and pod groups go by their own label; a pod goes where
    :func:`pod_pools` says, as one of a pool's pods or as an occupant of its node.
    Priority classes, owners and the configuration are shared by every pool.
    """
    if not any(
        label in obj.labels
        for kind in (objects.nodes, objects.queues, objects.pod_groups, objects.pods)
        for obj in kind
    ):
        return {DEFAULT_POOL: objects}  # no labelled object: one pool, the snapshot itself

    def pool_of(labels: Mapping[str, str]) -> str:
        return labels.get(label, DEFAULT_POOL)

    node_pool = {n.name: pool_of(n.labels) for n in objects.nodes}
    group_pool = {(g.namespace, g.name): pool_of(g.labels) for g in objects.pod_groups}
    parts: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for node in objects.nodes:
        parts[node_pool[node.name]]["nodes"].append(node)
    for queue in objects.queues:
        parts[pool_of(queue.labels)]["queues"].append(queue)
    for group in objects.pod_groups:
        parts[group_pool[(group.namespace, group.name)]]["pod_groups"].append(group)
    for pod in objects.pods:
        pool, holding = pod_pools(pod, node_pool, group_pool, pool_of, label)
        parts[pool]["pods"].append(pod)
        for other in holding:
            parts[other]["occupants"].append(pod)
    for pod in objects.occupants:  # a shard's snapshot: they stay on their nodes
        parts[node_pool.get(pod.node_name or "", DEFAULT_POOL)]["occupants"].append(pod)
    for metric in objects.node_metrics:
        parts[node_pool.get(metric.name, DEFAULT_POOL)]["node_metrics"].append(metric)
    parts[DEFAULT_POOL]  # the default shard always exists
    every_node = frozenset(node_pool) | objects.other_pool_nodes
    return {
        pool: replace(
            objects,
            nodes=kinds["nodes"],
            pods=kinds["pods"],
            pod_groups=kinds["pod_groups"],
            queues=kinds["queues"],
            node_metrics=kinds["node_metrics"],
            occupants=kinds["occupants"],
            other_pool_nodes=every_node.difference(node.name for node in kinds["nodes"]),
        )
        for pool, kinds in sorted(parts.items())
    }
