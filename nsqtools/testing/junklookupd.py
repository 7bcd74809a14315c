"""A junk lookupd: an HTTP server in nsqlookupd's place that answers what it is told.

A real nsqlookupd v1.3.0 cannot be made to send a malformed answer, an old wrapped
one, or a server error, and every tool that discovers nsqds must survive those. This
server answers each path with a fixed Reply (404 NOT_FOUND for any other path), can
be switched to another answer while a tool polls it, and records the headers of
every request. JUNK_LOOKUPS names the broken /lookup answers worth trying on any tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nsqtools.testing.httpserver import LocalHttpServer, Reply

NOT_FOUND = Reply(404, b'{"message":"NOT_FOUND"}')


def producer(tcp_address: str, http_port: int = 4151, **fields: Any) -> dict[str, Any]:
    """One producer record as nsqlookupd v1.3.0 lists it; `fields` override any key."""
    host, _, port = tcp_address.rpartition(":")
    record = {
        "remote_address": f"{host}:50000",
        "hostname": "junk-host",
        "broadcast_address": host,
        "tcp_port": int(port),
        "http_port": http_port,
        "version": "1.3.0",
    }
    return {**record, **fields}


def lookup_answer(*producers: dict[str, Any]) -> Reply:
    """A well-formed /lookup answer listing these producers."""
    return Reply(200, json.dumps({"channels": [], "producers": list(producers)}).encode())


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


_HTML = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"

# Broken /lookup answers, by what is wrong with them. Each must cost a tool one warning
# per poll, never its life nor its other lookupds.
JUNK_LOOKUPS: dict[str, Reply] = {
    "port out of range": lookup_answer(producer("127.0.0.1:4150", tcp_port=99999)),
    "empty broadcast address": lookup_answer(producer("127.0.0.1:4150", broadcast_address="")),
    "nested 100,000 deep": Reply(200, _nested(100_000)),
    "not JSON": Reply(200, b"this is not JSON", "text/plain"),
    "empty body": Reply(200, b""),
    "wrong types": Reply(200, b'{"channels": [], "producers": {"tcp_port": "4150"}}'),
    "port as a string": lookup_answer(producer("127.0.0.1:4150", tcp_port="4150")),
    "missing fields": lookup_answer({"broadcast_address": "127.0.0.1"}),
    "a number too long to read": Reply(200, b'{"producers": [' + b"9" * 5000 + b"]}"),
    "HTTP 500": Reply(500, b'{"message": "INTERNAL_ERROR"}'),
    "HTTP 500 with a multi-line message": Reply(500, b'{"message": "line one\\nline two"}'),
    "HTML": Reply(200, _HTML, "text/html"),
    "HTML error page": Reply(502, _HTML, "text/html"),
}


class JunkLookupd(LocalHttpServer):
    """Answers each path with the Reply it was given; 404 NOT_FOUND otherwise."""

    def __init__(self, tls_cert: Path | None = None, tls_key: Path | None = None) -> None:
        super().__init__(self._route, tls_cert, tls_key)
        self.answers: dict[str, Reply] = {}
        self.request_headers: list[dict[str, str]] = []

    def answer(self, path: str, document: Any, status: int = 200) -> None:
        """Answer `path` with this JSON document from now on."""
        self.answers[path] = Reply(status, json.dumps(document).encode())

    def answer_with(self, path: str, reply: Reply) -> None:
        """Answer `path` with these exact bytes from now on."""
        self.answers[path] = reply

    def _route(self, path: str, query: dict[str, str], headers: Mapping[str, str]) -> Reply:
        self.request_headers.append(dict(headers))
        return self.answers.get(path, NOT_FOUND)
