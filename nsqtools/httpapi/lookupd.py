"""nsqlookupd's HTTP API: the Calls, and the typed records its answers are read into.

Queries: info, lookup (the producers of a topic; none while nsqlookupd knows none),
topics, channels, nodes; and the Youzan fork's: topic_lookup (a topic's partitions and
meta, asked for reading or writing) and list_lookup (every lookupd of the cluster).
Upstream nsqlookupd ignores the fork's parameters, so topic_lookup works with both.
Admin: create and delete a topic or a channel, tombstone a topic's producer. Send each
Call with nsqtools.httpapi.send (or send_sync). A record that cannot be used (a port out
of range, an empty broadcast address) is a bad answer, not a node to dial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from nsqtools.addresses import join_host_port
from nsqtools.httpapi.call import Call, get, post
from nsqtools.httpapi.json_shape import ShapeError, array, optional, strings, typed

SERVER = "nsqlookupd"

T = TypeVar("T")


@dataclass(frozen=True)
class NsqdNode:
    """One nsqd as nsqlookupd lists it (a topic's producer, or a node)."""

    broadcast_address: str
    hostname: str
    tcp_port: int
    http_port: int
    version: str

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.broadcast_address, self.tcp_port)

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)


@dataclass(frozen=True)
class RegisteredNsqd(NsqdNode):
    """An nsqd as /nodes lists it: with its topics, and those tombstoned for it."""

    topics: tuple[str, ...] = ()
    tombstoned_topics: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicMeta:
    """The Youzan fork's description of a topic (`metainfo=true`)."""

    partition_num: int
    replica: int = 1
    ordered: bool = False
    extend_support: bool = False
    multi_part: bool = False
    disable_channel_auto_create: bool = False


@dataclass(frozen=True)
class TopicLookup:
    """A topic's producers and, from the Youzan fork, its partitions (each with the
    nsqd that leads it) and meta. Upstream nsqlookupd gives producers only."""

    producers: tuple[NsqdNode, ...]
    partitions: dict[int, NsqdNode]
    meta: TopicMeta | None = None

    @property
    def is_fork(self) -> bool:
        return self.meta is not None or bool(self.partitions)


@dataclass(frozen=True)
class LookupdNode:
    """One nsqlookupd of a Youzan fork cluster, as /listlookup lists it."""

    node_ip: str
    http_port: int

    @property
    def http_address(self) -> str:
        return join_host_port(self.node_ip, self.http_port)


@dataclass(frozen=True)
class LookupdInfo:
    version: str


def info(address: str) -> Call[LookupdInfo]:
    return _get(address, "/info", lambda data: LookupdInfo(typed(data, "version", str)))


def lookup(address: str, topic: str) -> Call[list[NsqdNode]]:
    """The nsqds producing `topic`; [] while nsqlookupd knows none (TOPIC_NOT_FOUND)."""
    return Call(
        SERVER, address, "GET", "/lookup", _producers, {"topic": topic}, if_topic_not_found=list
    )


def topic_lookup(address: str, topic: str, access: str = "r") -> Call[TopicLookup]:
    """The producers of `topic`, with the Youzan fork's partitions and meta: `access`
    "r" for consuming, "w" for publishing (the fork leaves out what cannot be written)."""
    params = {"topic": topic, "access": access, "metainfo": "true"}
    return Call(
        SERVER, address, "GET", "/lookup", _topic_lookup, params, if_topic_not_found=_no_lookup
    )


def list_lookup(address: str) -> Call[list[LookupdNode]]:
    """Every nsqlookupd of a Youzan fork cluster, the leader first."""
    return _get(address, "/listlookup", _lookupd_nodes)


def topics(address: str) -> Call[list[str]]:
    return _get(address, "/topics", lambda data: strings(data, "topics"))


def channels(address: str, topic: str) -> Call[list[str]]:
    return _get(address, "/channels", lambda data: strings(data, "channels"), topic=topic)


def nodes(address: str) -> Call[list[RegisteredNsqd]]:
    """Every nsqd registered with the lookupd."""
    return _get(address, "/nodes", _registered_nodes)


def create_topic(address: str, topic: str) -> Call[None]:
    return _admin(address, "/topic/create", topic=topic)


