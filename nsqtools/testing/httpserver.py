"""A small threaded HTTP server on 127.0.0.1 for tests: each GET is answered by a
function of (path, query, headers) returning a Reply (status, body, content type).

The auth service nsqd queries and the junk lookupd are built on it; optionally
served over TLS.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from nsqtools.testing.lifetime import StartsAndStops


class Reply(NamedTuple):
    """What the server sends for one GET."""

    status: int
    body: bytes
    content_type: str = "application/json"


Route = Callable[[str, dict[str, str], Mapping[str, str]], Reply]


class LocalHttpServer(StartsAndStops):
    def __init__(
        self, route: Route, tls_cert: Path | None = None, tls_key: Path | None = None
    ) -> None:
        self.scheme = "http"
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(route))
        if tls_cert is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls_cert, tls_key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def _handler_for(route: Route) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            reply = route(url.path, query, dict(self.headers))
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests look at what the route recorded instead."""

    return Handler
