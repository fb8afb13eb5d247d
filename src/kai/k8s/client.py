"""A thin wrapper over the official ``kubernetes`` client for what the live scheduler does.

Reads (list, watch) return the API server's JSON as plain dicts (camelCase, exactly what
:mod:`kai.snapshot.loader` reads): every call passes ``_preload_content=False`` so the
client's typed models, and their slow snake_case round trip, are never built.  That also
sidesteps the client's known bug on ``create_namespaced_pod_binding``, whose response is a
``Status`` that fails to deserialize as a ``V1Binding`` (``target`` must not be None).

Only arguments every client since ``kubernetes`` 28 accepts are passed (``_content_type``
and ``_headers`` came with the regenerated client of 36/37; older ones reject them):

* patches rely on the client's default content type: a JSON merge patch for custom
  objects (PodGroups), and for a dict body on a built-in kind (pods) the client turns its
  default JSON-patch type into a strategic merge patch, which merges ``status.conditions``
  by type as kube-scheduler's own patches do;
* the owner kinds are listed metadata-only (``PartialObjectMetadata``) when the client
  takes ``_headers``, else as full objects, of which the cache keeps the metadata only.

Every request of a :class:`KubeClient` first takes a token from one bucket (``qps``,
``burst``), as client-go's client-side rate limiter does.  Lease calls take theirs without
waiting: kube-scheduler gives its election a client of its own for the same reason, so
that a long queue of binds never makes the leader miss its renew deadline.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from kai.k8s.connections import DirectConnections

log = logging.getLogger(__name__)

__all__ = [
    "ApiException",
    "Kind",
    "KINDS",
    "OWNER_KINDS",
    "KubeClient",
    "KubeConfigError",
    "TokenBucket",
    "describe_error",
    "load_configuration",
    "parse_owner_resource",
    "status_of",
]

# The API server answers with only the objects' metadata for these Accept headers (and
# with full objects, the fallback after the comma, where it cannot).  A list must ask for
# the list type: asking a list for PartialObjectMetadata is answered 406 Not Acceptable.
# A watch streams single objects, so it asks for the object type.
METADATA_ONLY_LIST_ACCEPT = (
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
METADATA_ONLY_WATCH_ACCEPT = (
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)


@dataclass(frozen=True)
class Kind:
    """One kind the scheduler watches."""

    name: str  # Pod
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    # An owner kind: only its metadata is read (for ownerReferences and labels).
    metadata_only: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("Node", "", "v1", "nodes", False),
        Kind("Pod", "", "v1", "pods", True),
        Kind("PodGroup", "scheduling.run.ai", "v2alpha2", "podgroups", True),
        Kind("Queue", "scheduling.run.ai", "v2", "queues", False),
        Kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False),
        Kind("NodeMetric", "slo.koordinator.sh", "v1alpha1", "nodemetrics", False),
    )
}
POD_GROUP = KINDS["PodGroup"]

# The usual top owners of pods, read for the kai.scheduler/preemptibility label.
OWNER_KINDS: tuple[Kind, ...] = (
    Kind("ReplicaSet", "apps", "v1", "replicasets", True, True),
    Kind("Deployment", "apps", "v1", "deployments", True, True),
    Kind("StatefulSet", "apps", "v1", "statefulsets", True, True),
    Kind("Job", "batch", "v1", "jobs", True, True),
)


def parse_owner_resource(spec: str) -> Kind:
    """An extra owner kind from ``GROUP/VERSION/RESOURCE[=Kind]`` (``--owner-resources``),
    e.g. ``jobset.x-k8s.io/v1alpha2/jobsets=JobSet``.  Without ``=Kind`` the kind is
    guessed from the resource (owners are found by uid, so the guess rarely matters)."""
    path, _, kind = spec.strip().partition("=")
    parts = path.strip().strip("/").split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"owner resource {spec!r}: expected GROUP/VERSION/RESOURCE[=Kind]")
    group, version, plural = parts
    kind = kind.strip()
    if not kind:
        singular = plural[:-1] if plural.endswith("s") else plural
        kind = singular[:1].upper() + singular[1:]
    return Kind(kind, group, version, plural, True, True)


class KubeConfigError(Exception):
    """No usable Kubernetes client configuration; the message names what was tried."""


def load_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> tuple[k8s.Configuration, str]:
    """A client configuration and a description of where it came from.

    The order is kubectl's and client-go's: an explicit kubeconfig (or context), else the
    in-cluster service account, else ``$KUBECONFIG``, else ``~/.kube/config``.
    """
    cfg = k8s.Configuration()
    if kubeconfig or context:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        except (k8s_config.ConfigException, OSError, ValueError, TypeError) as err:
            raise KubeConfigError(f"cannot use kubeconfig {where}: {err}") from None
        return cfg, f"kubeconfig {where}" + (f", context {context}" if context else "")
    tried = []
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
            return cfg, "in-cluster service account"
        except k8s_config.ConfigException as err:
            tried.append(f"in-cluster ({err})")
    else:
        tried.append("in-cluster (KUBERNETES_SERVICE_HOST is not set)")
    env = os.environ.get("KUBECONFIG")
    home = os.path.expanduser("~/.kube/config")
    if not env:
        tried.append("$KUBECONFIG (not set)")
    candidates = [p for p in (env.split(os.pathsep) if env else []) if p] or [home]
    if env and not any(os.path.exists(p) for p in candidates):
        tried.append(f"$KUBECONFIG ({env}: no such file)")
        candidates = [home]
    if not os.path.exists(candidates[0]) and candidates == [home]:
        tried.append(f"~/.kube/config ({home}: no such file)")
        raise KubeConfigError("no Kubernetes configuration found; tried " + ", ".join(tried))
    try:
        k8s_config.load_kube_config(client_configuration=cfg)
    except (k8s_config.ConfigException, OSError, ValueError, TypeError) as err:
        label = "$KUBECONFIG" if env and candidates != [home] else "~/.kube/config"
        tried.append(f"{label} ({err})")
        tried_all = ", ".join(tried)
        raise KubeConfigError(f"no usable Kubernetes configuration; tried {tried_all}") from None
    label = f"$KUBECONFIG {env}" if env and candidates != [home] else f"kubeconfig {home}"
    try:
        _, active = k8s_config.list_kube_config_contexts()
        label += f", context {active['name']}"
    except Exception:  # noqa: BLE001 - only for the description
        pass
    return cfg, label


def describe_error(err: BaseException) -> str:
    """A one-line account of a failed request (urllib3 nests the cause several deep)."""
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}".strip()
    cause: BaseException = err
    while True:
        inner = getattr(cause, "reason", None)
        if not isinstance(inner, BaseException):
            break
        cause = inner
    text = str(cause)
    # "<urllib3.connection.HTTPSConnection object at 0x..>: Failed to establish ..."
    if ">: " in text:
        text = text.split(">: ", 1)[1]
    return text.splitlines()[0][:300] if text else type(cause).__name__


def status_of(err: BaseException) -> int:
    """HTTP status of a client error; 0 for connection-level failures."""
    return int(getattr(err, "status", 0) or 0) if isinstance(err, ApiException) else 0


def _drain(resp: Any) -> None:
    """Read the rest of a raw response before its connection goes back to the pool:
    unread bytes would be taken for the start of the next response on it."""
    try:
        resp.read()
    finally:
        resp.release_conn()


class TokenBucket:
    """Client-side rate limiting shared by every request of a client: ``qps`` tokens a
    second, at most ``burst`` saved up.  A request takes a token, waiting for it when the
    bucket is empty (reservations may drive the count below zero: waiters queue up in
    order, like Go's ``rate.Limiter.Wait``).  ``qps <= 0`` turns the limit off."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds spent waiting, in total

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self, *, wait_for_it: bool = True) -> float:
        """Take a token, sleeping until it is due.  ``wait_for_it=False`` takes it without
        waiting (the lease's renewals: a queue of binds must not cost the leadership)."""
        wait = self.reserve()
        if wait > 0 and wait_for_it:
            self.waited += wait
            self._sleep(wait)
        return wait


