"""A small auth HTTP service for nsqd's --auth-http-address, run by tests.

nsqd asks `GET /auth?remote_ip=&tls=&secret=&common_name=` when a client sends AUTH.
Known secrets get an identity and full publish/subscribe rights on every topic and
channel (or the authorizations given); any other secret gets 403, which nsqd turns
into E_AUTH_FAILED. Every query is recorded so tests can check what nsqd asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nsqtools.testing.httpserver import LocalHttpServer, Reply

ALL_RIGHTS: list[dict[str, Any]] = [
    {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
]


class AuthService(LocalHttpServer):
    """Answers nsqd's auth queries from a table of secret → identity."""

    def __init__(
        self,
        identities: Mapping[str, str],
        authorizations: list[dict[str, Any]] | None = None,
        ttl: int = 3600,
    ) -> None:
        super().__init__(self._route)
        self.identities = dict(identities)
        self.authorizations = authorizations if authorizations is not None else ALL_RIGHTS
        self.ttl = ttl
        self.queries: list[dict[str, str]] = []

    def _route(self, path: str, query: dict[str, str], headers: Mapping[str, str]) -> Reply:
        if path != "/auth":
            return Reply(404, b'{"message": "NOT_FOUND"}')
        status, document = self.answer(query)
        return Reply(status, json.dumps(document).encode())

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
