"""The fork's nsqlookupd, HTTP only: /lookup with partitions and meta (the wrapped 0.3.x
envelope or the bare v1 one), /listlookup, /info, /topics, /channels, /nodes and /ping,
answered from the shared state under its lock; any other path is v1's 404.

It serves neither the fork's TCP protocol nor its RPC, but holds a listening socket for
each, so that /listlookup names ports that are really this lookupd's.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from nsqtools.testing.youzan.httpapi import (
    PLAIN_OK,
    HttpError,
    http_server,
    not_found,
    port_of,
)
from nsqtools.testing.youzan.nsqd import ForkNsqd
from nsqtools.testing.youzan.state import ForkTopic, Partition, Store, Topic
from nsqtools.testing.youzan.wire import VERSION


class Lookupd:
    """The lookupd's HTTP server over the cluster's state and nsqds (replica 1)."""

    def __init__(self, store: Store, nsqds: list[ForkNsqd]) -> None:
        self.store = store
        self.nsqds = nsqds
        self.http = http_server(self._route)
        self.http_address = f"127.0.0.1:{port_of(self.http)}"
        # Bound and listening, never accepted: the ports /listlookup reports.
        self.tcp_listener = socket.create_server(("127.0.0.1", 0))
        self.rpc_listener = socket.create_server(("127.0.0.1", 0))

    def close(self) -> None:
        self.tcp_listener.close()
        self.rpc_listener.close()

    def _route(self, path: str, query: dict[str, str], body: bytes) -> Any:
        routes: dict[str, Callable[[dict[str, str]], Any]] = {
            "/lookup": self._lookup,
            "/listlookup": lambda _: self._listlookup(),
            "/info": lambda _: {"version": VERSION, "ha_support": True},
            "/topics": lambda _: {"topics": list(self.store.topics)},
            "/channels": self._channels,
            "/nodes": lambda _: {"producers": self._nodes()},
            "/ping": lambda _: PLAIN_OK,
        }
        if path not in routes:
            return not_found()
        with self.store.lock:
            return routes[path](query)

    def _lookup(self, query: Mapping[str, str]) -> dict[str, Any]:
        topic = self.store.topics.get(_topic_arg(query))
        access = query.get("access", "r")
        if access not in ("r", "w"):
            raise HttpError(400, "INVALID_ACCESS_MODE")
        partitions = _partition_filter(topic, query.get("partition"))
        if topic is None:
            if access == "w":
                raise HttpError(404, "Key not found")
            return {"channels": [], "partitions": {}, "producers": []}
        if access == "w":
            partitions = self._writable(topic, partitions)
        data: dict[str, Any] = {"channels": topic.channel_names()}
        if query.get("metainfo") == "true":
            data["meta"] = self._meta(topic.config)
        # Keys in Go's order for a map: sorted, the partition ids too (as strings).
        data["partitions"] = {
            key: self.nsqds[p.leader].peer()
            for key, p in sorted((str(p.number), p) for p in partitions)
        }
        leaders = sorted({p.leader for p in partitions})
        data["producers"] = [self.nsqds[index].peer() for index in leaders]
        return data

    @staticmethod
    def _writable(topic: Topic, partitions: list[Partition]) -> list[Partition]:
        """access=w: nothing before writes are enabled, then the partitions with a channel
        and no leader move under way (no node is tombstoned here)."""
        if not topic.writable:
            return []
        kept = [p for p in partitions if p.channels]
        if not kept:  # spec, Observed: nsqlookupd: 404 in the v1 envelope (wrapped: 500)
            raise HttpError(404, "Topic has no channel, should init at least one for the new topic")
        # A moving partition has no writable leader: "during it the access=w lookup
        # answers 200 with partitions:{} and producers:[]".
        return [p for p in kept if p.move is None]

    def _meta(self, config: ForkTopic) -> dict[str, Any]:
        return {
            "disable_channel_auto_create": config.disable_channel_auto_create,
            "extend_support": config.extend,
            # The fork needs multi_part to put two partitions on one node.
            "multi_part": config.partitions > len(self.nsqds),
            "ordered": config.ordered,
            "partition_num": config.partitions,
            "replica": 1,
        }

    def _listlookup(self) -> dict[str, Any]:
        """One lookupd, the leader: the spec's ID "<ip>:<rpc port>:<tcp port>:nsqlookup",
        ports as strings, Epoch 0."""
        tcp_port, rpc_port = port_of(self.tcp_listener), port_of(self.rpc_listener)
        node = {
            "ID": f"127.0.0.1:{rpc_port}:{tcp_port}:nsqlookup",
            "NodeIP": "127.0.0.1",
            "TcpPort": str(tcp_port),
            "HttpPort": self.http_address.rpartition(":")[2],
            "RpcPort": str(rpc_port),
            "Epoch": 0,
        }
        return {"lookupdleader": node, "lookupdnodes": [node]}

    def _channels(self, query: Mapping[str, str]) -> dict[str, Any]:
        topic = self.store.topics.get(_topic_arg(query))
        return {"channels": [] if topic is None else topic.channel_names()}

    def _nodes(self) -> list[dict[str, Any]]:
        """The fork's /nodes: each nsqd without id and distributed_id, with the topics it
        leads a partition of (none tombstoned) and those partitions' ids as strings."""
        nodes = []
        for nsqd in self.nsqds:
            partitions = {
                name: [str(p.number) for p in topic.partitions if p.leader == nsqd.index]
                for name, topic in self.store.topics.items()
            }
            partitions = {name: ids for name, ids in partitions.items() if ids}
            peer = nsqd.peer()
            del peer["id"], peer["distributed_id"]
            topics = list(partitions)
            nodes.append(
                {
                    **peer,
                    "tombstones": [False] * len(topics),
                    "topics": topics,
                    "partitions": partitions,
                }
            )
        return nodes


def _topic_arg(query: Mapping[str, str]) -> str:
    if not query.get("topic"):
        raise HttpError(400, "MISSING_ARG_TOPIC")
    return query["topic"]


def _partition_filter(topic: Topic | None, value: str | None) -> list[Partition]:
    partitions = [] if topic is None else topic.partitions
    if value is None:
        return partitions
    try:
        number = int(value)
    except ValueError:
        raise HttpError(400, "INVALID_ARG_PARTITION") from None
    return [p for p in partitions if p.number == number]
