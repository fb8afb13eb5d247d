"""A KWOK-like stand-in for the kubelets of a test cluster.

The control plane of the tests has no kubelet and no controller-manager, so this plays
their part for the objects the scheduler's work depends on, through the API server:

* a new Node is made Ready, and the ``node.kubernetes.io/not-ready`` taint that the
  admission chain gives it is removed;
* a bound pod (``spec.nodeName`` set, phase Pending) turns Running, with ``startTime``
  and a Ready condition;
* a terminating pod (``deletionTimestamp`` set, e.g. by the Eviction API) is deleted
  for good after ``termination_delay`` seconds, as a kubelet does once its containers
  stop.

It is test infrastructure, not part of the scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubelet:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        termination_delay: float = 0.0,
        run_pods: bool = True,
        workers: int = 8,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.termination_delay = termination_delay
        self.run_pods = run_pods
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kubelet")
        self._threads: list[threading.Thread] = []
        self._seen_ready: set[str] = set()
        self._deleting: set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> FakeKubelet:
        for target in (self._nodes, self._pods):
            thread = threading.Thread(target=self._forever, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _forever(self, loop) -> None:
        while not self._stop.is_set():
            try:
                loop()
            except Exception as err:  # noqa: BLE001 - the API server may be restarting
                if not self._stop.is_set():
                    log.debug("fake kubelet: %s; watching again", err)
                    self._stop.wait(0.5)

    def _watch(self, list_fn):
        listed = list_fn(_preload_content=True)
        yield from listed.items
        rv = listed.metadata.resource_version
        while not self._stop.is_set():
            w = watch.Watch()
            for event in w.stream(list_fn, resource_version=rv, timeout_seconds=5):
                if self._stop.is_set():
                    w.stop()
                    return
                obj = event["object"]
                rv = obj.metadata.resource_version
                if event["type"] in ("ADDED", "MODIFIED"):
                    yield obj

    # ------------------------------------------------------------------ nodes
    def _nodes(self) -> None:
        for node in self._watch(self.core.list_node):
            ready = any(
                c.type == "Ready" and c.status == "True" for c in (node.status.conditions or [])
            )
            tainted = any(t.key == NOT_READY_TAINT for t in (node.spec.taints or []))
            if not ready or tainted:
                self._pool.submit(self._make_ready, node.metadata.name)

    def _make_ready(self, name: str) -> None:
        try:
            node = self.core.read_node(name)
            taints = [t for t in (node.spec.taints or []) if t.key != NOT_READY_TAINT]
            if len(taints) != len(node.spec.taints or []):
                kept = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]
                self.core.patch_node(name, {"spec": {"taints": kept or None}})
            now = _now()
            conditions = [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ]
            self.core.patch_node_status(name, {"status": {"conditions": conditions}})
        except ApiException as err:
            if err.status != 404:
                log.warning("fake kubelet: node %s: %s", name, err.reason)

    # ------------------------------------------------------------------ pods
    def _pods(self) -> None:
        for pod in self._watch(self.core.list_pod_for_all_namespaces):
            meta, spec, status = pod.metadata, pod.spec, pod.status
            if meta.deletion_timestamp is not None:
                if spec.node_name:
                    self._finish_deletion(meta.namespace, meta.name, meta.uid)
                continue
            if self.run_pods and spec.node_name and (status.phase or "Pending") == "Pending":
                self._pool.submit(self._run, meta.namespace, meta.name)

    def _run(self, namespace: str, name: str) -> None:
        now = _now()
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ],
        }
        try:
            self.core.patch_namespaced_pod_status(name, namespace, {"status": status})
        except ApiException as err:
            if err.status != 404:
                log.warning("fake kubelet: pod %s/%s: %s", namespace, name, err.reason)

    def _finish_deletion(self, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            if uid in self._deleting:
                return
            self._deleting.add(uid)

        def delete() -> None:
            if self.termination_delay:
                time.sleep(self.termination_delay)
            try:
                self.core.delete_namespaced_pod(
                    name,
                    namespace,
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
                    ),
                )
            except ApiException as err:
                if err.status not in (404, 409):
                    log.warning("fake kubelet: deleting %s/%s: %s", namespace, name, err.reason)

        self._pool.submit(delete)
