"""The writes' keep-alive connections (credentials, errors, servers that hang up) and the
watch streams' line splitting."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from kai.k8s.client import KINDS, KubeClient, WatchStream, status_of
from kai.k8s.connections import DirectConnections
from tests.recording_server import RecordingServer, recording_server


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server() as srv:
        yield srv


def _client(server: RecordingServer, token: str = "secret") -> KubeClient:
    cfg = k8s.Configuration()
    cfg.host = server.url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return KubeClient.from_configuration(cfg, qps=0)


def test_a_bind_posts_the_binding_with_the_credentials(server: RecordingServer) -> None:
    client = _client(server)
    assert client.direct is not None
    client.bind("team-a", "train-0", "node-7", uid="u-1")
    (req,) = server.requests
    assert (req.method, req.path) == ("POST", "/api/v1/namespaces/team-a/pods/train-0/binding")
    assert req.headers["authorization"] == "Bearer secret"
    assert req.headers["Content-Type"] == "application/vnd.kubernetes.protobuf"
    assert req.body == {  # as read back from the protobuf wire format
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "train-0", "namespace": "team-a", "uid": "u-1"},
        "target": {"kind": "Node", "name": "node-7", "apiVersion": "v1"},
    }
    client.close()


def test_a_refused_write_raises_with_the_status_and_body(server: RecordingServer) -> None:
    server.answer = (409, {"kind": "Status", "reason": "Conflict", "message": "already"})
    client = _client(server)
    with pytest.raises(k8s.ApiException) as info:
        client.bind("team-a", "train-0", "node-7")
    assert status_of(info.value) == 409
    assert json.loads(info.value.body)["message"] == "already"
    client.close()


def test_a_connection_the_server_closed_is_replaced(server: RecordingServer) -> None:
    server.hang_up_after_answer = True
    client = _client(server)
    for i in range(5):
        client.bind("team-a", f"train-{i}", "node-7")
    assert [r.path.split("/")[6] for r in server.requests] == [f"train-{i}" for i in range(5)]
    client.close()


def test_patches_name_their_content_type(server: RecordingServer) -> None:
    client = _client(server)
    client.patch_pod("team-a", "train-0", {"metadata": {"labels": {"a": "b"}}})
    client.patch_pod_group("team-a", "train", {"metadata": {"annotations": {"a": "b"}}})
    types = [r.headers["Content-Type"] for r in server.requests]
    assert types == ["application/strategic-merge-patch+json", "application/merge-patch+json"]
    client.close()


def test_a_proxy_leaves_writes_to_the_pool() -> None:
    cfg = k8s.Configuration()
    cfg.host = "https://10.0.0.1:6443"
    cfg.proxy = "http://proxy.example:3128"
    assert not DirectConnections.usable(k8s.ApiClient(cfg))


def test_credentials_are_read_again_after_a_refusal_or_their_lifetime(
    server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Credentials are reused between requests (reading them may re-read a kubeconfig),
    # and read again once they are AUTH_TTL_SECONDS old or the server answered 401.
    import kai.k8s.connections as connections

    clock = [1000.0]
    monkeypatch.setattr(connections.time, "monotonic", lambda: clock[0])
    client = _client(server, token="old")
    cfg = client.direct._cfg
    asked = []
    hook = lambda c: asked.append(1)  # noqa: E731 - the generated client's refresh hook
    cfg.refresh_api_key_hook = hook
    client.bind("team-a", "p-0", "node-7")
    cfg.api_key = {"authorization": "new"}
    client.bind("team-a", "p-1", "node-7")
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer old"] * 2
    assert len(asked) == 1
    clock[0] += connections.AUTH_TTL_SECONDS
    client.bind("team-a", "p-2", "node-7")
    assert server.requests[-1].headers["authorization"] == "Bearer new"
    cfg.api_key = {"authorization": "newer"}
    server.answer = (401, {"kind": "Status", "reason": "Unauthorized"})
    with pytest.raises(k8s.ApiException):
        client.bind("team-a", "p-3", "node-7")
    server.answer = (200, {"kind": "Status", "status": "Success"})
    client.bind("team-a", "p-4", "node-7")
    assert server.requests[-1].headers["authorization"] == "Bearer newer"
    client.close()


class ScriptedServer:
    """Answers the requests of each connection with the next scripted raw answers."""

    def __init__(self, answers: list[bytes]) -> None:
        import socket
        import threading

        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                buf = b""
                while self.answers:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buf += data
                    if b"\r\n\r\n" not in buf:
                        break
                    head, _, rest = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    self.requests.append(head + b"\r\n\r\n" + rest[:length])
                    buf = rest[length:]
                    answer = self.answers.pop(0)
                    conn.sendall(answer)
                    if b"Connection: close" in answer or b"Content-Length" not in answer:
                        if b"chunked" not in answer:
                            break  # the server ends the connection after this answer

    def close(self) -> None:
        self.sock.close()


def _scripted_client(url: str) -> KubeClient:
    cfg = k8s.Configuration()
    cfg.host = url
    return KubeClient.from_configuration(cfg, qps=0)


def test_answers_in_every_framing_are_read_whole() -> None:
    # Chunked, after an informational answer, without a length (read until the server
    # closes), and one that closes the connection: each is read whole, and the next
    # request goes out on a fresh connection where the server closed it.
    body = b'{"kind":"Status","status":"Success"}'
    answers = [
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n" % (10, body[:10])
        + b"%x;ext=1\r\n%s\r\n" % (len(body) - 10, body[10:])
        + b"0\r\nTrailer: x\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body),
        b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (len(body), body),
        b"HTTP/1.0 201 Created\r\n\r\n" + body,
        b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\nAudit-Id: a-1\r\n\r\n{}",
    ]
    server = ScriptedServer(answers)
    client = _scripted_client(server.url)
    direct = client.direct
    assert direct is not None
    for i in range(4):
        assert direct.request("POST", f"/api/v1/x{i}", {"n": i}) == body
    with pytest.raises(k8s.ApiException) as info:
        direct.request("DELETE", "/api/v1/x4")
    assert info.value.status == 409 and info.value.body == "{}"
    assert info.value.headers["audit-id"] == "a-1"
    assert server.connections == 3  # kept alive, then anew after each close
    first, delete = server.requests[0], server.requests[-1]
    assert first.startswith(b"POST /api/v1/x0 HTTP/1.1\r\n")
    assert b"\r\nContent-Type: application/json\r\n" in first
    assert first.endswith(b'\r\nContent-Length: 7\r\n\r\n{"n":0}')
    assert b"Content-Length" not in delete and delete.startswith(b"DELETE /api/v1/x4 ")
    client.close()
    server.close()


def _pipelined(
    client: KubeClient, requests: list[tuple[str, str, object]], width: int, **kw: object
) -> list[tuple[bytes | None, BaseException | None]]:
    """Send requests through a pipeline of ``width``; each one's (body, error), in order."""
    import threading

    todo = list(enumerate(requests))
    outcomes: dict[int, tuple[bytes | None, BaseException | None]] = {}
    all_done = threading.Event()

    def take():  # noqa: ANN202
        if not todo:
            return None
        i, (method, path, body) = todo.pop(0)

        def done(data: bytes | None, err: BaseException | None) -> None:
            outcomes[i] = (data, err)
            if len(outcomes) == len(requests):
                all_done.set()

        return pipeline.request(method, path, body, "application/json", done)

    pipeline = client.pipeline(width, take, name="test-pipeline")
    assert pipeline is not None
    for key, value in kw.items():
        setattr(pipeline, key, value)
    pipeline.wake()
    assert all_done.wait(10)
    pipeline.close(1.0)
    return [outcomes[i] for i in range(len(requests))]