def _json(resp: Any) -> Any:
    try:
        data = resp.data if hasattr(resp, "data") else resp.read()
        return json.loads(data) if data else {}
    finally:
        _drain(resp)


class KubeClient:
    """The API calls of the live scheduler, on one ``kubernetes.client.ApiClient``."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        request_timeout: float = 30.0,
        qps: float = 50.0,
        burst: int = 300,
    ) -> None:
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.scheduling = k8s.SchedulingV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.timeout = request_timeout
        self.limiter = TokenBucket(qps, burst)
        self.server = str(api_client.configuration.host)
        # Binds skip the generated client's per-call machinery (see connections.py).
        self.direct = (
            DirectConnections(api_client, request_timeout)
            if DirectConnections.usable(api_client)
            else None
        )
        self.source = "configuration given in code"
        # _headers (a metadata-only Accept) exists in the regenerated clients only.
        params = inspect.signature(self.custom.list_cluster_custom_object).parameters
        self.metadata_only_lists = "_headers" in params

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        qps_pool: int = 32,
        qps: float = 50.0,
        burst: int = 300,
    ) -> KubeClient:
        """The kubeconfig given, else the in-cluster config, else ``$KUBECONFIG`` or
        ``~/.kube/config``; :class:`KubeConfigError` says which sources were tried."""
        cfg, source = load_configuration(kubeconfig, context)
        client = cls.from_configuration(cfg, qps_pool=qps_pool, qps=qps, burst=burst)
        client.source = source
        return client

    @classmethod
    def from_configuration(
        cls,
        cfg: k8s.Configuration,
        *,
        qps_pool: int = 32,
        qps: float = 50.0,
        burst: int = 300,
    ) -> KubeClient:
        # Watches hold one connection each and binds run in parallel: a pool smaller than
        # that makes urllib3 open and discard connections with a warning each time.
        cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, qps_pool)
        return cls(k8s.ApiClient(cfg), qps=qps, burst=burst)

    @classmethod
    def for_host(cls, host: str, *, qps: float = 50.0, burst: int = 300) -> KubeClient:
        cfg = k8s.Configuration()
        cfg.host = host
        return cls.from_configuration(cfg, qps=qps, burst=burst)

    def close(self) -> None:
        if self.direct is not None:
            self.direct.close()
        self.api_client.close()

    # ------------------------------------------------------------------ list / watch
    def _list_call(self, kind: Kind, **kw: Any) -> Any:
        self.limiter.acquire()
        kw["_preload_content"] = False
        if kind.metadata_only and self.metadata_only_lists:
            accept = METADATA_ONLY_WATCH_ACCEPT if kw.get("watch") else METADATA_ONLY_LIST_ACCEPT
            kw["_headers"] = {"Accept": accept}
        if kind.name == "Pod":
            return self.core.list_pod_for_all_namespaces(**kw)
        if kind.name == "Node":
            return self.core.list_node(**kw)
        if kind.name == "PriorityClass":
            return self.scheduling.list_priority_class(**kw)
        # Namespaced CRDs too: the cluster-wide path lists every namespace.
        return self.custom.list_cluster_custom_object(kind.group, kind.version, kind.plural, **kw)

    def list(self, kind: Kind, *, page_size: int = 500) -> tuple[list[dict], str]:
        """All objects of a kind (paged), and the list's resourceVersion to watch from."""
        items: list[dict] = []
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"limit": page_size, "_request_timeout": self.timeout}
            if token:
                kw["_continue"] = token
            body = _json(self._list_call(kind, **kw))
            for item in body.get("items") or []:
                # List items omit apiVersion and kind; the loader needs them.
                items.append(_typed(item, kind))
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch(
        self, kind: Kind, resource_version: str, *, timeout_seconds: int = 300
    ) -> WatchStream:
        """Open a watch from ``resource_version``; iterate the stream for (type, object)."""
        resp = self._list_call(
            kind,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            # The read timeout only guards against a silently dead connection.
            _request_timeout=(self.timeout, timeout_seconds + 30),
        )
        return WatchStream(resp, kind)

    # ------------------------------------------------------------------ writes
    def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        metadata = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid  # refused if the pod was replaced under the same name
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.limiter.acquire()
        if self.direct is not None:
            path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
            self.direct.post(path + "/binding", body)
            return
        # _preload_content=False: the response is a Status, not a Binding (client bug).
        resp = self.core.create_namespaced_pod_binding(
            name,
            namespace,
            body,  # type: ignore[arg-type]  # a dict is sent as it is
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        _drain(resp)

    def evict(self, namespace: str, name: str) -> None:
        body = k8s.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        )
        self.limiter.acquire()
        resp = self.core.create_namespaced_pod_eviction(
            name, namespace, body, _preload_content=False, _request_timeout=self.timeout
        )
        _drain(resp)

    def delete_pod(self, namespace: str, name: str) -> None:
        self.limiter.acquire()
        resp = self.core.delete_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=self.timeout
        )
        _drain(resp)

    def patch_pod_group(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of a PodGroup's metadata/spec; returns the updated object.

        (Custom objects are patched as JSON merge patches by the client's default.)"""
        k = POD_GROUP
        self.limiter.acquire()
        return _json(
            self.custom.patch_namespaced_custom_object(
                k.group,
                k.version,
                namespace,
                k.plural,
                name,
                patch,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def patch_pod_group_status(self, namespace: str, name: str, status: dict) -> dict:
        k = POD_GROUP
        self.limiter.acquire()
        return _json(
            self.custom.patch_namespaced_custom_object_status(
                k.group,
                k.version,
                namespace,
                k.plural,
                name,
                {"status": status},
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def patch_pod(self, namespace: str, name: str, patch: dict) -> dict:
        """Strategic merge patch of a pod (metadata); returns the updated pod.

        A dict body on a built-in kind is sent as a strategic merge patch by every client
        version (see the module's docstring)."""
        self.limiter.acquire()
        return _json(
            self.core.patch_namespaced_pod(
                name, namespace, patch, _preload_content=False, _request_timeout=self.timeout
            )
        )

    def patch_pod_status(self, namespace: str, name: str, status: dict) -> dict:
        """Strategic merge patch of a pod's status subresource (``conditions`` merge by
        type); returns the updated pod."""
        self.limiter.acquire()
        return _json(
            self.core.patch_namespaced_pod_status(
                name,
                namespace,
                {"status": status},
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def create_event(
        self,
        involved: dict,
        *,
        reason: str,
        message: str,
        type_: str = "Normal",
        component: str = "kai-scheduler",
        instance: str = "",
        now: datetime | None = None,
    ) -> None:
        """A core/v1 Event about ``involved`` (apiVersion, kind, name, namespace, uid)."""
        now = now or datetime.now(timezone.utc)
        namespace = involved.get("namespace") or "default"
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{involved['name']}.", namespace=namespace),
            involved_object=k8s.V1ObjectReference(
                api_version=involved.get("apiVersion"),
                kind=involved.get("kind"),
                name=involved["name"],
                namespace=involved.get("namespace"),
                uid=involved.get("uid") or None,
            ),
            reason=reason,
            message=message[:1024],
            type=type_,
            count=1,
            first_timestamp=now,
            last_timestamp=now,
            source=k8s.V1EventSource(component=component),
            reporting_component=component,
            reporting_instance=instance or component,
        )
        self.limiter.acquire()
        resp = self.core.create_namespaced_event(
            namespace, body, _preload_content=False, _request_timeout=self.timeout
        )
        _drain(resp)

    # ------------------------------------------------------------------ leases
    def get_lease(self, namespace: str, name: str) -> dict | None:
        self.limiter.acquire(wait_for_it=False)
        try:
            resp = self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return _json(resp)

    def create_lease(self, namespace: str, lease: dict) -> dict:
        self.limiter.acquire(wait_for_it=False)
        resp = self.coordination.create_namespaced_lease(
            namespace, _lease_model(lease), _preload_content=False, _request_timeout=self.timeout
        )
        return _json(resp)

    def update_lease(self, namespace: str, lease: dict) -> dict:
        """Replace a Lease; its metadata.resourceVersion makes it a compare-and-swap."""
        name = lease["metadata"]["name"]
        self.limiter.acquire(wait_for_it=False)
        resp = self.coordination.replace_namespaced_lease(
            name,
            namespace,
            _lease_model(lease),
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        return _json(resp)


def _typed(obj: dict, kind: Kind) -> dict:
    """Give a listed or watched object its apiVersion and kind (list items have none); an
    owner keeps only its metadata (a metadata-only answer says PartialObjectMetadata)."""
    if kind.metadata_only:
        meta = dict(obj.get("metadata") or {})
        meta.pop("managedFields", None)
        real = obj.get("kind")
        if not real or real == "PartialObjectMetadata":
            real = kind.name
        return {"apiVersion": kind.api_version, "kind": real, "metadata": meta}
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.name)
    return obj


def _parse_micro(value: Any) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    from kai.api.quantity import parse_time

    return parse_time(str(value))


def _lease_model(lease: dict) -> k8s.V1Lease:
    meta = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    return k8s.V1Lease(
        api_version="coordination.k8s.io/v1",
        kind="Lease",
        metadata=k8s.V1ObjectMeta(
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            resource_version=meta.get("resourceVersion"),
        ),
        spec=k8s.V1LeaseSpec(
            holder_identity=spec.get("holderIdentity"),
            lease_duration_seconds=spec.get("leaseDurationSeconds"),
            acquire_time=_parse_micro(spec.get("acquireTime")),
            renew_time=_parse_micro(spec.get("renewTime")),
            lease_transitions=spec.get("leaseTransitions"),
        ),
    )


def _shutdown_socket(resp: Any) -> None:
    """Shut down the socket under a urllib3 1.x / < 2.3 response (no ``shutdown()``)."""
    sock = getattr(getattr(resp, "_connection", None), "sock", None)
    if sock is None:  # through http.client's buffered reader
        raw = getattr(getattr(getattr(resp, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    if sock is not None:
        sock.shutdown(socket.SHUT_RDWR)


class WatchStream:
    """Iterates the events of one watch response; ``close()`` from another thread ends it."""

    def __init__(self, resp: Any, kind: Kind) -> None:
        self.resp = resp
        self.kind = kind
        self.closed = False

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        try:
            yield from self._events()
        except Exception:
            if self.closed:  # closed by us: the read error is how the stream ends
                return
            raise

    def _events(self) -> Iterator[tuple[str, dict]]:
        buffer = bytearray()
        for chunk in self.resp.stream(amt=None, decode_content=False):
            buffer.extend(chunk)
            while True:
                nl = buffer.find(b"\n")
                if nl < 0:
                    break
                line = bytes(buffer[:nl]).strip()
                del buffer[: nl + 1]
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    log.warning("watch %s: undecodable line dropped", self.kind.name)
                    continue
                obj = event.get("object") or {}
                if event.get("type") != "ERROR":
                    obj = _typed(obj, self.kind)
                yield str(event.get("type") or ""), obj

    def close(self) -> None:
        # shutdown() (urllib3 >= 2.3) unblocks a read in progress in another thread; with
        # an older urllib3 the socket itself is shut down, else close() would wait for the
        # blocked read, i.e. for the watch's timeout.
        self.closed = True
        shutdown = getattr(self.resp, "shutdown", None)
        try:
            if shutdown is not None:
                shutdown()
            else:
                _shutdown_socket(self.resp)
            self.resp.close()
        except Exception as err:  # noqa: BLE001 - closing a dead socket may fail
            log.debug("watch %s: closing the stream: %s", self.kind.name, err)
        finally:
            try:
                self.resp.release_conn()
            except Exception as err:  # noqa: BLE001 - the connection may be gone already
                log.debug("watch %s: releasing the connection: %s", self.kind.name, err)
