"""The incremental frame decoder: bytes in any chunking → typed events.

A frame from nsqd is a 4-byte size (covering the 4-byte type and the data), a 4-byte
type (0 response, 1 error, 2 message) and the data. A message's data is an 8-byte
timestamp in nanoseconds, 2-byte attempts, a 16-byte id and the body.

Speed matters here more than anywhere: `feed` parses every complete frame in a chunk
in one pass, reading a message's whole header with one struct call, and hands runs of
consecutive messages over as one MessageBatch. A frame longer than a chunk costs work
linear in its size: its chunks are kept as they came and joined once, when it is whole.
Any input either decodes or raises RemoteProtocolError; after that error the decoder
stays broken.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from nsqtools.protocol.errors import RemoteProtocolError

FRAME_RESPONSE: Final = 0
FRAME_ERROR: Final = 1
FRAME_MESSAGE: Final = 2

HEARTBEAT_DATA: Final = b"_heartbeat_"
# Errors about a FIN, REQ or TOUCH (commands nsqd answers only when they fail).
ANSWER_ERRORS: Final = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
# Only these errors leave the connection open; nsqd closes it after any other. The
# Youzan fork's leader errors refuse a PUB and keep the connection (after a SUB, nsqd
# closes it anyway).
NON_FATAL_ERRORS: Final = ANSWER_ERRORS | {"E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE"}
# nsqd's --max-msg-size can be raised, so allow well above its 1 MiB default.
DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024

_FRAME_HEADER = struct.Struct(">II")
# size, type, timestamp, attempts, id: a message frame's first 34 bytes in one call.
_MESSAGE_HEADER = struct.Struct(">IIqH16s")
_MESSAGE_PREFIX: Final = _MESSAGE_HEADER.size  # 34
_MESSAGE_MIN_SIZE: Final = _MESSAGE_PREFIX - 4  # type + timestamp + attempts + id
_TIMESTAMP_ATTEMPTS = struct.Struct(">qH")


class Message:
    """One message as nsqd delivered it. Answering it is the connection's business."""

    __slots__ = ("attempts", "body", "id", "timestamp")

    def __init__(self, id: bytes, timestamp: int, attempts: int, body: bytes) -> None:
        self.id = id
        self.timestamp = timestamp  # nanoseconds since the epoch, set by nsqd
        self.attempts = attempts
        self.body = body

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.id, self.timestamp, self.attempts, self.body) == (
            other.id,
            other.timestamp,
            other.attempts,
            other.body,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, timestamp={self.timestamp}, "
            f"attempts={self.attempts}, body={self.body[:40]!r})"
        )


@dataclass(frozen=True, slots=True)
class Response:
    """A response frame: b"OK", b"CLOSE_WAIT", or a JSON document."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """nsqd's heartbeat; answer it with NOP or nsqd closes the connection."""


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    """An error frame such as `E_BAD_TOPIC PUB topic name "x y" is not valid`."""

    code: str
    message: str

    @property
    def fatal(self) -> bool:
        """True when nsqd closes the connection after sending this error."""
        return self.code not in NON_FATAL_ERRORS

    @property
    def refuses_request(self) -> bool:
        """True when this is the answer to the oldest request awaiting one (SUB, PUB,
        ...), False for a failed FIN, REQ or TOUCH, which nsqd answers only on failure."""
        return self.code not in ANSWER_ERRORS

    @classmethod
    def parse(cls, data: bytes) -> ErrorFrame:
        code, _, message = data.decode("utf-8", "replace").partition(" ")
        return cls(code, message)

    def __str__(self) -> str:
        return f"{self.code} {self.message}".rstrip()


# A message's header as the decoder reads it: (frame size, frame type, timestamp,
# attempts, id); the body is kept beside it.
Header = tuple[int, int, int, int, bytes]
_ATTEMPTS = operator.itemgetter(3)


class MessageBatch:
    """Consecutive messages from one chunk of input, in arrival order.

    The decoder keeps each header as read and the body beside it; Message objects are
    made only when `messages` is read, so a consumer that needs only ids and bodies
    (raw output, FINs) never pays for them.
    """

    __slots__ = ("_headers", "_messages", "bodies")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._headers: list[Header] = []
        self.bodies: list[bytes] = []
        given = list(messages)
        for message in given:
            self._add(message)
        # Kept as given: they may be a subclass that carries more (the Youzan fork's).
        self._messages = given or None

    def _add(self, message: Message) -> None:
        self._headers.append((0, FRAME_MESSAGE, message.timestamp, message.attempts, message.id))
        self.bodies.append(message.body)
        self._messages = None

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def ids(self) -> list[bytes]:
        return [header[4] for header in self._headers]

    @property
    def max_attempts(self) -> int:
        return max(map(_ATTEMPTS, self._headers), default=0)

    @property
    def messages(self) -> list[Message]:
        if self._messages is None:
            self._messages = [
                Message(header[4], header[2], header[3], body)
                for header, body in zip(self._headers, self.bodies, strict=True)
            ]
        return self._messages

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageBatch):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"MessageBatch({self.messages!r})"


HEARTBEAT: Final = Heartbeat()
Event = Response | ErrorFrame | Heartbeat | MessageBatch


