"""A small auth HTTP service for nsqd's --auth-http-address, run by tests.

nsqd asks `GET /auth?remote_ip=&tls=&secret=&common_name=` when a client sends AUTH.
Known secrets get an identity and full publish/subscribe rights on every topic and
channel (or the authorizations given); any other secret gets 403, which nsqd turns
into E_AUTH_FAILED. Every query is recorded so tests can check what nsqd asked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

ALL_RIGHTS: list[dict[str, Any]] = [
    {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
]


class AuthService:
    """Answers nsqd's auth queries from a table of secret → identity."""

    def __init__(
        self,
        identities: Mapping[str, str],
        authorizations: list[dict[str, Any]] | None = None,
        ttl: int = 3600,
    ) -> None:
        self.identities = dict(identities)
        self.authorizations = authorizations if authorizations is not None else ALL_RIGHTS
        self.ttl = ttl
        self.queries: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def answer(self, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.queries.append(query)
        identity = self.identities.get(query.get("secret", ""))
        if identity is None:
            return 403, {"message": "unknown secret"}
        return 200, {
            "ttl": self.ttl,
            "identity": identity,
            "identity_url": f"https://auth.example/{identity}",
            "authorizations": self.authorizations,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path != "/auth":
                    self.send_error(404)
                    return
                query = {key: values[0] for key, values in parse_qs(url.query).items()}
                status, document = service.answer(query)
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read `queries` instead of the request log."""

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
