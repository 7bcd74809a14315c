"""nsqd's HTTP API: the Calls, and the typed records its answers are read into.

Queries: info, stats (topics, their channels, the channels' clients, and the
publishing clients; `null` lists read as empty). The Youzan fork's /stats is read too:
one topic entry per partition (`topic_partition`, a string), `client_num` for upstream's
`client_count`, no `message_bytes`, no topic `paused`, no `producers`. Publishing: pub,
mpub. Admin: create, delete, empty, pause and unpause a topic or a channel; a failure
is an HttpApiError carrying nsqd's message ("TOPIC_NOT_FOUND"). Send each Call with
nsqtools.httpapi.send (or send_sync).

Durations nsqd reports in nanoseconds are read as seconds; e2e latency values stay in
nanoseconds, as nsqd and nsq_stat print them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsqtools.httpapi.call import Call, get, post
from nsqtools.httpapi.json_shape import ShapeError, array, member, number, optional, typed

SERVER = "nsqd"
_NANOSECONDS = 1e9


@dataclass(frozen=True)
class NsqdInfo:
    version: str
    broadcast_address: str
    hostname: str
    tcp_port: int  # -1 when nsqd listens on a unix socket
    http_port: int
    start_time: int  # unix seconds
    max_heartbeat_interval: float  # seconds
    max_output_buffer_size: int
    max_output_buffer_timeout: float  # seconds
    max_deflate_level: int


@dataclass(frozen=True)
class Percentile:
    quantile: float
    value: float  # nanoseconds


@dataclass(frozen=True)
class E2eLatency:
    """End-to-end processing latency, when nsqd runs with --e2e-processing-latency-percentile.

    `count` is how many messages were measured in the window, which may be none yet.
    """

    count: int
    percentiles: tuple[Percentile, ...]


@dataclass(frozen=True)
class ClientStats:
    """One client connection: a consumer of a channel, or a publisher (pub_counts)."""

    client_id: str
    hostname: str
    version: str
    remote_address: str
    user_agent: str
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_ts: int
    sample_rate: int
    tls: bool
    snappy: bool
    deflate: bool
    authed: bool
    auth_identity: str
    pub_counts: dict[str, int]  # messages published, by topic (publishers only)


@dataclass(frozen=True)
class ChannelStats:
    channel_name: str
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    client_count: int
    clients: tuple[ClientStats, ...]  # empty when asked without clients
    paused: bool
    e2e_processing_latency: E2eLatency | None
    partition: int | None = None  # the fork's topic partition it is a channel of


@dataclass(frozen=True)
class TopicStats:
    """A topic on one nsqd; from the Youzan fork, one partition of it (`partition`)."""

    topic_name: str
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int  # 0 from the fork, which does not count them
    paused: bool  # False from the fork, which pauses channels only
    channels: tuple[ChannelStats, ...]
    e2e_processing_latency: E2eLatency | None
    partition: int | None = None  # None from upstream nsqd, which has no partitions
    # The fork's: the queue offset its partition's data starts at (older data was
    # deleted); backend_depth is where it ends (the fork's TotalDataSize, in bytes).
    backend_start: int = 0

    def channel(self, name: str) -> ChannelStats:
        """The channel of that name; KeyError when the topic has none."""
        for channel in self.channels:
            if channel.channel_name == name:
                return channel
        raise KeyError(f"no channel {name!r} in topic {self.topic_name!r}")


@dataclass(frozen=True)
class NsqdStats:
    version: str
    health: str
    start_time: int  # unix seconds
    topics: tuple[TopicStats, ...]
    producers: tuple[ClientStats, ...]  # clients that publish over TCP (none from the fork)

    def topic(self, name: str) -> TopicStats:
        """The topic of that name (from the fork, its first partition here); KeyError
        when nsqd has none."""
        for topic in self.topics:
            if topic.topic_name == name:
                return topic
        raise KeyError(f"no topic {name!r}")


def info(address: str) -> Call[NsqdInfo]:
    return get(SERVER, address, "/info", _info)


def stats(
    address: str, topic: str = "", channel: str = "", *, include_clients: bool = True
) -> Call[NsqdStats]:
    """/stats, filtered to a topic (and a channel of it) when given; memory is not asked."""
    params = {"format": "json", "include_mem": "false", "include_clients": _flag(include_clients)}
    if topic:
        params["topic"] = topic
    if channel:
        params["channel"] = channel
    return get(SERVER, address, "/stats", _stats, **params)


def pub(address: str, topic: str, body: bytes) -> Call[None]:
    return post(SERVER, address, "/pub", {"topic": topic}, body)


def mpub(address: str, topic: str, bodies: list[bytes]) -> Call[None]:
    """Publish several bodies at once; each must be free of newlines (nsqd splits on them)."""
    return post(SERVER, address, "/mpub", {"topic": topic}, b"\n".join(bodies))


def create_topic(address: str, topic: str) -> Call[None]:
    return post(SERVER, address, "/topic/create", {"topic": topic})


def delete_topic(address: str, topic: str) -> Call[None]:
    return post(SERVER, address, "/topic/delete", {"topic": topic})


def empty_topic(address: str, topic: str) -> Call[None]:
    return post(SERVER, address, "/topic/empty", {"topic": topic})


def pause_topic(address: str, topic: str) -> Call[None]:
    return post(SERVER, address, "/topic/pause", {"topic": topic})


def unpause_topic(address: str, topic: str) -> Call[None]:
    return post(SERVER, address, "/topic/unpause", {"topic": topic})


def create_channel(address: str, topic: str, channel: str) -> Call[None]:
    return post(SERVER, address, "/channel/create", {"topic": topic, "channel": channel})


def delete_channel(address: str, topic: str, channel: str) -> Call[None]:
    return post(SERVER, address, "/channel/delete", {"topic": topic, "channel": channel})


def empty_channel(address: str, topic: str, channel: str) -> Call[None]:
    return post(SERVER, address, "/channel/empty", {"topic": topic, "channel": channel})


def pause_channel(address: str, topic: str, channel: str) -> Call[None]:
    return post(SERVER, address, "/channel/pause", {"topic": topic, "channel": channel})


def unpause_channel(address: str, topic: str, channel: str) -> Call[None]:
    return post(SERVER, address, "/channel/unpause", {"topic": topic, "channel": channel})


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _info(data: Any) -> NsqdInfo:
    return NsqdInfo(
        version=typed(data, "version", str),
        broadcast_address=typed(data, "broadcast_address", str),
        hostname=typed(data, "hostname", str),
        tcp_port=typed(data, "tcp_port", int),
        http_port=typed(data, "http_port", int),
        start_time=typed(data, "start_time", int),
        max_heartbeat_interval=typed(data, "max_heartbeat_interval", int) / _NANOSECONDS,
        max_output_buffer_size=typed(data, "max_output_buffer_size", int),
        max_output_buffer_timeout=typed(data, "max_output_buffer_timeout", int) / _NANOSECONDS,
        max_deflate_level=typed(data, "max_deflate_level", int),
    )


def _stats(data: Any) -> NsqdStats:
    return NsqdStats(
        version=typed(data, "version", str),
        health=typed(data, "health", str),
        start_time=typed(data, "start_time", int),
        topics=tuple(_topic(topic) for topic in array(data, "topics")),
        producers=tuple(_client(client) for client in _producers(data)),
    )


def _producers(data: Any) -> list[Any]:
    """Upstream's publishing clients (null: none); the fork has no such list."""
    return array(data, "producers") if "producers" in data else []


