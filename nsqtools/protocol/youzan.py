"""The Youzan fork of NSQ (youzan/nsq 0.3.7-HA.x) on the wire, sans-IO.

What the fork's nsqd adds to the V2 protocol (../shared/spec/youzan.md is the
reference): topics split into partitions named on every SUB and PUB; ordered
subscriptions (SUB_ORDERED) and subscriptions from a start position (SUB_ADVANCED);
traced publishing (PUB_TRACE, MPUB_TRACE, PUB_EXT) answered with a 30-byte record;
messages whose 16-byte id is binary (8-byte internal id + 8-byte trace id) and that
may carry an extend header and a detail block before the body; and new error codes.

Owns the encoders of those commands, the reading of their answers and of the extra
message bytes, the start positions, and the one-line explanations of the new errors.
Plain PUB/MPUB/SUB with a partition are encoded by nsqtools.protocol.commands.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nsqtools.protocol import commands
from nsqtools.protocol.errors import LocalProtocolError, RemoteProtocolError
from nsqtools.protocol.frames import Message, MessageBatch
from nsqtools.protocol.names import check_channel, check_topic

# The fork's servers say "0.3.7-HA.1.12.7": the "-HA." marks it, in IDENTIFY's answer
# and in every peer nsqlookupd lists.
_FORK_VERSION = re.compile(r"-HA\.")

TRACE_ID_SIZE: Final = 8
_TRACE_ANSWER = struct.Struct(">2sQQQI")  # "OK", internal id, trace id, offset, raw size
_TRACE_ID = struct.Struct(">Q")
_DETAIL = struct.Struct(">QI")  # disk-queue offset, raw size
_EXT_LENGTH = struct.Struct(">H")
# A message's internal id carries its partition in the bits above these ("Observed on a
# running fork": partition << 50).
PARTITION_SHIFT: Final = 50
_MAX_EXT_HEADER = 0xFFFF
# PUB_EXT's header keys that the fork's nsqd reads itself.
TRACE_ID_KEY: Final = "##trace_id"
TAG_KEY: Final = "##client_dispatch_tag"
EXT_VERSION_JSON: Final = 4

# Each new error code, in words a user can act on. nsqd's own text follows it.
ERRORS: Final[Mapping[str, str]] = {
    "E_TOPIC_NOT_EXIST": "the topic, or this partition of it, is not on this nsqd",
    "E_FAILED_ON_NOT_LEADER": "this nsqd does not lead the partition",
    "E_FAILED_ON_NOT_WRITABLE": "the partition takes no writes now (its leader is moving, "
    "or the topic is new)",
    "E_BAD_PARTITION": "the partition is not valid for this topic",
    "E_SUB_ORDER_IS_MUST": "the topic is ordered: it must be consumed with SUB_ORDERED",
    "E_SUB_EXTEND_NEED": "the topic carries extend headers: the client must identify "
    "extend_support",
    "E_SUB_EXTEND_FORBIDDON": "the topic carries no extend headers: extend_support must "
    "not be identified",
    "E_SUB_CHANNEL_NOT_REGISTERED": "the topic does not create channels on SUB: create the "
    "channel first",
    "E_EXT_NOT_SUPPORT": "the topic was not created with extend support (PUB_EXT)",
    "E_INVALID_JSON_HEADER": "the extend header is not valid JSON",
    "E_PUB_TOO_MUCH_WAITING": "nsqd has too many publishes waiting: slow down",
    "E_BAD_EXT": "the extend header is not valid",
    "E_BAD_TAG": "the tag is not valid",
}
# The same, for a publish refused for its partition (named in the text).
_PARTITION_ERRORS: Final[Mapping[str, str]] = {
    "E_TOPIC_NOT_EXIST": "this nsqd has no partition {partition} of the topic",
    "E_FAILED_ON_NOT_LEADER": "this nsqd does not lead partition {partition}",
    "E_FAILED_ON_NOT_WRITABLE": "partition {partition} takes no writes now (its leader is "
    "moving, or the topic is new)",
    "E_PUB_TOO_MUCH_WAITING": "nsqd has too many publishes waiting for partition {partition}",
}
# Refusals a fresh lookup can cure: the partition moved, or was moving.
REROUTE_ERRORS: Final = frozenset(
    {"E_TOPIC_NOT_EXIST", "E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE"}
)
# Refusals of a publish that waiting cures: those, and back pressure ("treat it as
# retryable, not fatal").
WAIT_ERRORS: Final = REROUTE_ERRORS | {"E_PUB_TOO_MUCH_WAITING"}


def is_fork_version(version: str) -> bool:
    """True for a version string of the fork's servers ("0.3.7-HA.1.12.7")."""
    return _FORK_VERSION.search(version) is not None


def explain(code: str) -> str:
    """What a fork error code means, or "" for one the fork did not add."""
    return ERRORS.get(code, "")


