"""Two example user plugins, written against the public plugin API.

They are registered like any user plugin would be and serve as documented examples:

* ``spot-instance-manager`` keeps non-preemptible jobs off spot nodes (a scalar
  predicate) and scores regular nodes above spot nodes (a scalar node order);
* ``namespace-allocation-tracker`` counts pods placed per namespace through the
  allocate/deallocate event handlers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from kai.api.model import Job, Task
from kai.framework import Event, EventHandler, NodeInfo, Plugin, Session, register_plugin


class SpotInstancePlugin(Plugin):
    name = "spot-instance-manager"
    arguments = ("spotLabelKey", "spotLabelValue", "nonSpotScore")

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.spot_label_key = str(self.args.get("spotLabelKey", "kai.scheduler/instance-type"))
        self.spot_label_value = str(self.args.get("spotLabelValue", "spot"))
        self.non_spot_score = self.arg_float("nonSpotScore", 1000.0)

    def is_spot(self, node: NodeInfo) -> bool:
        return node.labels.get(self.spot_label_key) == self.spot_label_value

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: Task, job: Job, node: NodeInfo) -> str | None:
            if job.preemptible or not self.is_spot(node):
                return None
            return f"non-preemptible pod {task.key} cannot run on spot instance {node.name}"

        def node_order(task: Task, node: NodeInfo) -> float:
            return 0.0 if self.is_spot(node) else self.non_spot_score

        ssn.add_predicate_fn(predicate)
        ssn.add_node_order_fn(node_order)


class NamespaceAllocationTracker(Plugin):
    name = "namespace-allocation-tracker"

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.pods_per_namespace: Counter[str] = Counter()

    def on_session_open(self, ssn: Session) -> None:
        self.pods_per_namespace = Counter()

        def on_allocate(event: Event) -> None:
            self.pods_per_namespace[event.task.namespace] += 1

        def on_deallocate(event: Event) -> None:
            self.pods_per_namespace[event.task.namespace] -= 1

        ssn.add_event_handler(EventHandler(on_allocate, on_deallocate))
        ssn.cache[self.name] = self.pods_per_namespace


register_plugin("spot-instance-manager", SpotInstancePlugin)
register_plugin("namespace-allocation-tracker", NamespaceAllocationTracker)