def _topic(data: Any) -> TopicStats:
    partition = _partition(data)
    return TopicStats(
        topic_name=typed(data, "topic_name", str),
        depth=typed(data, "depth", int),
        backend_depth=typed(data, "backend_depth", int),
        message_count=typed(data, "message_count", int),
        message_bytes=optional(data, "message_bytes", int, 0),
        paused=optional(data, "paused", bool, False),
        channels=tuple(_channel(channel, partition) for channel in array(data, "channels")),
        e2e_processing_latency=_latency(data),
        partition=partition,
        backend_start=optional(data, "backend_start", int, 0),
    )


def _partition(data: Any) -> int | None:
    """The fork's `topic_partition` ("0", "1"...); None from upstream nsqd."""
    if not isinstance(data, dict) or "topic_partition" not in data:
        return None
    text = typed(data, "topic_partition", str)
    if not text.isdigit():
        raise ShapeError(f"'topic_partition' is {text!r}, not a partition number")
    return int(text)


def _channel(data: Any, partition: int | None) -> ChannelStats:
    return ChannelStats(
        channel_name=typed(data, "channel_name", str),
        depth=typed(data, "depth", int),
        backend_depth=typed(data, "backend_depth", int),
        in_flight_count=typed(data, "in_flight_count", int),
        deferred_count=typed(data, "deferred_count", int),
        message_count=typed(data, "message_count", int),
        requeue_count=typed(data, "requeue_count", int),
        timeout_count=typed(data, "timeout_count", int),
        # The fork says client_num.
        client_count=typed(data, "client_num" if "client_num" in data else "client_count", int),
        clients=tuple(_client(client) for client in array(data, "clients")),
        paused=typed(data, "paused", bool),
        e2e_processing_latency=_latency(data),
        partition=partition,
    )


def _client(data: Any) -> ClientStats:
    return ClientStats(
        client_id=typed(data, "client_id", str),
        hostname=typed(data, "hostname", str),
        version=typed(data, "version", str),
        remote_address=typed(data, "remote_address", str),
        user_agent=typed(data, "user_agent", str),
        state=typed(data, "state", int),
        ready_count=typed(data, "ready_count", int),
        in_flight_count=typed(data, "in_flight_count", int),
        message_count=typed(data, "message_count", int),
        finish_count=typed(data, "finish_count", int),
        requeue_count=typed(data, "requeue_count", int),
        connect_ts=typed(data, "connect_ts", int),
        sample_rate=typed(data, "sample_rate", int),
        tls=typed(data, "tls", bool),
        snappy=typed(data, "snappy", bool),
        deflate=typed(data, "deflate", bool),
        # nsqd leaves these out when they hold their zero value (`omitempty`).
        authed=optional(data, "authed", bool, False),
        auth_identity=optional(data, "auth_identity", str, ""),
        pub_counts={
            typed(count, "topic", str): typed(count, "count", int)
            for count in optional(data, "pub_counts", list, [])
        },
    )


def _latency(data: Any) -> E2eLatency | None:
    """The e2e latency of a topic or channel; None unless nsqd was told which percentiles
    to track (it then reports no percentiles, as `null` or not at all)."""
    latency = member(data, "e2e_processing_latency")
    if latency is None:
        return None
    percentiles = tuple(
        Percentile(quantile=number(entry, "quantile"), value=number(entry, "value"))
        for entry in array(latency, "percentiles")
    )
    if not percentiles:
        return None
    return E2eLatency(count=typed(latency, "count", int), percentiles=percentiles)
