"""One nsqd's `GET /stats?format=json` in the fork's own shape (spec page, "nsqd HTTP
/stats"; field names and types from the fork's nsqd/stats.go and nsqdserver/http.go at
v0.3.7-HA.1.12.7): one topic entry per partition the nsqd holds, `topic_partition` a
string, `client_num` where upstream has `client_count`, no `message_bytes` and no topic
`paused`; channels with their own `client_num`; clients with `desired_tag` and
`connect_ts`. Built from the shared state under its lock.

What the fork measures and this server does not (latency histograms, hourly sizes,
delayed queues) reads as zero or empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nsqtools.testing.youzan.state import Channel, Partition, Store
from nsqtools.testing.youzan.wire import HOSTNAME, VERSION

if TYPE_CHECKING:
    from nsqtools.testing.youzan.session import ForkSession

# The fork prints a zero time.Time as Go's String() of the Unix epoch.
_EPOCH_TEXT = "1970-01-01 00:00:00 +0000 UTC"


def stats_document(store: Store, nsqd: int, start_time: int, query: Mapping[str, str]) -> Any:
    """The answer's data: {version, health, start_time, topics}. `topic=` keeps that
    topic's partitions, `partition=` one of them; `channel=` keeps that channel of each
    (a partition without it keeps them all, as the fork does). Clients are listed only
    when asked for a topic or with needClients=true, as the fork does; their number
    (`client_num`) always."""
    topic_name = query.get("topic", "")
    need_clients = query.get("needClients", "")
    with_clients = need_clients == "true" or (bool(topic_name) and need_clients == "")
    channel_name = query.get("channel", "")
    partitions = [
        partition
        for name, topic in store.topics.items()
        if topic_name in ("", name)
        for partition in topic.partitions
        if partition.leader == nsqd  # replica 1: only the leader holds a partition
        and query.get("partition", "") in ("", str(partition.number))
    ]
    partitions.sort(key=_full_name)
    topics = [_topic(p, channel_name, with_clients) for p in partitions]
    return {"version": VERSION, "health": "OK", "start_time": start_time, "topics": topics}


def _full_name(partition: Partition) -> str:
    """The fork's topic full name, which it sorts its topics by."""
    return f"{partition.topic.name}-{partition.number}"


def _topic(partition: Partition, channel_name: str, with_clients: bool) -> dict[str, Any]:
    channels = sorted(partition.channels.values(), key=lambda channel: channel.name)
    stats = [_channel(channel, with_clients) for channel in channels]
    if channel_name in partition.channels:
        stats = [entry for entry in stats if entry["channel_name"] == channel_name]
    config = partition.topic
    return {
        "topic_name": config.name,
        "topic_full_name": _full_name(partition),
        "topic_partition": str(partition.number),
        "channels": stats,
        "channel_num": len(stats),
        # The fork's topic depth is the size written, in bytes (TotalDataSize).
        "depth": partition.next_offset,
        "backend_depth": partition.next_offset,
        "backend_start": 0,
        "message_count": len(partition.messages),
        "is_leader": True,
        "hourly_pubsize": 0,
        "client_pub_stats": [] if with_clients else None,
        "client_num": 0,  # publishers; this server keeps no count of them
        "msg_size_stats": [0] * 16,
        "msg_write_latency_stats": [0] * 16,
        "is_multi_ordered": config.ordered,
        "is_multi_part": False,
        "is_ext": config.extend,
        "is_channel_auto_create_disabled": config.disable_channel_auto_create,
        "statsd_name": config.name,
        "pub_failed_cnt": 0,
        "e2e_processing_latency": {"count": 0, "percentiles": None, "topic": config.name},
    }


def _channel(channel: Channel, with_clients: bool) -> dict[str, Any]:
    unconsumed = channel.unconsumed()
    clients = [_client(session) for session in channel.sessions] if with_clients else None
    return {
        "channel_name": channel.name,
        "backlogs": len(unconsumed),
        "depth": len(unconsumed),
        "depth_size": sum(message.raw_size for message in unconsumed),
        "depth_ts": _EPOCH_TEXT,
        "depth_ts_nano": 0,
        "backend_depth": len(unconsumed),
        "hourly_subsize": 0,
        "in_flight_count": len(channel.in_flight),
        "deferred_count": 0,
        "deferred_from_delay_count": 0,
        "message_count": len(channel.partition.messages),
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "clients": clients,
        "client_num": len(channel.sessions),
        "paused": False,
        "skipped": False,
        "zan_test_skipped": False,
        "delayed_queue_count": 0,
        "delayed_queue_recent": _EPOCH_TEXT,
        "delayed_queue_recent_nano": 0,
        "e2e_processing_latency": {
            "count": 0,
            "percentiles": None,
            "topic": channel.partition.topic.name,
            "channel": channel.name,
        },
        "msg_consume_latency_stats": [0] * 12,
        "msg_delivery_latency_stats": [0] * 12,
    }


def _client(session: ForkSession) -> dict[str, Any]:
    """Upstream's client fields, the fork's desired_tag, and what IDENTIFY said. The
    per-client message, finish and requeue counts are not kept here: zero."""
    identity = session.identity
    remote = session.remote_address
    client_id = _text(identity, "client_id") or remote.rpartition(":")[0]
    return {
        "name": client_id,
        "client_id": client_id,
        "hostname": _text(identity, "hostname") or HOSTNAME,
        "version": "V2",
        "remote_address": remote,
        "state": 3,  # stateSubscribed
        "ready_count": session.rdy,
        "in_flight_count": session.in_flight,
        "message_count": 0,
        "finish_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "deferred_count": 0,
        "connect_ts": session.connect_ts,
        "sample_rate": session.sample_rate,
        "deflate": False,
        "snappy": False,
        "user_agent": _text(identity, "user_agent"),
        "desired_tag": session.desired_tag,
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
        "output_buffer_size": 0,
        "output_buffer_timeout": 0,
        "msg_timeout": session.msg_timeout_ms,
        "limited_rdy": 0,
    }


def _text(identity: Mapping[str, Any], key: str) -> str:
    value = identity.get(key, "")
    return value if isinstance(value, str) else ""
