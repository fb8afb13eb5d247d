"""An informer-style cache of the cluster: list, then watch from the list's resourceVersion.

One thread per kind keeps a store of raw object dicts up to date; a watch that ends by
timeout is reopened from the last resourceVersion seen, and a 410 Gone (the version fell
out of the API server's window) makes the thread list again.  ``snapshot()`` converts the
store into :class:`~kai.api.objects.ClusterObjects` for one scheduling cycle; converted
objects are kept per (object, resourceVersion), so only changed objects are parsed again.
An object that does not convert is reported and left out, never fatal.

Besides the scheduling kinds, the cache keeps the metadata of the pods' usual owners
(ReplicaSets, Deployments, StatefulSets, Jobs, and any ``extra_owner_kinds``); they go
into the snapshot as generic objects, through which the engine finds a pod's top owner
and its ``kai.scheduler/preemptibility`` label.  An owner kind the API server does not
serve (404) or does not let us read (403) is empty, as an absent CRD is.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from operator import methodcaller
from typing import Any

from kai._dataclasses import dataclass
from kai.api.errors import InputError
from kai.api.objects import ClusterObjects, NodeObject, PodObject, QueueObject
from kai.k8s.client import (
    KINDS,
    OWNER_KINDS,
    Kind,
    KubeClient,
    WatchStream,
    describe_error,
    status_of,
)
from kai.snapshot.loader import convert_object
from kai.snapshot.partition import pod_pools

log = logging.getLogger(__name__)


Key = tuple[str, str | None, str]  # (kind, namespace, name)


def object_key(kind: str, obj: dict) -> Key:
    meta = obj.get("metadata") or {}
    return kind, meta.get("namespace") or None, str(meta.get("name") or "")


# The tag of a pod whose bind is in flight: the observed version, assumed on its node.
BINDING_TAG = "~binding"


def _with_node(raw: dict, node: str | None) -> dict:
    """A copy of a pod with ``spec.nodeName`` set (or removed): only the two dicts on the
    way are copied, the rest is shared (stored objects are never changed in place)."""
    spec = {k: v for k, v in (raw.get("spec") or {}).items() if k != "nodeName"}
    if node is not None:
        spec["nodeName"] = node
    return {**raw, "spec": spec}


def _rv_int(obj: dict | None) -> int | None:
    rv = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    if rv is None:
        return None
    try:
        return int(rv)
    except (TypeError, ValueError):
        return None


@dataclass
class _Entry:
    raw: dict
    tag: str  # resourceVersion, or a local tag for an assumed (not yet observed) change


@dataclass
class BadObject:
    """An object left out of the snapshot, and why."""

    kind: str
    raw: dict
    error: str


@dataclass
class CacheSnapshot:
    objects: ClusterObjects
    bad: list[BadObject] = field(default_factory=list)
    # Raw dicts of the PodGroups and Pods in the snapshot, by "namespace/name".
    pod_groups: dict[str, dict] = field(default_factory=dict)
    pods: dict[str, dict] = field(default_factory=dict)


class ClusterCache:
    """Raw objects of the watched kinds, kept current by one informer thread per kind."""

    def __init__(
        self,
        client: KubeClient,
        kinds: Iterable[Kind] | None = None,
        *,
        extra_owner_kinds: Iterable[Kind] = (),
        nodepool_label_key: str = "kai.scheduler/node-pool",
        partition_label_value: str = "",
        watch_timeout: int = 300,
        retry_backoff: float = 1.0,
        max_retry_backoff: float = 30.0,
        missing_crd_retry: float = 60.0,
    ) -> None:
        self.client = client
        if kinds is None:
            kinds = [*KINDS.values(), *OWNER_KINDS]
        self.kinds = list(kinds)
        for extra in extra_owner_kinds:
            if all(k.name != extra.name for k in self.kinds):
                self.kinds.append(extra)
        self.nodepool_label_key = nodepool_label_key
        self.partition_label_value = partition_label_value
        self.watch_timeout = watch_timeout
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max(retry_backoff, max_retry_backoff)
        self._backoff = {k.name: retry_backoff for k in self.kinds}
        # Every informer fails at once when the API server is unreachable: one line per
        # retry interval says so, not one per kind and attempt.
        self._unreachable_quiet_until = 0.0
        self.missing_crd_retry = missing_crd_retry
        self._lock = threading.RLock()
        self._store: dict[str, dict[Key, _Entry]] = {k.name: {} for k in self.kinds}
        self._converted: dict[Key, tuple[str, Any]] = {}
        self._synced = {k.name: threading.Event() for k in self.kinds}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._streams: dict[str, WatchStream] = {}
        self._assume_seq = 0
        # Pods handed to the binder and not yet seen bound: (namespace, name) -> node.
        # A watch event of such a pod without a node (a label or status write) must not
        # make the next cycle decide on it again, as kube-scheduler's assumed pods.
        self._binding: dict[tuple[str | None, str], str] = {}
        self.relists: dict[str, int] = {k.name: 0 for k in self.kinds}
        self.errors: dict[str, int] = {k.name: 0 for k in self.kinds}
        self.on_relist: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for kind in self.kinds:
            t = threading.Thread(target=self._run, args=(kind,), name=f"informer-{kind.name}")
            t.daemon = True
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            s.close()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for ev in self._synced.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not ev.wait(left):
                return False
        return True

    @property
    def synced(self) -> bool:
        return all(ev.is_set() for ev in self._synced.values())

    # ------------------------------------------------------------------ informer loop
    def _run(self, kind: Kind) -> None:
        first = True
        while not self._stop.is_set():
            if not first:
                self.relists[kind.name] += 1
                if self.on_relist is not None:
                    self.on_relist(kind.name)
            first = False
            try:
                items, rv = self.client.list(kind)
            except Exception as err:  # noqa: BLE001 - keep the informer alive
                code = status_of(err)
                missing = code == 404 and kind.group not in ("", "scheduling.k8s.io")
                if missing or (code == 403 and kind.metadata_only):
                    # The CRD is not installed (NodeMetric without Koordinator), or an
                    # owner kind we may not read: schedule without it and look again later.
                    if not self._synced[kind.name].is_set():
                        why = "not served (CRD not installed)" if missing else "forbidden (RBAC)"
                        log.warning("%s is %s; going on without it", kind.name, why)
                    self._replace(kind, [])
                    self._synced[kind.name].set()
                    self._stop.wait(self.missing_crd_retry)
                    continue
                self._failed(kind, "list", err)
                continue
            self._replace(kind, items)
            self._synced[kind.name].set()
            self._backoff[kind.name] = self.retry_backoff
            try:
                self._watch_loop(kind, rv)
            except Exception as err:  # noqa: BLE001
                if status_of(err) == 410:
                    log.info("watch %s: resourceVersion expired (410); listing again", kind.name)
                    continue
                self._failed(kind, "watch", err)

    def _failed(self, kind: Kind, what: str, err: BaseException) -> None:
        if self._stop.is_set():
            return
        self.errors[kind.name] += 1
        wait = self._backoff[kind.name]
        # Exponential backoff while the failures last, as client-go's reflector does.
        self._backoff[kind.name] = min(self.max_retry_backoff, wait * 2)
        if status_of(err) == 0:
            with self._lock:
                now = time.monotonic()
                quiet = now < self._unreachable_quiet_until
                if not quiet:
                    self._unreachable_quiet_until = now + 0.9 * wait
            if not quiet:
                host = getattr(self.client, "server", "the API server")
                log.warning(
                    "cannot reach %s (%s); retrying in %.0fs", host, describe_error(err), wait
                )
        else:
            log.warning(
                "%s %s failed: %s; retrying in %.1fs", what, kind.name, describe_error(err), wait
            )
        self._stop.wait(wait)

    def _watch_loop(self, kind: Kind, rv: str) -> None:
        """Watch until 410 Gone (return: list again) or stop; reopen on timeouts."""
        while not self._stop.is_set():
            stream = self.client.watch(kind, rv, timeout_seconds=self.watch_timeout)
            with self._lock:
                self._streams[kind.name] = stream
            if self._stop.is_set():
                stream.close()
                return
            try:
                for type_, obj in stream:
                    if type_ == "ERROR":
                        code = obj.get("code")
                        if code == 410:
                            log.info("watch %s: 410 Gone; listing again", kind.name)
                            return
                        raise RuntimeError(f"watch error {code}: {obj.get('message')}")
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if type_ != "BOOKMARK":
                        self._apply(kind, type_, obj)
                    if new_rv:
                        rv = str(new_rv)
            finally:
                stream.close()
                with self._lock:
                    self._streams.pop(kind.name, None)

    # ------------------------------------------------------------------ store
    def _replace(self, kind: Kind, items: list[dict]) -> None:
        fresh = {}
        with self._lock:
            for obj in items:
                key = object_key(kind.name, obj)
                fresh[key] = self._entry(kind.name, key, obj)
            self._store[kind.name] = fresh

    def _apply(self, kind: Kind, type_: str, obj: dict) -> None:
        key = object_key(kind.name, obj)
        with self._lock:
            store = self._store[kind.name]
            if type_ == "DELETED":
                store.pop(key, None)
                self._binding.pop((key[1], key[2]), None)
            elif type_ in ("ADDED", "MODIFIED"):
                store[key] = self._entry(kind.name, key, obj)

    def _entry(self, kind: str, key: Key, obj: dict) -> _Entry:
        """The stored form of an observed object: a pod whose bind is in flight keeps its
        assumed node until the API server reports it bound (or the bind fails)."""
        tag = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if kind == "Pod" and self._binding:
            pod = (key[1], key[2])
            node = self._binding.get(pod)
            if node is not None:
                if (obj.get("spec") or {}).get("nodeName"):
                    del self._binding[pod]  # observed bound: the assumption is done
                else:
                    obj = _with_node(obj, node)
                    tag += BINDING_TAG
        return _Entry(obj, tag)

    def assume_bound(self, namespace: str, name: str, node: str) -> None:
        """A pod handed to the binder counts as bound to ``node`` from now on."""
        with self._lock:
            self._binding[(namespace, name)] = node
            key = ("Pod", namespace, name)
            entry = self._store.get("Pod", {}).get(key)
            if entry is not None:
                self._store["Pod"][key] = self._entry("Pod", key, entry.raw)

    def forget_bound(self, namespace: str, name: str) -> None:
        """The bind failed: the pod is pending again in the next snapshot."""
        with self._lock:
            if self._binding.pop((namespace, name), None) is None:
                return
            key = ("Pod", namespace, name)
            entry = self._store.get("Pod", {}).get(key)
            if entry is not None and entry.tag.endswith(BINDING_TAG):
                raw = _with_node(entry.raw, None)
                self._store["Pod"][key] = _Entry(raw, entry.tag.removesuffix(BINDING_TAG))

    @property
    def binds_in_flight(self) -> int:
        with self._lock:
            return len(self._binding)

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        with self._lock:
            entry = self._store.get(kind, {}).get((kind, namespace, name))
            return entry.raw if entry is not None else None

    def count(self, kind: str) -> int:
        with self._lock:
            return len(self._store.get(kind, {}))

    def assume(
        self, kind: str, namespace: str | None, name: str, mutate: Callable[[dict], bool]
    ) -> bool:
        """Apply a change we made (a bind, an eviction) before the watch reports it, so the
        next cycle does not decide on the same pod again.  ``mutate`` edits a copy and says
        whether the change still applies; the watch event that follows replaces the copy."""
        key = (kind, namespace, name)
        with self._lock:
            entry = self._store.get(kind, {}).get(key)
            if entry is None:
                return False
            raw = copy.deepcopy(entry.raw)
            if not mutate(raw):
                return False
            self._assume_seq += 1
            self._store[kind][key] = _Entry(raw, f"{entry.tag}~assumed{self._assume_seq}")
            return True

    def observe_write(self, kind: str, obj: dict) -> None:
        """Store an object the API server returned from a write, unless the watch already
        brought a newer version."""
        if not obj or not (obj.get("metadata") or {}).get("name"):
            return
        obj.setdefault("apiVersion", KINDS[kind].api_version if kind in KINDS else "v1")
        obj.setdefault("kind", kind)
        key = object_key(kind, obj)
        with self._lock:
            store = self._store.get(kind)
            if store is None:
                return
            current = store.get(key)
            new_rv, cur_rv = _rv_int(obj), _rv_int(current.raw if current else None)
            if current is not None and new_rv is not None and cur_rv is not None:
                if new_rv <= cur_rv:
                    return
            store[key] = _Entry(obj, str((obj.get("metadata") or {}).get("resourceVersion")))

    # ------------------------------------------------------------------ snapshot
    def _in_partition(self, labels: Mapping[str, str] | None) -> bool:
        return (labels or {}).get(self.nodepool_label_key) == self._partition_value()

    def snapshot(self) -> CacheSnapshot:
        """Typed objects of this cycle (this shard's only), and those left out as bad."""
        with self._lock:
            entries = [(k, key, e) for k, s in self._store.items() for key, e in s.items()]
        bad: list[BadObject] = []
        typed: dict[str, list[tuple[dict, Any]]] = {k.name: [] for k in self.kinds}
        seen: set[Key] = set()
        for kind, key, entry in entries:
            seen.add(key)
            cached = self._converted.get(key)
            if (
                cached is not None
                and entry.tag == cached[0] + BINDING_TAG
                and isinstance(cached[1], PodObject)
            ):
                # Handed to the binder: the same pod, on its node (no second parse).
                node = entry.raw["spec"]["nodeName"]
                cached = (entry.tag, dataclasses.replace(cached[1], node_name=node))
                self._converted[key] = cached
            elif cached is None or cached[0] != entry.tag:
                try:
                    value: Any = convert_object(entry.raw, file=f"{kind} from the API")
                except InputError as err:
                    value = err
                except Exception as err:  # noqa: BLE001 - one object never stops a cycle
                    value = InputError(f"{type(err).__name__}: {err}")
                if (
                    cached is not None
                    and isinstance(value, NodeObject)
                    and isinstance(cached[1], NodeObject)
                    and value == cached[1]
                ):
                    # A kubelet's status update that changes nothing kai reads (a
                    # heartbeat): the same object, so the node statics built from it hold.
                    value = cached[1]
                cached = (entry.tag, value)
                self._converted[key] = cached
            if isinstance(cached[1], InputError):
                bad.append(BadObject(kind, entry.raw, str(cached[1])))
            elif cached[1] is not None:
                typed[kind].append((entry.raw, cached[1]))
        for key in [k for k in self._converted if k not in seen]:
            del self._converted[key]
        return self._assemble(typed, bad)

    def _assemble(self, typed: dict[str, list[tuple[dict, Any]]], bad: list[BadObject]):
        out = ClusterObjects()
        snap = CacheSnapshot(out, bad)

        def sorted_items(kind: str) -> list[tuple[dict, Any]]:
            # A stable order makes the sessions deterministic for one cluster state.
            items = typed.get(kind, [])
            return sorted(items, key=lambda it: (getattr(it[1], "namespace", "") or "", it[1].name))

        key = self.nodepool_label_key
        nodes: dict[str, NodeObject] = {}
        node_pool: dict[str, str | None] = {}  # every node's pool, for the pods'
        for _, node in sorted_items("Node"):
            node_pool[node.name] = node.labels.get(key)
            if self._in_partition(node.labels):
                nodes[node.name] = node
        out.nodes = list(nodes.values())
        out.other_pool_nodes = frozenset(node_pool).difference(nodes)
        groups_all = {}
        for raw, pg in sorted_items("PodGroup"):
            groups_all[(pg.namespace, pg.name)] = (raw, pg)
        kept_groups = {k: v for k, v in groups_all.items() if self._in_partition(v[1].labels)}
        out.pod_groups = [pg for _, pg in kept_groups.values()]
        snap.pod_groups = {f"{ns}/{name}": raw for (ns, name), (raw, _) in kept_groups.items()}
        out.queues = self._valid_queues(
            [(raw, q) for raw, q in sorted_items("Queue") if self._in_partition(q.labels)], bad
        )
        out.priority_classes = [pc for _, pc in sorted_items("PriorityClass")]
        out.node_metrics = [m for _, m in sorted_items("NodeMetric") if m.name in nodes]
        # Owners are not split by node pool: a pod anywhere may point at any of them.
        for kind in self.kinds:
            if kind.metadata_only:
                out.others.extend(obj for _, obj in sorted_items(kind.name))
        # Each pod's pools as partition() finds them (kai.snapshot.partition.pod_pools):
        # one of this shard's pods, or an occupant of one of its nodes.
        group_pool = {name: pg.labels.get(key) for name, (_, pg) in groups_all.items()}
        mine, pool_of = self._partition_value(), methodcaller("get", key)
        for raw, pod in sorted_items("Pod"):
            pool, holding = pod_pools(pod, node_pool, group_pool, pool_of, key)
            if pool == mine:
                out.pods.append(pod)
                snap.pods[pod.key] = raw
            elif mine in holding:
                out.occupants.append(pod)
        return snap

    def _partition_value(self) -> str | None:
        """This shard's value of the node-pool label (None: the label absent)."""
        return self.partition_label_value or None

    @staticmethod
    def _valid_queues(items: list[tuple[dict, QueueObject]], bad: list[BadObject]):
        """Queues whose parent chain reaches a root; the others are reported and left out
        (a whole-cluster error in a file, but one bad queue must not stop scheduling)."""
        by_name = {q.name: (raw, q) for raw, q in items}
        ok: dict[str, bool] = {}

        def check(name: str) -> bool:
            path: list[str] = []
            cur: str | None = name
            result = True
            while cur is not None:
                if cur in ok:
                    result = ok[cur]
                    break
                if cur not in by_name or cur in path:
                    result = False
                    break
                path.append(cur)
                cur = by_name[cur][1].parent
            for p in path:
                ok[p] = result
            return result

        out = []
        for raw, q in items:
            if check(q.name):
                out.append(q)
            else:
                why = (
                    f"parent queue {q.parent!r} does not exist"
                    if q.parent not in by_name
                    else "the queue's parent chain has a cycle or a bad ancestor"
                )
                bad.append(BadObject("Queue", raw, why))
        return out
