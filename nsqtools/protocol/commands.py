"""Encoders for every command a client sends to nsqd, byte-exact to the V2 protocol.

Each function returns the bytes to write. Commands are text lines ending in "\\n";
IDENTIFY, PUB, MPUB, DPUB and AUTH carry a body framed as a 4-byte big-endian size and
the bytes. Names are checked here so nothing nsqd would reject leaves the process.
The answers to a batch of messages (fin_many, req_many) encode as one buffer.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from nsqtools.protocol.errors import LocalProtocolError
from nsqtools.protocol.names import check_channel, check_topic

MAGIC_V2 = b"  V2"
NOP = b"NOP\n"
CLS = b"CLS\n"
MESSAGE_ID_LENGTH = 16

_SIZE = struct.Struct(">I")
_MAX_READY = 2**31 - 1


def with_body(line: bytes, body: bytes) -> bytes:
    """A command line followed by its body, framed with the body's 4-byte size."""
    return line + _SIZE.pack(len(body)) + body


def _check_body(body: bytes) -> None:
    # nsqd answers E_BAD_MESSAGE to an empty body and closes the connection.
    if not body:
        raise LocalProtocolError("message body is empty: nsqd rejects empty messages")


def delay_milliseconds(seconds: float, what: str) -> int:
    """A delay in whole milliseconds, or LocalProtocolError for a negative or endless one."""
    if not math.isfinite(seconds):
        raise LocalProtocolError(f"{what} must be a finite number of seconds, got {seconds}")
    if seconds < 0:
        raise LocalProtocolError(f"{what} must not be negative, got {seconds:g}s")
    return round(seconds * 1000)


def identify(body: bytes) -> bytes:
    """IDENTIFY with its JSON body (see identify.IdentifyRequest.to_json)."""
    return with_body(b"IDENTIFY\n", body)


def auth(secret: str) -> bytes:
    if not secret:
        raise LocalProtocolError("AUTH secret is empty")
    return with_body(b"AUTH\n", secret.encode())


def check_partition(partition: int) -> int:
    """A partition of the Youzan fork's topics, or LocalProtocolError."""
    if partition < 0:
        raise LocalProtocolError(f"partition must not be negative, got {partition}")
    return partition


def _partition(partition: int | None) -> str:
    """The Youzan fork's partition argument (" 3"), or nothing for upstream NSQ."""
    return "" if partition is None else f" {check_partition(partition)}"


def sub(topic: str, channel: str, partition: int | None = None) -> bytes:
    """SUB; with a partition for the Youzan fork's partitioned topics."""
    names = f"{check_topic(topic)} {check_channel(channel)}{_partition(partition)}"
    return f"SUB {names}\n".encode()


def pub(topic: str, body: bytes, partition: int | None = None) -> bytes:
    _check_body(body)
    return with_body(f"PUB {check_topic(topic)}{_partition(partition)}\n".encode(), body)


def dpub(topic: str, delay: float, body: bytes) -> bytes:
    """Deferred publish: deliver `body` after `delay` seconds (sent as whole milliseconds)."""
    _check_body(body)
    line = f"DPUB {check_topic(topic)} {delay_milliseconds(delay, 'DPUB delay')}\n".encode()
    return with_body(line, body)


def mpub(
    topic: str,
    bodies: Sequence[bytes],
    sizes: Sequence[int] | None = None,
    partition: int | None = None,
) -> bytes:
    """Publish several messages in one command; nsqd stores them atomically, in order.

    Built with one join over precomputed size prefixes: well under 100ns per message.
    `sizes`, when the caller already has them, must be the lengths of `bodies`.
    """
    line = f"MPUB {check_topic(topic)}{_partition(partition)}\n".encode()
    return mpub_line(line, bodies, sizes)


def mpub_line(line: bytes, bodies: Sequence[bytes], sizes: Sequence[int] | None = None) -> bytes:
    """A command line (MPUB's, or the Youzan fork's MPUB_TRACE) and MPUB's body."""
    if not bodies:
        raise LocalProtocolError("MPUB needs at least one message")
    if sizes is None:
        sizes = list(map(len, bodies))
    if not all(sizes):
        raise LocalProtocolError("message body is empty: nsqd rejects empty messages")
    count = len(bodies)
    parts = [b""] * (2 * count + 1)
    body_size = 4 + 4 * count + sum(sizes)
    parts[0] = line + _SIZE.pack(body_size) + _SIZE.pack(count)
    parts[1::2] = map(_SIZE.pack, sizes)
    parts[2::2] = bodies
    return b"".join(parts)


def mpub_body_size(sizes: Sequence[int]) -> int:
    """The size of MPUB's body (what nsqd checks against --max-body-size) for messages
    of these sizes: the count, then a size before each."""
    return 4 + 4 * len(sizes) + sum(sizes)


def rdy(count: int) -> bytes:
    if not 0 <= count <= _MAX_READY:
        raise LocalProtocolError(f"RDY count out of range: {count}")
    return b"RDY %d\n" % count


def fin(message_id: bytes) -> bytes:
    return b"FIN " + _check_id(message_id) + b"\n"


def req(message_id: bytes, delay: float = 0.0) -> bytes:
    """Requeue a message, to be redelivered after `delay` seconds (whole milliseconds)."""
    return b"REQ %s %d\n" % (_check_id(message_id), delay_milliseconds(delay, "REQ delay"))


def touch(message_id: bytes) -> bytes:
    return b"TOUCH " + _check_id(message_id) + b"\n"


def fin_many(message_ids: Sequence[bytes]) -> bytes:
    """FIN for each id, as one buffer: the hot path of every consumer."""
    if not message_ids:
        return b""
    _check_ids(message_ids)
    return b"FIN " + b"\nFIN ".join(message_ids) + b"\n"


def req_many(message_ids: Sequence[bytes], delay: float = 0.0) -> bytes:
    """REQ for each id with the same delay, as one buffer."""
    if not message_ids:
        return b""
    _check_ids(message_ids)
    tail = b" %d\n" % delay_milliseconds(delay, "REQ delay")
    return b"REQ " + (tail + b"REQ ").join(message_ids) + tail


def _check_ids(message_ids: Sequence[bytes]) -> None:
    # map(len) runs in C: a few nanoseconds per id on the hot path.
    lengths = set(map(len, message_ids))
    if lengths != {MESSAGE_ID_LENGTH}:
        wrong = min(lengths - {MESSAGE_ID_LENGTH})
        raise LocalProtocolError(f"message id must be 16 bytes, got {wrong}")


def _check_id(message_id: bytes) -> bytes:
    if len(message_id) != MESSAGE_ID_LENGTH:
        raise LocalProtocolError(f"message id must be 16 bytes, got {len(message_id)}")
    return message_id
