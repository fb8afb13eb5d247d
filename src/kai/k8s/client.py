"""The live scheduler's calls to the API server, as plain REST requests.

The official ``kubernetes`` package supplies the configuration (kubeconfig, in-cluster
service account, exec and token credentials) and the TLS-configured urllib3 pool; its
generated API classes are not used.  Importing them costs seconds at start-up, and
building their typed models per object is the slowest part of a call.  Reads return the
API server's JSON as plain dicts (camelCase, exactly what :mod:`kai.snapshot.loader`
reads); the owner kinds are listed metadata-only (``PartialObjectMetadata``).  Patches
name their content type: a JSON merge patch for custom objects (PodGroups), a strategic
merge patch for pods, which merges ``status.conditions`` by type as kube-scheduler's own
patches do.  Writes go out on keep-alive connections of their own
(:mod:`kai.k8s.connections`) where the configuration allows.

Every request of a :class:`KubeClient` first takes a token from one bucket (``qps``,
``burst``), as client-go's client-side rate limiter does.  Lease calls take theirs without
waiting: kube-scheduler gives its election a client of its own for the same reason, so
that a long queue of binds never makes the leader miss its renew deadline.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from kai._dataclasses import dataclass
from kai.k8s import protobuf
from kai.k8s.connections import (
    JSON,
    DirectConnections,
    Pipeline,
    PipelineRequest,
    api_error,
)

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
MERGE_PATCH = "application/merge-patch+json"  # custom objects (PodGroups)
# Built-in kinds (pods): merges lists such as status.conditions by key.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


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
        return orjson.loads(data) if data else {}
    finally:
        _drain(resp)


class KubeClient:
    """The API calls of the live scheduler, as plain REST requests with the credentials,
    TLS settings and connection pool of one ``kubernetes.client.ApiClient``."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        request_timeout: float = 30.0,
        qps: float = 50.0,
        burst: int = 300,
    ) -> None:
        self.api_client = api_client
        self.timeout = request_timeout
        self.limiter = TokenBucket(qps, burst)
        self.server = str(api_client.configuration.host).rstrip("/")
        self.source = "configuration given in code"
        # Writes on keep-alive connections of their own where they can (connections.py).
        self.direct = (
            DirectConnections(api_client, request_timeout)
            if DirectConnections.usable(api_client)
            else None
        )
        # Bindings go as protobuf (protobuf.py) unless the server refuses it.
        self._protobuf_binds = True

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
        # Watches hold one connection each and requests run in parallel: a pool smaller
        # than that makes urllib3 open and discard connections with a warning each time.
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

    # ------------------------------------------------------------------ requests
    def _headers(self, accept: str, content_type: str | None) -> dict[str, str]:
        headers = {**self.api_client.default_headers, "Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        # Asked per request: a token file or exec plugin may refresh it.
        for auth in self.api_client.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    def _open(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        """A request through the client's urllib3 pool (proxy and TLS as configured); the
        unread response, or :class:`ApiException` for an answer that is not 2xx."""
        url = self.server + path
        if query:
            url += "?" + urlencode({k: _query_value(v) for k, v in query.items()})
        timeout = self.timeout if timeout is None else timeout
        resp = self.api_client.rest_client.pool_manager.request(
            method,
            url,
            body=None if body is None else body if isinstance(body, bytes) else orjson.dumps(body),
            headers=self._headers(accept, content_type if body is not None else None),
            timeout=(
                urllib3.Timeout(connect=timeout[0], read=timeout[1])
                if isinstance(timeout, tuple)
                else urllib3.Timeout(total=timeout)
            ),
            preload_content=False,
        )
        if 200 <= resp.status < 300:
            return resp
        data = resp.read()
        resp.release_conn()
        raise api_error(resp.status, resp.reason, data, resp.headers)

    def _write(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> Any:
        """A write, on the keep-alive connections where possible; the answer's JSON."""
        self.limiter.acquire()
        if self.direct is not None:
            data = self.direct.request(method, path, body, content_type)
        else:
            resp = self._open(method, path, body=body, content_type=content_type)
            try:
                data = resp.read()
            finally:
                resp.release_conn()
        return orjson.loads(data) if data else {}

    # ------------------------------------------------------------------ list / watch
    def _list_call(self, kind: Kind, **query: Any) -> Any:
        self.limiter.acquire()
        timeout = query.pop("_request_timeout", None)
        accept = JSON
        if kind.metadata_only:
            accept = METADATA_ONLY_WATCH_ACCEPT if query.get("watch") else METADATA_ONLY_LIST_ACCEPT
        # Namespaced kinds too: the cluster-wide path lists every namespace.
        return self._open("GET", _collection(kind), query=query, accept=accept, timeout=timeout)

    def list(self, kind: Kind, *, page_size: int = 500) -> tuple[list[dict], str]:
        """All objects of a kind (paged), and the list's resourceVersion to watch from."""
        items: list[dict] = []
        token: str | None = None
        while True:
            query: dict[str, Any] = {"limit": page_size}
            if token:
                query["continue"] = token
            body = _json(self._list_call(kind, **query))
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
            resourceVersion=resource_version,
            allowWatchBookmarks=True,
            timeoutSeconds=timeout_seconds,
            # The read timeout only guards against a silently dead connection.
            _request_timeout=(self.timeout, timeout_seconds + 30),
        )
        return WatchStream(resp, kind)

    # ------------------------------------------------------------------ writes
    def bind_request(
        self, namespace: str, name: str, node: str, uid: str | None = None
    ) -> tuple[str, bytes, str]:
        """The path, body and content type of a bind of pod ``namespace/name`` to
        ``node`` (refused by the API server if ``uid`` is given and the pod of that name
        has another): protobuf, unless the server refused it."""
        path = _pod_path(namespace, name) + "/binding"
        if self._protobuf_binds:
            return path, protobuf.binding(namespace, name, node, uid), protobuf.PROTOBUF
        metadata = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid  # refused if the pod was replaced under the same name
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return path, orjson.dumps(body), JSON

    def protobuf_refused(self, err: BaseException, content_type: str) -> bool:
        """True when ``err`` answered a protobuf body with 415 Unsupported Media Type:
        the server takes no protobuf bindings, so binds go as JSON from now on (and this
        one must be sent again)."""
        if content_type != protobuf.PROTOBUF or status_of(err) != 415:
            return False
        if self._protobuf_binds:
            log.info("the API server takes no protobuf bindings; binding with JSON")
            self._protobuf_binds = False
        return True

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        """Bind and wait for the answer (see :meth:`bind_request`)."""
        while True:
            path, body, content_type = self.bind_request(namespace, name, node, uid)
            try:
                self._write("POST", path, body, content_type)
                return
            except ApiException as err:
                if not self.protobuf_refused(err, content_type):
                    raise

    def pipeline(
        self, width: int, take: Callable[[], PipelineRequest | None], *, name: str
    ) -> Pipeline | None:
        """Requests sent ``width`` at a time by one thread (:class:`Pipeline`), with this
        client's credentials and rate limit; None where the generated client must send
        them (:meth:`DirectConnections.usable`)."""
        if self.direct is None:
            return None
        return Pipeline(self.direct, width, take, reserve=self.limiter.reserve, name=name)

    def evict(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        self._write("POST", _pod_path(namespace, name) + "/eviction", body)

    def delete_pod(self, namespace: str, name: str) -> None:
        self._write("DELETE", _pod_path(namespace, name))

    def patch_pod_group(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of a PodGroup's metadata/spec; returns the updated object."""
        path = _object_path(POD_GROUP, namespace, name)
        return self._write("PATCH", path, patch, MERGE_PATCH)

    def patch_pod_group_status(self, namespace: str, name: str, status: dict) -> dict:
        path = _object_path(POD_GROUP, namespace, name) + "/status"
        return self._write("PATCH", path, {"status": status}, MERGE_PATCH)

    def patch_pod(self, namespace: str, name: str, patch: dict) -> dict:
        """Strategic merge patch of a pod (metadata); returns the updated pod."""
        return self._write("PATCH", _pod_path(namespace, name), patch, STRATEGIC_MERGE_PATCH)

    def patch_pod_status(self, namespace: str, name: str, status: dict) -> dict:
        """Strategic merge patch of a pod's status subresource (``conditions`` merge by
        type, as kube-scheduler's own patches do); returns the updated pod."""
        path = _pod_path(namespace, name) + "/status"
        return self._write("PATCH", path, {"status": status}, STRATEGIC_MERGE_PATCH)

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
        stamp = _rfc3339(now or datetime.now(timezone.utc))
        namespace = involved.get("namespace") or "default"
        reference = {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": involved["name"],
            "namespace": involved.get("namespace"),
            "uid": involved.get("uid") or None,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": {k: v for k, v in reference.items() if v},
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": instance or component,
        }
        self._write("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body)

    # ------------------------------------------------------------------ leases
    # Lease calls take their token without waiting (see the module's docstring) and go
    # through the pool, never queued behind binds on a busy connection.
    def _lease_call(self, method: str, path: str, body: dict | None = None) -> dict:
        self.limiter.acquire(wait_for_it=False)
        return _json(self._open(method, path, body=body))

    def get_lease(self, namespace: str, name: str) -> dict | None:
        try:
            return self._lease_call("GET", _lease_path(namespace, name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create_lease(self, namespace: str, lease: dict) -> dict:
        return self._lease_call("POST", _lease_path(namespace), _lease_body(lease))

    def update_lease(self, namespace: str, lease: dict) -> dict:
        """Replace a Lease; its metadata.resourceVersion makes it a compare-and-swap."""
        name = lease["metadata"]["name"]
        return self._lease_call("PUT", _lease_path(namespace, name), _lease_body(lease))


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _collection(kind: Kind) -> str:
    if kind.group:
        return f"/apis/{kind.group}/{kind.version}/{kind.plural}"
    return f"/api/{kind.version}/{kind.plural}"


def _object_path(kind: Kind, namespace: str, name: str) -> str:
    prefix = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    ns, obj = quote(namespace, safe=""), quote(name, safe="")
    return f"{prefix}/namespaces/{ns}/{kind.plural}/{obj}"


def _pod_path(namespace: str, name: str) -> str:
    return _object_path(KINDS["Pod"], namespace, name)


def _lease_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return path + (f"/{quote(name, safe='')}" if name else "")


def _lease_body(lease: dict) -> dict:
    meta = lease.get("metadata") or {}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if meta.get(k)},
        "spec": {k: v for k, v in (lease.get("spec") or {}).items() if v is not None},
    }


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        partial = b""  # the start of a line whose end has not come yet
        for chunk in self.resp.stream(amt=None, decode_content=False):
            # Split each chunk once (a chunk may carry many events) instead of cutting
            # a growing buffer line by line.
            lines = (partial + chunk if partial else chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                if not line or line.isspace():
                    continue
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
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
