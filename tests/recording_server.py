"""An HTTP server on 127.0.0.1 that records each request and answers every one alike:
for tests of what a client sends, not of what Kubernetes does (tests/e2e has the real
API server)."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.protobuf_wire import binding_from_protobuf


@dataclass
class Request:
    method: str
    path: str  # with the query
    headers: dict[str, str]
    body: object


class RecordingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Request] = []
        self.answer: tuple[int, object] = (200, {"kind": "Status", "status": "Success"})
        # Close the connection after each answer without saying so, as a server does
        # with an idle keep-alive connection.
        self.hang_up_after_answer = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingServer

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if raw and "protobuf" in (self.headers.get("Content-Type") or ""):
            body: object = binding_from_protobuf(raw)
        else:
            body = json.loads(raw) if raw else None
        self.server.requests.append(Request(self.command, self.path, dict(self.headers), body))
        status, answer = self.server.answer
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if self.server.hang_up_after_answer:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def recording_server() -> Iterator[RecordingServer]:
    srv = RecordingServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