def delete_topic(address: str, topic: str) -> Call[None]:
    return _admin(address, "/topic/delete", topic=topic)


def create_channel(address: str, topic: str, channel: str) -> Call[None]:
    return _admin(address, "/channel/create", topic=topic, channel=channel)


def delete_channel(address: str, topic: str, channel: str) -> Call[None]:
    return _admin(address, "/channel/delete", topic=topic, channel=channel)


def tombstone_topic_producer(address: str, topic: str, node: NsqdNode) -> Call[None]:
    """Hide `node` from lookups of `topic` for a while (before deleting the topic there)."""
    return _admin(address, "/topic/tombstone", topic=topic, node=node.http_address)


def _get(address: str, path: str, read: Callable[[Any], T], **params: str) -> Call[T]:
    return get(SERVER, address, path, read, **params)


def _admin(address: str, path: str, **params: str) -> Call[None]:
    return post(SERVER, address, path, params)


def _producers(data: Any) -> list[NsqdNode]:
    return [NsqdNode(**_node_fields(producer)) for producer in array(data, "producers")]


def _no_lookup() -> TopicLookup:
    return TopicLookup((), {})


def _topic_lookup(data: Any) -> TopicLookup:
    partitions = optional(data, "partitions", dict, {})
    meta = optional(data, "meta", dict, None)
    return TopicLookup(
        tuple(_producers(data)),
        {_partition_id(key): NsqdNode(**_node_fields(peer)) for key, peer in partitions.items()},
        None if meta is None else _meta(meta),
    )


def _partition_id(key: str) -> int:
    if not key.isdigit():
        raise ShapeError(f"partition {key!r} is not a number")
    return int(key)


def _meta(document: dict[str, Any]) -> TopicMeta:
    partition_num = typed(document, "partition_num", int)
    if partition_num < 1:
        raise ShapeError(f"'partition_num' is {partition_num}")
    flags = ("ordered", "extend_support", "multi_part", "disable_channel_auto_create")
    return TopicMeta(
        partition_num,
        optional(document, "replica", int, 1),
        **{flag: optional(document, flag, bool, False) for flag in flags},
    )


def _lookupd_nodes(data: Any) -> list[LookupdNode]:
    leader = optional(data, "lookupdleader", dict, None)
    listed = [leader] if leader else []
    listed += array(data, "lookupdnodes")
    nodes = dict.fromkeys(_lookupd_node(document) for document in listed)
    return list(nodes)


def _lookupd_node(document: Any) -> LookupdNode:
    node_ip = typed(document, "NodeIP", str)
    port = typed(document, "HttpPort", str)  # the fork writes its ports as strings
    if not node_ip or not port.isdigit() or not 0 < int(port) < 65536:
        raise ShapeError(f"lookupd node {node_ip!r}:{port!r} is not an address")
    return LookupdNode(node_ip, int(port))


def _registered_nodes(data: Any) -> list[RegisteredNsqd]:
    return [_registered(node) for node in array(data, "producers")]


def _registered(document: Any) -> RegisteredNsqd:
    topics = strings(document, "topics")
    tombstones = array(document, "tombstones")
    if len(tombstones) != len(topics) or not all(type(flag) is bool for flag in tombstones):
        raise ShapeError("'tombstones' is not one boolean per topic")
    tombstoned = tuple(topic for topic, flag in zip(topics, tombstones, strict=True) if flag)
    return RegisteredNsqd(
        **_node_fields(document), topics=tuple(topics), tombstoned_topics=tombstoned
    )


def _node_fields(document: Any) -> dict[str, Any]:
    broadcast_address = typed(document, "broadcast_address", str)
    if not broadcast_address:
        raise ShapeError("'broadcast_address' is empty")
    return {
        "broadcast_address": broadcast_address,
        "hostname": typed(document, "hostname", str),
        "tcp_port": _port(document, "tcp_port"),
        "http_port": _port(document, "http_port"),
        "version": typed(document, "version", str),
    }


def _port(document: Any, key: str) -> int:
    port = typed(document, key, int)
    if not 0 < port < 65536:
        raise ShapeError(f"{key!r} is {port}, not a port number")
    return port