def test_a_pipeline_answers_every_request_with_its_own_outcome(server: RecordingServer) -> None:
    client = _client(server)
    requests = [("POST", f"/api/v1/namespaces/a/pods/p-{i}/binding", {"n": i}) for i in range(40)]
    outcomes = _pipelined(client, requests, width=4)
    assert all(
        err is None and json.loads(body or b"")["status"] == "Success" for body, err in outcomes
    )
    assert sorted(r.body["n"] for r in server.requests) == list(range(40))  # type: ignore[index]
    assert {r.headers["authorization"] for r in server.requests} == {"Bearer secret"}
    # A refusal is the request's own error, with the status and body.
    server.answer = (409, {"kind": "Status", "reason": "Conflict"})
    ((body, err),) = _pipelined(client, [("POST", "/api/v1/x", {})], width=2)
    assert body is None and status_of(err) == 409  # type: ignore[arg-type]
    client.close()


def test_a_pipeline_sends_again_what_a_closed_keep_alive_connection_lost(
    server: RecordingServer,
) -> None:
    server.hang_up_after_answer = True  # every idle connection is closed under it
    client = _client(server)
    requests = [("POST", f"/api/v1/x{i}", {"n": i}) for i in range(12)]
    outcomes = _pipelined(client, requests, width=3)
    assert [err for _, err in outcomes] == [None] * 12
    assert sorted(r.body["n"] for r in server.requests) == list(range(12))  # type: ignore[index]
    client.close()


