"""Node pools: one scheduling shard per value of the node-pool label.

KAI-Scheduler runs one scheduler per node pool.  Each sees only the nodes, queues and
pod groups whose ``kai.scheduler/node-pool`` label carries its pool's value; the
default shard sees the objects without the label.  ``kai simulate`` runs one session
per pool present in the snapshot, so a labelled cluster is scheduled as it would be by
a scheduler per pool.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from kai.api.objects import ClusterObjects

NODE_POOL_LABEL = "kai.scheduler/node-pool"
POD_GROUP_ANNOTATION = "pod-group-name"
DEFAULT_POOL = ""


def partition(objects: ClusterObjects, label: str = NODE_POOL_LABEL) -> dict[str, ClusterObjects]:
    """Split a snapshot into one snapshot per node pool.

    Nodes, queues and pod groups go by their own label; a pod goes with its pod group
    (or by its own label when it has none), a pod of another scheduler goes with its
    node.  Priority classes, owners and the configuration are shared by every pool.
    """
    if not any(
        label in obj.labels
        for kind in (objects.nodes, objects.queues, objects.pod_groups, objects.pods)
        for obj in kind
    ):
        return {DEFAULT_POOL: objects}  # no labelled object: one pool, the snapshot itself
    node_pool = {n.name: n.labels.get(label, DEFAULT_POOL) for n in objects.nodes}
    group_pool = {
        (g.namespace, g.name): g.labels.get(label, DEFAULT_POOL) for g in objects.pod_groups
    }
    parts: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for node in objects.nodes:
        parts[node_pool[node.name]]["nodes"].append(node)
    for queue in objects.queues:
        parts[queue.labels.get(label, DEFAULT_POOL)]["queues"].append(queue)
    for group in objects.pod_groups:
        parts[group_pool[(group.namespace, group.name)]]["pod_groups"].append(group)
    for pod in objects.pods:
        group_name = pod.annotations.get(POD_GROUP_ANNOTATION)
        if group_name is not None and (pod.namespace, group_name) in group_pool:
            pool = group_pool[(pod.namespace, group_name)]
        elif pod.labels.get(label) is None and pod.node_name in node_pool:
            pool = node_pool[pod.node_name]
        else:
            pool = pod.labels.get(label, DEFAULT_POOL)
        parts[pool]["pods"].append(pod)
    for metric in objects.node_metrics:
        parts[node_pool.get(metric.name, DEFAULT_POOL)]["node_metrics"].append(metric)
    parts[DEFAULT_POOL]  # the default shard always exists
    return {
        pool: replace(
            objects,
            nodes=kinds["nodes"],
            pods=kinds["pods"],
            pod_groups=kinds["pod_groups"],
            queues=kinds["queues"],
            node_metrics=kinds["node_metrics"],
        )
        for pool, kinds in sorted(parts.items())
    }
