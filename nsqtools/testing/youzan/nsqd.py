"""One nsqd of the fork: its TCP listener (the cluster accepts its connections), its
HTTP API, and the peer record lookups give for it.

The HTTP API serves /ping, /info (with start_time and ha_support), /stats in the fork's
shape (stats.py), /pub and /pubtrace (spec page, "nsqd HTTP"; status codes and texts
from the fork's nsqdserver/http.go). Any other path is v1's 404.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any

from nsqtools.testing.youzan.httpapi import (
    PLAIN_OK,
    HttpError,
    http_server,
    not_found,
    port_of,
    v1_error,
    v1_reply,
)
from nsqtools.testing.youzan.state import Draft, Partition, Store, take_refusal
from nsqtools.testing.youzan.stats import stats_document
from nsqtools.testing.youzan.wire import HOSTNAME, VERSION, Refusal


class ForkNsqd:
    """One nsqd: its TCP listener and its HTTP API over the shared state."""

    def __init__(self, index: int, store: Store) -> None:
        self.index = index
        self.store = store
        self.start_time = int(time.time())
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.http = http_server(self._route)
        self.tcp_port = port_of(self.listener)
        self.http_port = port_of(self.http)

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    def peer(self) -> dict[str, Any]:
        """The page's peer record. id and remote_address name the nsqd's connection to the
        lookupd, which this cluster does not have: a made-up port, fixed per nsqd. The
        rpc port in distributed_id ("ip:rpc:tcp:workerid") is tcp + 100 as in the page's
        example, and not served."""
        remote = f"127.0.0.1:{50000 + self.index}"
        rpc_port = self.tcp_port + 100 if self.tcp_port <= 65435 else self.tcp_port - 100
        return {
            "id": remote,
            "remote_address": remote,
            "hostname": HOSTNAME,
            "broadcast_address": "127.0.0.1",
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": VERSION,
            "distributed_id": f"127.0.0.1:{rpc_port}:{self.tcp_port}:{self.index + 1}",
        }

    def _route(self, path: str, query: dict[str, str], body: bytes) -> Any:
        if path == "/ping":
            return PLAIN_OK
        if path == "/info":
            return self._info()
        if path == "/stats":
            with self.store.lock:
                return stats_document(self.store, self.index, self.start_time, query)
        if path == "/pub":
            self._publish(query, body, traced=False)
            return PLAIN_OK
        if path == "/pubtrace":
            return self._publish_traced(query, body)
        return not_found()

    def _info(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "broadcast_address": "127.0.0.1",
            "hostname": HOSTNAME,
            "http_port": self.http_port,
            "tcp_port": self.tcp_port,
            "start_time": self.start_time,
            "ha_support": True,
        }

    def _publish_traced(self, query: Mapping[str, str], body: bytes) -> Any:
        """/pubtrace answers in v1's form only, errors too (the fork decorates it V1)."""
        try:
            stored = self._publish(query, body, traced=True)
        except HttpError as error:
            return v1_error(error)
        return v1_reply(
            {
                "status": "OK",
                "id": stored.internal_id,
                "trace_id": query["trace_id"],  # as sent
                "queue_offset": stored.offset,
                "rawsize": stored.raw_size,
            }
        )

    def _publish(self, query: Mapping[str, str], body: bytes, *, traced: bool) -> Any:
        """Store the body in the partition asked for, or in the one this nsqd leads (an
        ordered topic included: "HTTP accepts it")."""
        if not body:
            raise HttpError(406, "MSG_EMPTY")
        trace_id = _trace_id(query) if traced else 0
        with self.store.lock:
            partition = self._partition(query)
            refusal = take_refusal(partition, "pub")
            if refusal is not None:
                raise HttpError(400, refusal.code)
            if not self.store.topics[partition.topic.name].writable:
                raise HttpError(400, "E_FAILED_ON_NOT_WRITABLE")
            draft = Draft(body, trace_id=trace_id, traced=traced)
            return self.store.append(partition, draft, time.time_ns())

    def _partition(self, query: Mapping[str, str]) -> Partition:
        topic = query.get("topic", "")
        if not topic:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        number: int | None = None
        if query.get("partition"):
            try:
                number = int(query["partition"])
            except ValueError:
                raise HttpError(400, "INVALID_ARG_TOPIC_PARTITION") from None
        try:
            return self.store.resolve(self.index, topic, number)
        except Refusal as refusal:  # no such topic, or not a partition this nsqd holds
            raise HttpError(404, refusal.code) from None


def _trace_id(query: Mapping[str, str]) -> int:
    value = query.get("trace_id", "")
    if not value.isdigit() or int(value) >= 1 << 64:
        raise HttpError(400, "INVALID_TRACE_ID")
    return int(value)
