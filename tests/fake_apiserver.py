"""A small fake Kubernetes API server for the live-scheduler tests.

It serves just what ``kai run`` uses, on 127.0.0.1 with an ephemeral port: list and
watch (chunked JSON lines, a global resourceVersion like etcd's, 410 Gone on demand)
for the watched kinds, pods/binding, pods/eviction, pod delete, PodGroup merge patches
(metadata and status), pod patches (metadata, and status as a strategic merge patch
whose ``conditions`` merge by type), events and leases.  Owner kinds (ReplicaSet, Job,
...) are listed and watched metadata-only (``PartialObjectMetadata``) when the Accept
header asks for it.  Everything it was asked is recorded in ``requests`` (and the
headers in ``headers``) for assertions.  Watches poll a stop flag, so ``stop()`` ends
quickly.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.protobuf_wire import binding_from_protobuf

# plural -> (kind, apiVersion, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "nodes": ("Node", "v1", False),
    "pods": ("Pod", "v1", True),
    "podgroups": ("PodGroup", "scheduling.run.ai/v2alpha2", True),
    "queues": ("Queue", "scheduling.run.ai/v2", False),
    "priorityclasses": ("PriorityClass", "scheduling.k8s.io/v1", False),
    "nodemetrics": ("NodeMetric", "slo.koordinator.sh/v1alpha1", False),
    "leases": ("Lease", "coordination.k8s.io/v1", True),
    "events": ("Event", "v1", True),
    "replicasets": ("ReplicaSet", "apps/v1", True),
    "deployments": ("Deployment", "apps/v1", True),
    "statefulsets": ("StatefulSet", "apps/v1", True),
    "jobs": ("Job", "batch/v1", True),
    "jobsets": ("JobSet", "jobset.x-k8s.io/v1alpha2", True),
}
PLURAL_OF = {kind: plural for plural, (kind, _, _) in RESOURCES.items()}

_PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$"
)


def _merge(target: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _strategic_merge(target: dict, patch: dict) -> dict:
    """Enough of a strategic merge patch for pods: ``conditions`` merge by ``type``."""
    for key, value in patch.items():
        if key == "conditions" and isinstance(value, list):
            current = {c.get("type"): c for c in target.get(key) or []}
            for cond in value:
                current[cond.get("type")] = _merge(current.get(cond.get("type"), {}), cond)
            target[key] = list(current.values())
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _strategic_merge(target[key], value)
        elif value is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _metadata_only(obj: dict) -> dict:
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": copy.deepcopy(obj["metadata"]),
    }


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


_UNSUPPORTED = object()


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.rv = 100
        self.objects: dict[tuple[str, str | None, str], dict] = {}
        self.log: list[tuple[int, str, str, dict]] = []  # (rv, plural, type, object)
        self.requests: list[tuple[str, str, Any]] = []  # (method, path, body)
        self.headers: list[tuple[str, str, dict]] = []  # (method, path, headers)
        self.fail: dict[tuple[str, str], int] = {}  # (verb, ns/name) -> HTTP status
        # Called with (namespace, name) as each bind arrives, before it is answered: a
        # test may hold it there, as a slow API server would.
        self.on_bind: Callable[[str, str], None] | None = None
        # ns/name of pods whose next bind goes through but is answered 503, as a bind
        # whose answer was lost on the way back.
        self.lose_bind_answer: set[str] = set()
        self.gone_next_watch: set[str] = set()  # plurals whose next watch gets 410
        self.not_served: set[str] = set()  # plurals answered 404, as an absent CRD
        self.protobuf = True  # False: protobuf bodies answered 415, as a CRD server does
        self.list_count: dict[str, int] = {}
        self.watch_count: dict[str, int] = {}
        self.stopping = False
        self.watch_generation = 0  # bumping it ends every open watch (as a timeout would)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        # Clients hanging up mid-request (closed watches, shutdown) are not test failures.
        self.httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def kubeconfig(self) -> str:
        return (
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: fake\n  user:\n    token: fake-token\n"
            "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
        )

    # ------------------------------------------------------------------ store
    def _key(self, plural: str, obj: dict) -> tuple[str, str | None, str]:
        meta = obj["metadata"]
        ns = meta.get("namespace") or ("default" if RESOURCES[plural][2] else None)
        return plural, ns, meta["name"]

    def _record(self, plural: str, type_: str, obj: dict) -> None:
        self.log.append((self.rv, plural, type_, copy.deepcopy(obj)))
        self.lock.notify_all()

    def put(self, obj: dict) -> dict:
        """Create or replace an object (as a controller or user would)."""
        plural = PLURAL_OF[obj["kind"]]
        with self.lock:
            obj = copy.deepcopy(obj)
            self.rv += 1
            meta = obj.setdefault("metadata", {})
            if RESOURCES[plural][2]:
                meta.setdefault("namespace", "default")
            meta.setdefault("uid", f"uid-{plural}-{meta['name']}")
            meta["resourceVersion"] = str(self.rv)
            key = self._key(plural, obj)
            existed = key in self.objects
            self.objects[key] = obj
            self._record(plural, "MODIFIED" if existed else "ADDED", obj)
            return copy.deepcopy(obj)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        plural = PLURAL_OF[kind]
        with self.lock:
            obj = self.objects.pop((plural, namespace, name), None)
            if obj is not None:
                self.rv += 1
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self._record(plural, "DELETED", obj)

    def end_watches(self) -> None:
        with self.lock:
            self.watch_generation += 1
            self.lock.notify_all()

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        with self.lock:
            obj = self.objects.get((PLURAL_OF[kind], namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def calls(self, method: str, contains: str = "") -> list[tuple[str, str, Any]]:
        with self.lock:
            return [r for r in self.requests if r[0] == method and contains in r[1]]

    def events(self) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for (p, _, _), o in self.objects.items() if p == "events"]

    def wait_for(self, predicate: Any, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        return bool(predicate())

    # ------------------------------------------------------------------ HTTP
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle on, the body of an answer
            # on a kept-alive connection waits ~40 ms for the client's delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if raw and "protobuf" in (self.headers.get("Content-Type") or ""):
                    return binding_from_protobuf(raw) if server.protobuf else _UNSUPPORTED
                return json.loads(raw) if raw else None

            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                body = self._body()  # DELETE may carry DeleteOptions: read it too
                with server.lock:
                    server.requests.append((method, url.path, body))
                    server.headers.append((method, url.path, dict(self.headers.items())))
                if body is _UNSUPPORTED:
                    self._send(415, _status(415, "UnsupportedMediaType", "protobuf"))
                    return
                m = _PATH.match(url.path)
                if not m or m["plural"] not in RESOURCES:
                    self._send(404, _status(404, "NotFound", f"no route {url.path}"))
                    return
                try:
                    server._serve(
                        self, method, m["plural"], m["ns"], m["name"], m["sub"], query, body
                    )
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_PUT(self) -> None:
                self._dispatch("PUT")

            def do_PATCH(self) -> None:
                self._dispatch("PATCH")

            def do_DELETE(self) -> None:
                self._dispatch("DELETE")

        return Handler

    def _serve(
        self,
        h: Any,
        method: str,
        plural: str,
        ns: str | None,
        name: str | None,
        sub: str | None,
        query: dict,
        body: Any,
    ) -> None:
        kind, api_version, namespaced = RESOURCES[plural]
        if plural in self.not_served:
            h._send(404, _status(404, "NotFound", "the server could not find the resource"))
            return
        target = f"{ns}/{name}" if ns else str(name)
        if sub == "binding" and method == "POST" and self.on_bind is not None:
            self.on_bind(str(ns), str(name))
        injected = self.fail.get((sub or method.lower(), target))
        if injected:
            h._send(injected, _status(injected, "InternalError", "injected failure"))
            return
        if method == "GET" and name is None:
            meta_only = "as=PartialObjectMetadata" in (h.headers.get("Accept") or "")
            if (query.get("watch") or "").lower() in ("true", "1", "t"):  # Go ParseBool
                self._watch(h, plural, query, meta_only)
            else:
                self._list(h, plural, ns, api_version, kind, meta_only)
            return
        with self.lock:
            if method == "GET":
                obj = self.objects.get((plural, ns, name))
                if obj is None:
                    h._send(404, _status(404, "NotFound", f"{plural} {target} not found"))
                else:
                    h._send(200, obj)
                return
            if method == "POST" and name is None:
                self._create(h, plural, ns, kind, api_version, body)
                return
            key = (plural, ns, name)
            obj = self.objects.get(key)
            if obj is None:
                h._send(404, _status(404, "NotFound", f"{plural} {target} not found"))
                return
            if sub == "binding" and method == "POST":
                if node := obj["spec"].get("nodeName"):
                    # The real API server's words: a retried bind reads the node in them.
                    message = (
                        f'Operation cannot be fulfilled on pods/binding "{name}": '
                        f'pod {name} is already assigned to node "{node}"'
                    )
                    h._send(409, _status(409, "Conflict", message))
                    return
                obj["spec"]["nodeName"] = body["target"]["name"]
                self._bump(plural, obj)
                if target in self.lose_bind_answer:
                    self.lose_bind_answer.discard(target)  # bound, but the answer is lost
                    h._send(503, _status(503, "ServiceUnavailable", "answer lost"))
                    return
                h._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
            elif sub == "eviction" and method == "POST" or method == "DELETE":
                self.rv += 1
                del self.objects[key]
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self._record(plural, "DELETED", obj)
                h._send(201 if sub else 200, {"kind": "Status", "status": "Success"})
            elif method == "PATCH":
                strategic = "strategic-merge-patch" in (h.headers.get("Content-Type") or "")
                merge = _strategic_merge if strategic else _merge
                if sub == "status":
                    obj["status"] = merge(obj.get("status") or {}, body.get("status") or {})
                else:
                    merge(obj, {k: v for k, v in body.items() if k != "status"})
                self._bump(plural, obj)
                h._send(200, obj)
            elif method == "PUT":
                if body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                    h._send(409, _status(409, "Conflict", "the object has been modified"))
                    return
                body["metadata"]["namespace"] = ns
                self.objects[key] = body
                self._bump(plural, body)
                h._send(200, body)
            else:
                h._send(405, _status(405, "MethodNotAllowed", method))

    def _bump(self, plural: str, obj: dict) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._record(plural, "MODIFIED", obj)

    def _create(
        self, h: Any, plural: str, ns: str | None, kind: str, api_version: str, body: dict
    ) -> None:
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self.rv + 1:x}"
        meta["namespace"] = ns
        key = (plural, ns, meta["name"])
        if key in self.objects:
            h._send(409, _status(409, "AlreadyExists", f"{plural} {meta['name']} exists"))
            return
        body.setdefault("kind", kind)
        body.setdefault("apiVersion", api_version)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{plural}-{meta['name']}")
        self.objects[key] = body
        self._record(plural, "ADDED", body)
        h._send(201, body)

    def _list(
        self,
        h: Any,
        plural: str,
        ns: str | None,
        api_version: str,
        kind: str,
        meta_only: bool = False,
    ) -> None:
        with self.lock:
            self.list_count[plural] = self.list_count.get(plural, 0) + 1
            items = [
                _metadata_only(o)
                if meta_only
                else {k: v for k, v in o.items() if k not in ("apiVersion", "kind")}
                for (p, o_ns, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
                if p == plural and (ns is None or o_ns == ns)
            ]
            if meta_only:
                api_version, kind = "meta.k8s.io/v1", "PartialObjectMetadata"
            body = {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        h._send(200, body)

    def _watch(self, h: Any, plural: str, query: dict, meta_only: bool = False) -> None:
        with self.lock:
            self.watch_count[plural] = self.watch_count.get(plural, 0) + 1
            gone = plural in self.gone_next_watch
            self.gone_next_watch.discard(plural)
            generation = self.watch_generation
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(event: dict) -> None:
            data = json.dumps(event).encode() + b"\n"
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        try:
            if gone:
                chunk({"type": "ERROR", "object": _status(410, "Expired", "too old resource")})
            else:
                since = int(query.get("resourceVersion") or 0)
                deadline = time.monotonic() + float(query.get("timeoutSeconds") or 60)
                while time.monotonic() < deadline:
                    with self.lock:
                        if self.stopping or self.watch_generation != generation:
                            break
                        pending = [e for e in self.log if e[0] > since and e[1] == plural]
                        if not pending:
                            self.lock.wait(0.05)
                            continue
                    for rv, _, type_, obj in pending:
                        chunk({"type": type_, "object": _metadata_only(obj) if meta_only else obj})
                        since = rv
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        h.close_connection = True
