"""nsqd's HTTP routes for one channel of a partition: POST /channel/create and POST
/channel/setoffset, answered as the fork's nsqdserver/http.go does (doCreateChannel,
doSetChannelOffset, both decorated V1 whatever the client asked: an empty 200 on
success, `{"message":"..."}` with the status on failure).

    /channel/create?topic=T&partition=N&channel=C
    /channel/setoffset?topic=T&partition=N&channel=C   body: <kind>:<value>

A missing partition is the one this nsqd leads. A channel created here is marked so
(Channel.created_over_http): the first SUB_ORDERED on it sends its first message twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nsqtools.testing.youzan.arguments import (
    CHANNEL_NAME,
    TOPIC_NAME,
    PositionError,
    read_position,
    start_index,
)
from nsqtools.testing.youzan.httpapi import HttpError, HttpReply, v1_error
from nsqtools.testing.youzan.state import Partition, Store
from nsqtools.testing.youzan.wire import Refusal

_ATOI = re.compile(r"[+-]?[0-9]+")
CHANNEL_PATHS = frozenset({"/channel/create", "/channel/setoffset"})

_V1_OK = HttpReply(200, b"", (("X-NSQ-Content-Type", "nsq; version=1.0"),))


def channel_route(
    store: Store, nsqd: int, path: str, query: Mapping[str, str], body: bytes
) -> HttpReply:
    """Answer one of CHANNEL_PATHS for nsqd number `nsqd`."""
    try:
        with store.lock:
            partition, name = _partition_and_channel(store, nsqd, query)
            if path == "/channel/create":
                _create(partition, name)
            else:
                _set_offset(partition, name, body)
    except HttpError as error:
        return v1_error(error)
    return _V1_OK


def _create(partition: Partition, name: str) -> None:
    """The channel, made if it does not exist yet; refused on a topic whose channels
    must be registered first (whether or not this one is)."""
    if partition.topic.disable_channel_auto_create:
        message = f"channel {name} not registered. channel should be initialized before use."
        raise HttpError(403, message)
    if name not in partition.channels:
        partition.channel(name).created_over_http = True


def _set_offset(partition: Partition, name: str, body: bytes) -> None:
    """Move an existing channel to a start position, whatever clients it has (the HTTP
    API forces it, unlike SUB_ADVANCED's)."""
    channel = partition.channels.get(name)
    if channel is None:
        raise HttpError(404, "CHANNEL_NOT_FOUND")
    if not body:
        raise HttpError(406, "MSG_EMPTY")
    try:
        kind, value = read_position(body)
    except PositionError as error:
        raise HttpError(400, str(error)) from None
    try:
        channel.seek(start_index(partition.messages, kind, value))
    except PositionError as error:
        raise HttpError(500, str(error)) from None


def _partition_and_channel(
    store: Store, nsqd: int, query: Mapping[str, str]
) -> tuple[Partition, str]:
    """http_api.GetTopicPartitionChannelArgs, then the topic's partition on this nsqd."""
    topic = query.get("topic", "")
    if not topic:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if not TOPIC_NAME.match(topic):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    number = _partition_arg(query.get("partition", ""))
    channel = query.get("channel", "")
    if not channel:
        raise HttpError(400, "MISSING_ARG_CHANNEL")
    if not CHANNEL_NAME.match(channel):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    try:
        return store.resolve(nsqd, topic, number), channel
    except Refusal:  # no such topic, or not a partition this nsqd leads
        raise HttpError(404, "E_TOPIC_NOT_EXIST") from None


def _partition_arg(value: str) -> int | None:
    """strconv.Atoi's reading, and its error text; none given (or -1) is None."""
    if not value:
        return None
    if not _ATOI.fullmatch(value):
        raise HttpError(400, f'strconv.Atoi: parsing "{value}": invalid syntax')
    number = int(value)
    return None if number == -1 else number
