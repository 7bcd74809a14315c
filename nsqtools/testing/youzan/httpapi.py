"""HTTP as the fork's daemons serve it, for the lookupd's API and each nsqd's: a threaded
server on loopback whose routes answer data, and the 0.3.x envelope around it or, for a
client that asked for v1, the data bare. Routes get the path, the query and the body.
An unknown path is answered in v1's form whatever the client asked (the fork's
router.NotFound is decorated with V1), as are routes the fork serves in v1 only.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nsqtools.testing.youzan.wire import V1_ACCEPT


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json; charset=utf-8"),)


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


Route = Callable[[str, dict[str, str], bytes], Any]


def _enveloped(route: Route, path: str, query: dict[str, str], body: bytes, v1: bool) -> HttpReply:
    """0.3.x's envelope unless the client asked for v1: {"status_code","status_txt","data"},
    and every error as HTTP 500 with its text in status_txt; v1 sends the data bare and an
    error with its own status as {"message": ...}."""
    try:
        data = route(path, query, body)
    except HttpError as error:
        if v1:
            return v1_error(error)
        return HttpReply(
            500, _json({"status_code": 500, "status_txt": error.message, "data": None})
        )
    if isinstance(data, HttpReply):
        return data
    if v1:
        return v1_reply(data)
    return HttpReply(200, _json({"status_code": 200, "status_txt": "OK", "data": data}))


def v1_reply(data: Any) -> HttpReply:
    return HttpReply(200, _json(data), _V1_HEADERS)


def v1_error(error: HttpError) -> HttpReply:
    """{"message":"<text>"}: the text put between the quotes as it is, unescaped, as the
    fork's RespondV1 does with fmt.Sprintf (a text holding a quote makes no valid JSON:
    strconv's errors do)."""
    body = b'{"message":"' + error.message.encode() + b'"}'
    return HttpReply(error.status, body, _V1_HEADERS)


def not_found() -> HttpReply:
    """An unknown path: 404 {"message":"NOT_FOUND"}, in v1's form for every client."""
    return v1_error(HttpError(404, "NOT_FOUND"))


_V1_HEADERS = (
    ("Content-Type", "application/json; charset=utf-8"),
    ("X-NSQ-Content-Type", "nsq; version=1.0"),
)
PLAIN_OK = HttpReply(200, b"OK", (("Content-Type", "text/plain; charset=utf-8"),))


def http_server(route: Route) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            v1 = self.headers.get("Accept") == V1_ACCEPT
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            reply = _enveloped(route, url.path, query, body, v1)
            self.send_response(reply.status)
            for key, value in reply.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        do_POST = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests look at the state instead."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def port_of(server: ThreadingHTTPServer | socket.socket) -> int:
    sock = server.socket if isinstance(server, ThreadingHTTPServer) else server
    return int(sock.getsockname()[1])