class FrameDecoder:
    """Turns a byte stream from nsqd into events, whatever the chunking."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._parts: list[bytes] = []  # bytes received and not yet decoded, as they came
        self._buffered = 0  # their total size
        self._wanted = 4  # how many buffered bytes the next frame needs before it decodes
        self._error: RemoteProtocolError | None = None

    def feed(self, data: bytes | bytearray) -> list[Event]:
        """Add received bytes; return the events of every frame now complete."""
        if self._error is not None:
            raise self._error
        self.receive_data(data)
        if self._buffered < self._wanted:
            return []  # the next frame is still incomplete: join nothing yet
        buffer = b"".join(self._parts)  # no copy when that is a single chunk
        size = len(buffer)
        events: list[Event] = []
        batch: MessageBatch | None = None
        headers: list[Header] = []
        bodies: list[bytes] = []
        pos = 0
        unpack_message = _MESSAGE_HEADER.unpack_from
        max_frame_size = self.max_frame_size
        while True:
            if size - pos >= _MESSAGE_PREFIX:
                header = unpack_message(buffer, pos)
                if header[1] == FRAME_MESSAGE and _MESSAGE_MIN_SIZE <= header[0] <= max_frame_size:
                    end = pos + 4 + header[0]
                    if end > size:
                        break
                    if batch is None:
                        batch = MessageBatch()
                        headers, bodies = batch._headers, batch.bodies
                        events.append(batch)
                    headers.append(header)
                    bodies.append(buffer[pos + 34 : end])
                    pos = end
                    continue
            event, end = self._frame_at(buffer, pos)
            if event is None:
                break
            pos = end
            if isinstance(event, Message):
                if batch is None:
                    batch = MessageBatch()
                    headers, bodies = batch._headers, batch.bodies
                    events.append(batch)
                batch._add(event)
            else:
                batch = None
                events.append(event)
        self._keep(buffer, pos)
        return events

    def receive_data(self, data: bytes | bytearray) -> None:
        """Add received bytes without decoding them (see next_event)."""
        if data:
            self._parts.append(bytes(data))  # a copy only of a bytearray, which may change
            self._buffered += len(data)

    def _keep(self, buffer: bytes, pos: int) -> None:
        """Keep buffer[pos:], not yet decoded, and note how much its first frame needs.

        Its size, once known, was checked against max_frame_size by _frame_at or by the
        fast path of feed, so the wait is bounded."""
        rest = buffer[pos:]
        self._parts = [rest] if rest else []
        self._buffered = len(rest)
        self._wanted = 4 + int.from_bytes(rest[:4], "big") if len(rest) >= 4 else 4

    def next_event(self) -> Event | None:
        """Decode at most one frame, leaving the rest buffered.

        For connection set-up, where the bytes after a frame may belong to a different
        layer (TLS, compression) and must be taken out with take_unconsumed().
        """
        if self._error is not None:
            raise self._error
        buffer = b"".join(self._parts)
        event, end = self._frame_at(buffer, 0)
        self._keep(buffer, end)
        if event is None:
            return None
        return MessageBatch([event]) if isinstance(event, Message) else event

    def take_unconsumed(self) -> bytes:
        """Remove and return the buffered bytes not yet decoded."""
        unconsumed = b"".join(self._parts)
        self._keep(b"", 0)
        return unconsumed

    def _frame_at(self, buffer: bytes, pos: int) -> tuple[Event | Message | None, int]:
        """Decode the frame at `pos`: (event, end), or (None, pos) if incomplete."""
        if len(buffer) - pos < 8:
            if len(buffer) - pos >= 4:
                self._check_size(int.from_bytes(buffer[pos : pos + 4], "big"))
            return None, pos
        frame_size, frame_type = _FRAME_HEADER.unpack_from(buffer, pos)
        self._check_size(frame_size)
        end = pos + 4 + frame_size
        if end > len(buffer):
            return None, pos
        data = buffer[pos + 8 : end]
        if frame_type == FRAME_RESPONSE:
            return (HEARTBEAT if data == HEARTBEAT_DATA else Response(data)), end
        if frame_type == FRAME_ERROR:
            return ErrorFrame.parse(data), end
        if frame_type == FRAME_MESSAGE:
            return self._message(data), end
        raise self._fail(f"unknown frame type {frame_type}")

    def _message(self, data: bytes) -> Message:
        if len(data) < _MESSAGE_MIN_SIZE - 4:
            raise self._fail(f"message frame of {len(data)} bytes is shorter than its header")
        timestamp, attempts = _TIMESTAMP_ATTEMPTS.unpack_from(data)
        return Message(data[10:26], timestamp, attempts, data[26:])

    def _check_size(self, frame_size: int) -> None:
        if frame_size < 4:
            raise self._fail(f"frame size {frame_size} is too small to hold a frame type")
        if frame_size > self.max_frame_size:
            raise self._fail(
                f"frame of {frame_size} bytes is larger than the limit of {self.max_frame_size}"
            )

    def _fail(self, reason: str) -> RemoteProtocolError:
        self._error = RemoteProtocolError(f"invalid frame from nsqd: {reason}")
        return self._error