def explain_for_partition(code: str, partition: int) -> str:
    """What a refusal of a publish to `partition` means, naming it."""
    text = _PARTITION_ERRORS.get(code)
    return explain(code) if text is None else text.format(partition=partition)


# -- subscribing ------------------------------------------------------------------------


@dataclass(frozen=True)
class StartPosition:
    """Where SUB_ADVANCED starts a channel: its wire form is `<kind>:<value>`."""

    kind: str  # timestamp, virtual_queue, msgcount or special
    value: int

    @property
    def wire(self) -> str:
        return f"{self.kind}:{self.value}"

    def __str__(self) -> str:
        return self.wire


END: Final = StartPosition("special", -1)
# The names --start-at takes, beside the wire's own.
_START_KINDS = {
    "timestamp": "timestamp",
    "time": "timestamp",
    "virtual_queue": "virtual_queue",
    "offset": "virtual_queue",
    "msgcount": "msgcount",
    "count": "msgcount",
}


def parse_start_position(text: str) -> StartPosition:
    """`end`, `timestamp:<unix seconds>`, `offset:<queue offset>` (the wire's
    virtual_queue), `count:<n>` (msgcount: from the nth message, 1 the first; 0 too),
    or the wire's own `special:-1`."""
    if text in ("end", "special:-1"):
        return END
    kind, _, value = text.partition(":")
    if kind not in _START_KINDS or not value.isdigit():
        raise LocalProtocolError(
            f"start position {text!r} is not one of end, timestamp:<unix seconds>, "
            "offset:<queue offset>, count:<messages>"
        )
    return StartPosition(_START_KINDS[kind], int(value))


def sub_ordered(topic: str, channel: str, partition: int) -> bytes:
    """Ordered consumption of one partition: one message in flight, redelivered after
    REQ before the next."""
    names = f"{check_topic(topic)} {check_channel(channel)} {commands.check_partition(partition)}"
    return f"SUB_ORDERED {names}\n".encode()


def sub_advanced(
    topic: str, channel: str, partition: int, start: StartPosition | None = None
) -> bytes:
    """SUB whose messages carry their queue offset and size. A start position is set
    only by the channel's first client, and the fork then serves a partition of its own
    choosing whatever the one named (spec, "Observed on a running fork"): without one,
    it serves the partition named."""
    names = f"{check_topic(topic)} {check_channel(channel)} {commands.check_partition(partition)}"
    position = "" if start is None else f" {start.wire}"
    return f"SUB_ADVANCED {names}{position}\n".encode()


# -- publishing -------------------------------------------------------------------------


def pub_trace(topic: str, partition: int, trace_id: int, body: bytes) -> bytes:
    """PUB_TRACE: the body prefixed with its 8-byte trace id; answered by a TraceAnswer."""
    if not body:
        raise LocalProtocolError("message body is empty: nsqd rejects empty messages")
    line = f"PUB_TRACE {check_topic(topic)} {commands.check_partition(partition)}\n".encode()
    return commands.with_body(line, _trace_id(trace_id) + body)


def mpub_trace(
    topic: str, partition: int, trace_ids: Sequence[int], bodies: Sequence[bytes]
) -> bytes:
    """MPUB_TRACE: each body prefixed with its own trace id."""
    if len(trace_ids) != len(bodies):
        raise LocalProtocolError(f"{len(trace_ids)} trace ids for {len(bodies)} messages")
    if not all(bodies):
        raise LocalProtocolError("message body is empty: nsqd rejects empty messages")
    traced = [_trace_id(trace_id) + body for trace_id, body in zip(trace_ids, bodies, strict=True)]
    line = f"MPUB_TRACE {check_topic(topic)} {commands.check_partition(partition)}\n"
    return commands.mpub_line(line.encode(), traced)


def pub_ext(topic: str, partition: int, header: Mapping[str, Any], body: bytes) -> bytes:
    """PUB_EXT: `[2-byte JSON length][JSON header][body]`. With TRACE_ID_KEY in the
    header nsqd answers a TraceAnswer, otherwise OK."""
    if not body:
        raise LocalProtocolError("message body is empty: nsqd rejects empty messages")
    document = json.dumps(dict(header), separators=(",", ":")).encode()
    if len(document) > _MAX_EXT_HEADER:
        raise LocalProtocolError(f"extend header of {len(document)} bytes is over 65535")
    line = f"PUB_EXT {check_topic(topic)} {commands.check_partition(partition)}\n".encode()
    return commands.with_body(line, _EXT_LENGTH.pack(len(document)) + document + body)


def ext_header(tag: str = "", trace_id: int | None = None) -> dict[str, str]:
    """PUB_EXT's header for a tag and a trace id (nsqd wants it as a decimal string)."""
    header = {}
    if tag:
        header[TAG_KEY] = tag
    if trace_id is not None:
        header[TRACE_ID_KEY] = str(trace_id)
    return header


