"""One nsqd of the fork: its TCP listener (the cluster accepts its connections), its
minimal HTTP API (/ping, /info, and the channel routes of channelapi.py), and the peer
record lookups give for it.
"""

from __future__ import annotations

import socket
from typing import Any

from nsqtools.testing.youzan.channelapi import CHANNEL_PATHS, channel_route
from nsqtools.testing.youzan.httpapi import PLAIN_OK, HttpError, http_server, port_of
from nsqtools.testing.youzan.state import Store
from nsqtools.testing.youzan.wire import HOSTNAME, VERSION


class ForkNsqd:
    """One nsqd: its TCP listener and its HTTP API (/ping, /info, /channel/create and
    /channel/setoffset: the page's /pub, /pubtrace and /pub_ext are not served)."""

    def __init__(self, index: int, store: Store) -> None:
        self.index = index
        self.store = store
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
        if path in CHANNEL_PATHS:
            return channel_route(self.store, self.index, path, query, body)
        if path == "/ping":
            return PLAIN_OK
        if path == "/info":
            return {
                "version": VERSION,
                "broadcast_address": "127.0.0.1",
                "hostname": HOSTNAME,
                "http_port": self.http_port,
                "tcp_port": self.tcp_port,
                "ha_support": True,
            }
        raise HttpError(404, "NOT_FOUND")