def test_a_pipeline_reads_answers_in_every_framing() -> None:
    body = b'{"kind":"Status","status":"Success"}'
    answers = [
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body),
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body),
        b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (len(body), body),
        b"HTTP/1.0 201 Created\r\n\r\n" + body,
    ]
    server = ScriptedServer(answers)
    client = _scripted_client(server.url)
    outcomes = _pipelined(client, [("POST", f"/x{i}", {}) for i in range(4)], width=1)
    assert outcomes == [(body, None)] * 4
    assert server.connections == 2  # anew after the answer that closed the first
    client.close()
    server.close()


def test_a_pipeline_keeps_to_the_rate_limit_and_the_order() -> None:
    server = ScriptedServer([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"] * 6)
    client = _scripted_client(server.url)
    waits = iter([0.0, 0.1, 0.0, 0.2, 0.0, 0.0])
    start = time.monotonic()
    outcomes = _pipelined(
        client, [("POST", f"/x{i}", {}) for i in range(6)], width=1, _reserve=lambda: next(waits)
    )
    assert outcomes == [(b"{}", None)] * 6
    assert time.monotonic() - start >= 0.3  # each waited for its token
    assert [r.split(b" ")[1] for r in server.requests] == [f"/x{i}".encode() for i in range(6)]
    client.close()
    server.close()


def test_a_pipeline_gives_up_on_a_silent_server_and_on_closing() -> None:
    import socket
    import threading

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
    client = KubeClient(k8s.ApiClient(cfg), qps=0, request_timeout=0.2)
    ((body, err),) = _pipelined(client, [("POST", "/x", {})], width=1)
    assert body is None and isinstance(err, TimeoutError)
    # Closed with a request in flight: the request fails, it is not lost.
    failed = threading.Event()
    client = KubeClient(k8s.ApiClient(cfg), qps=0, request_timeout=30)
    sent = [False]

    def take():  # noqa: ANN202
        if sent[0]:
            return None
        sent[0] = True
        return pipeline.request("POST", "/y", {}, "application/json", lambda b, e: failed.set())

    pipeline = client.pipeline(1, take, name="test-pipeline")
    assert pipeline is not None
    pipeline.wake()
    time.sleep(0.1)
    pipeline.close(0.1)
    assert failed.wait(5)
    silent.close()


def test_a_connection_that_hangs_holds_up_only_its_own_request(
    server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Connecting blocks (an unreachable server answers no SYN): the other requests go on
    # on the connections that work.
    import threading

    client = _client(server)
    direct = client.direct
    assert direct is not None
    release, connects, real = threading.Event(), [0], direct.connect

    def connect():  # noqa: ANN202
        connects[0] += 1
        if connects[0] == 1:
            assert release.wait(10)
        return real()

    monkeypatch.setattr(direct, "connect", connect)
    todo, done = list(range(6)), {}
    lock = threading.Condition()

    def take():  # noqa: ANN202
        if not todo:
            return None
        i = todo.pop(0)

        def answered(body: bytes | None, err: BaseException | None) -> None:
            with lock:
                done[i] = err
                lock.notify_all()

        return pipeline.request("POST", f"/x{i}", {"n": i}, "application/json", answered)

    pipeline = client.pipeline(3, take, name="test-pipeline")
    assert pipeline is not None
    pipeline.wake()
    with lock:
        assert lock.wait_for(lambda: len(done) == 5, 10)  # all but the stuck one
    assert 0 not in done
    release.set()
    with lock:
        assert lock.wait_for(lambda: len(done) == 6, 10)
    assert set(done.values()) == {None}
    pipeline.close(1.0)
    client.close()


@pytest.mark.parametrize("seed", range(10))
def test_answers_split_anywhere_parse_alike(seed: int) -> None:
    from kai.k8s.connections import parse_answer

    body = b'{"kind":"Status","status":"Success"}'
    stream = (
        b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        + b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}"
        + b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nTrailer: t\r\n\r\n"
    )
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), 12))
    buf = bytearray()
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        buf += stream[start:end]
        while (parsed := parse_answer(buf)) is not None:
            answer, used = parsed
            del buf[:used]
            got.append((answer.status, answer.body))
    assert got == [(201, body), (409, b"{}"), (200, b"hello world")]
    assert not buf