def _trace_id(trace_id: int) -> bytes:
    if not 0 <= trace_id < 2**64:
        raise LocalProtocolError(f"trace id must be an unsigned 64-bit number, got {trace_id}")
    return _TRACE_ID.pack(trace_id)


@dataclass(frozen=True)
class TraceAnswer:
    """The 30-byte answer to PUB_TRACE, MPUB_TRACE and a traced PUB_EXT. For MPUB_TRACE
    it names the first message and the whole batch's raw size, with trace id 0."""

    internal_id: int
    trace_id: int
    queue_offset: int
    raw_size: int

    @classmethod
    def parse(cls, data: bytes) -> TraceAnswer:
        if len(data) != _TRACE_ANSWER.size or not data.startswith(b"OK"):
            raise RemoteProtocolError(f"not a trace answer (OK and 28 bytes): {data[:40]!r}")
        _, internal_id, trace_id, offset, raw_size = _TRACE_ANSWER.unpack(data)
        return cls(internal_id, trace_id, offset, raw_size)


# -- messages ---------------------------------------------------------------------------


class ForkMessage(Message):
    """A message of the fork: its partition, the two halves of its binary id, and
    what the extend header and the detail block said (when the subscription has them)."""

    __slots__ = ("ext", "partition", "queue_offset", "raw_size", "tag")

    def __init__(
        self,
        message: Message,
        body: bytes,
        partition: int | None,
        *,
        queue_offset: int | None = None,
        raw_size: int | None = None,
        ext: bytes = b"",
    ) -> None:
        super().__init__(message.id, message.timestamp, message.attempts, body)
        self.partition = partition
        self.queue_offset = queue_offset
        self.raw_size = raw_size
        self.ext = ext  # the extend header's bytes, as sent (JSON for version 4)
        self.tag = _tag(ext)

    @property
    def internal_id(self) -> int:
        """nsqd's id for the message (the partition in its high bits, then a sequence)."""
        return int.from_bytes(self.id[:8], "big")

    @property
    def trace_id(self) -> int:
        """0 unless the message was published with a trace id."""
        return int.from_bytes(self.id[8:], "big")

    @property
    def origin_partition(self) -> int:
        """The partition the message really came from (its id says)."""
        return partition_of(self.id)


def partition_of(message_id: bytes) -> int:
    """The partition of a fork message's 16-byte id: its internal id's high bits."""
    return int.from_bytes(message_id[:8], "big") >> PARTITION_SHIFT


def _tag(ext: bytes) -> str:
    if not ext:
        return ""
    try:
        header = json.loads(ext)
    except ValueError:
        return ""
    tag = header.get(TAG_KEY, "") if isinstance(header, dict) else ""
    return tag if isinstance(tag, str) else ""


@dataclass(frozen=True)
class MessageLayout:
    """What comes between a fork message's id and its body on one subscription: the
    extend header (an extend topic, extend_support identified) and the detail block
    (after SUB_ORDERED or SUB_ADVANCED)."""

    partition: int | None  # None: nsqd chose it (a SUB without one): the ids tell
    extend: bool = False
    detail: bool = False

    def read(self, received: MessageBatch) -> MessageBatch:
        """The batch with each body split from what precedes it, as ForkMessages."""
        return MessageBatch(self.read_all(received))

    def read_all(self, received: MessageBatch) -> list[ForkMessage]:
        """Each message of the batch as a ForkMessage."""
        return [self._read(message) for message in received.messages]

    def _read(self, message: Message) -> ForkMessage:
        data, pos = message.body, 0
        ext = b""
        if self.extend:
            ext, pos = _read_ext(data)
        offset = raw_size = None
        if self.detail:
            if len(data) < pos + _DETAIL.size:
                raise RemoteProtocolError("message too short for its queue offset and size")
            offset, raw_size = _DETAIL.unpack_from(data, pos)
            pos += _DETAIL.size
        partition = partition_of(message.id) if self.partition is None else self.partition
        return ForkMessage(
            message, data[pos:], partition, queue_offset=offset, raw_size=raw_size, ext=ext
        )


def _read_ext(data: bytes) -> tuple[bytes, int]:
    """The extend header at the start of data, and where the rest begins."""
    if not data:
        raise RemoteProtocolError("message too short for its extend header version")
    if data[0] == 0:
        return b"", 1
    if len(data) < 3:
        raise RemoteProtocolError("message too short for its extend header length")
    (length,) = _EXT_LENGTH.unpack_from(data, 1)
    if len(data) < 3 + length:
        raise RemoteProtocolError(f"message too short for its {length}-byte extend header")
    return data[3 : 3 + length], 3 + length