class _ChunkedBody:
    """A watch response that hands its bytes over in the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt=None, decode_content=False):  # noqa: ANN001, ANN201
        yield from self.chunks


@pytest.mark.parametrize("seed", range(20))
def test_watch_events_survive_any_chunking(seed: int) -> None:
    """Watch events come one JSON line each, cut anywhere by the transport (inside an
    event, several events per chunk, blank keep-alive lines): every event comes out
    once, whole and in order."""
    rng = random.Random(seed)
    events = [
        {
            "type": rng.choice(("ADDED", "MODIFIED", "DELETED")),
            "object": {"metadata": {"name": f"p{i}"}},
        }
        for i in range(30)
    ]
    data = b"".join(
        json.dumps(e).encode() + (b"\n\n" if rng.random() < 0.2 else b"\n") for e in events
    )
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(0, 40)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    got = list(WatchStream(_ChunkedBody(chunks), KINDS["Pod"]))
    assert [(t, o["metadata"]["name"]) for t, o in got] == [
        (e["type"], e["object"]["metadata"]["name"]) for e in events
    ]
    assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for _, o in got)


def test_a_protobuf_status_reads_as_its_json() -> None:
    from kai.k8s import protobuf as pb

    def varint_field(number: int, value: int) -> bytes:
        return pb._varint(number << 3) + pb._varint(value)

    cause = pb._text(1, "FieldValueInvalid") + pb._text(2, "bad value") + pb._text(3, "spec.x")
    details = (
        pb._text(1, "p-0")
        + pb._text(3, "pods")
        + pb._field(4, cause)
        + pb._field(4, pb._text(2, "another"))
        + varint_field(5, 3)
    )
    status = (
        pb._field(1, b"")
        + pb._text(2, "Failure")
        + pb._text(3, "it is invalid")
        + pb._text(4, "Invalid")
        + pb._field(5, details)
        + varint_field(6, 422)
        + b"\x3d\x00\x00\x00\x00"  # a fixed32 field 7, unknown: skipped
    )
    data = pb.MAGIC + pb._field(1, pb._text(1, "v1") + pb._text(2, "Status")) + pb._field(2, status)
    assert pb.status(data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "it is invalid",
        "reason": "Invalid",
        "details": {
            "name": "p-0",
            "kind": "pods",
            "retryAfterSeconds": 3,
            "causes": [
                {"reason": "FieldValueInvalid", "message": "bad value", "field": "spec.x"},
                {"message": "another"},
            ],
        },
        "code": 422,
    }
    # Anything that is no protobuf Status is kept as it came.
    for other in (b"<html>bad gateway</html>", data[:-9], pb.binding("ns", "p", "n")):
        assert pb.status_json(other) == other
