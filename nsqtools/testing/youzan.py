"""A scripted stand-in for the Youzan fork of NSQ (youzan/nsq v0.3.7-HA.1.12.7), for tests.

The fork is not served by the Go module proxy, so it cannot be built here; tests of our
client run against this server instead. Its wire behaviour follows the spec page
/work/shared/spec/youzan.md ("The Youzan fork of NSQ: what differs on the wire") and
nothing more: it is no reimplementation of the fork. Where the page is silent the
server does the simplest thing, and a comment says so.

YouzanCluster owns one nsqlookupd HTTP API (/lookup with partitions and meta, the
wrapped 0.3.x envelope or the bare v1 one, /listlookup, /info, /topics, /channels,
/nodes) and N nsqds on the TCP protocol (PUB and its TRACE/EXT variants, SUB,
SUB_ADVANCED, SUB_ORDERED, binary message ids read at fixed length, the fork's error
codes), each with a minimal HTTP API (/ping and /info only). It also owns the state they
share: every topic's partitions and their stored messages, each channel's delivery
state, every command received. Tests script it: inject messages, refuse the next
publish with an error code, move a partition's leader, make a topic unwritable.

Deterministic: ids, offsets and sizes follow from what was stored, never from a clock
(but for timestamps). Threads and raw sockets, not trio: tests run our trio client and
our CLI as subprocesses against it, and it must keep going while their loops block.

    with YouzanCluster([ForkTopic("t", partitions=2, channels=("ch",))]) as fork:
        ... point a client at fork.lookupd_http_address ...
        fork.stored("t"), fork.finished("t", "ch"), fork.commands()
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO, Literal
from urllib.parse import parse_qs, urlsplit

from nsqtools.testing.lifetime import StartsAndStops

VERSION = "0.3.7-HA.1.12.7"
MAGIC = b"  V2"
FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
HEARTBEAT = b"_heartbeat_"
OK = b"OK"
HOSTNAME = "host"  # the page's example shows "host"
V1_ACCEPT = "application/vnd.nsq; version=1.0"

PARTITION_SHIFT = 50  # internal id = (partition << 50) + sequence: "partition 1 gave 2^50+seq"
MESSAGE_HEADER_SIZE = 26  # 8B timestamp + 2B attempts + 16B id
DISK_LENGTH_PREFIX = 4  # the disk queue writes each message after its 4-byte length
EXT_VERSION_NONE, EXT_VERSION_JSON = 0, 4
TRACE_ID_KEY = "##trace_id"
TAG_KEY = "##client_dispatch_tag"

MAX_BODY_SIZE = 5 * 1024 * 1024  # nsqd's default max-body-size
MAX_LINE_SIZE = 64 * 1024
MAX_RDY_COUNT = 2500
DEFAULT_MSG_TIMEOUT_MS = 60_000
MAX_MSG_TIMEOUT_MS = 900_000
MAX_REQ_TIMEOUT_MS = 3_600_000
DEFAULT_HEARTBEAT_MS = 30_000
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 250
OUTPUT_BUFFER_SIZE = 100  # "output_buffer_size reports 100 until the client subscribes"
# A peer that stopped reading still gets its fatal error frame: how long to wait for it
# to close its end before closing ours.
LINGER_SECONDS = 1.0
HTTP_POLL_SECONDS = 0.02
# The delivery threads re-check their timers at least this often.
MAX_WAIT_SECONDS = 1.0

PUB_COMMANDS = frozenset({b"PUB", b"MPUB", b"PUB_TRACE", b"MPUB_TRACE", b"PUB_EXT", b"MPUB_EXT"})
SUB_COMMANDS = frozenset({b"SUB", b"SUB_ADVANCED", b"SUB_ORDERED"})
BODY_COMMANDS = PUB_COMMANDS | {b"IDENTIFY", b"AUTH"}
FIXED_ID_COMMANDS = frozenset({b"FIN", b"REQ", b"TOUCH"})
ID_SIZE = 16

# The page gives the text of these; for the others, "CODE short description".
ERROR_DESCRIPTIONS: dict[str, str] = {
    "E_TOPIC_NOT_EXIST": "",  # "note the trailing space: the description is empty"
    "E_FAILED_ON_NOT_LEADER": "the partition leader is another node",
    "E_FAILED_ON_NOT_WRITABLE": "the topic is not writable now",
    "E_BAD_PARTITION": "topic partition is not valid",
    "E_SUB_ORDER_IS_MUST": "this topic is configured only allow ordered sub",
    "E_SUB_EXTEND_NEED": "this topic is extended and the client must identify extend_support",
    "E_SUB_EXTEND_FORBIDDON": "this topic is not extended and the client identified it is",
    "E_SUB_CHANNEL_NOT_REGISTERED": "the channel is not registered for this topic",
    "E_EXT_NOT_SUPPORT": "the topic does not support the extend header",
    "E_INVALID_JSON_HEADER": "the extend header is not a JSON object",
    "E_PUB_TOO_MUCH_WAITING": "too much pub waiting",
    "E_BAD_EXT": "the extend header is malformed",
    "E_BAD_TAG": "the dispatch tag is not valid",
}
# Not-leader and not-writable are non-fatal on PUB ("but fatal on SUB"). The page is
# silent about E_PUB_TOO_MUCH_WAITING: back pressure, so non-fatal, as the client is
# meant to retry. Every other code closes the connection.
NON_FATAL_ON_PUB = frozenset(
    {"E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE", "E_PUB_TOO_MUCH_WAITING"}
)

_TOPIC_NAME = re.compile(r"^[.a-zA-Z0-9_-]{1,64}$")
_CHANNEL_NAME = re.compile(r"^[.a-zA-Z0-9_-]{1,64}(#ephemeral)?$")


@dataclass(frozen=True)
class ForkTopic:
    """A topic as the fork's admin would create it."""

    name: str
    partitions: int = 2  # partition p is led by nsqd p % len(nsqds)
    ordered: bool = False
    extend: bool = False  # "extend_support" in meta; needs extend_support in IDENTIFY
    disable_channel_auto_create: bool = False
    # Channels created up front on every partition (lookup's "channels"; access=w needs one).
    channels: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredMessage:
    """One message as a partition stores it."""

    topic: str
    partition: int
    internal_id: int  # (partition << 50) + sequence (sequence from 1, per partition)
    trace_id: int  # 0 unless published with a trace
    timestamp: int  # ns since the epoch
    # Disk-queue offset: the sum of the raw sizes of the partition's earlier messages.
    offset: int
    # What the message takes in the disk queue: its 4-byte length prefix, the 26-byte
    # header (timestamp, attempts, id), on an extend topic the ext part as the MESSAGE
    # frame carries it (1 version byte; with an ext header also 2 length bytes and the
    # header), and the body. So 30 + len(body) on other topics: the page's example,
    # raw size 42, is a 12-byte body.
    raw_size: int
    body: bytes
    tag: str = ""  # "##client_dispatch_tag" of PUB_EXT
    ext: bytes = b""  # the JSON header of PUB_EXT, as sent

    @property
    def id(self) -> bytes:
        """The 16 raw bytes: 8B BE internal id + 8B BE trace id."""
        return struct.pack(">QQ", self.internal_id, self.trace_id)

    @property
    def sequence(self) -> int:
        return self.internal_id - (self.partition << PARTITION_SHIFT)


def raw_size_of(body: bytes, ext: bytes, extend: bool) -> int:
    """A message's size in the disk queue (see StoredMessage.raw_size)."""
    size = DISK_LENGTH_PREFIX + MESSAGE_HEADER_SIZE + len(body)
    if extend:
        size += 1 + (2 + len(ext) if ext else 0)
    return size


def trace_answer(internal_id: int, trace_id: int, offset: int, raw_size: int) -> bytes:
    """The 30-byte answer: "OK" + 8B internal id + 8B trace id + 8B offset + 4B raw size."""
    return OK + struct.pack(">QQQI", internal_id, trace_id, offset, raw_size)


class Refusal(Exception):
    """An error frame for the client: "CODE description"; fatal ones close the connection."""

    def __init__(self, code: str, description: str | None = None, *, fatal: bool = True) -> None:
        if description is None:
            description = ERROR_DESCRIPTIONS.get(code, code.lower().removeprefix("e_"))
        super().__init__(f"{code} {description}")
        self.code = code
        self.fatal = fatal

    @property
    def frame_data(self) -> bytes:
        return str(self).encode()


def _invalid(description: str) -> Refusal:
    return Refusal("E_INVALID", description)


class _Closed(Exception):
    """The client closed its end (or stop() closed it)."""


# The state the nsqds and the lookupd share. Every method of these classes runs with
# _Store.lock held.


@dataclass
class _Waiting:
    """A message waiting in a channel to be sent; a requeued one once its delay is over."""

    message: StoredMessage
    ready_at: float = 0.0


@dataclass
class _InFlight:
    message: StoredMessage
    session: _Session
    deadline: float


class _Channel:
    """Delivery state of one channel of one partition, shared by its consumers."""

    def __init__(self, partition: _Partition, name: str) -> None:
        self.partition = partition
        self.name = name
        self.cursor = 0  # partition.messages[cursor:] were never waiting here
        self.waiting: list[_Waiting] = []  # in offset order
        self.in_flight: dict[bytes, _InFlight] = {}
        self.attempts: dict[bytes, int] = {}
        self.sessions: list[_Session] = []
        self.ordered = False

    def seek(self, start: int) -> None:
        """Send from partition.messages[start] on (SUB_ADVANCED); what is in flight stays."""
        self.waiting = []
        self.cursor = start

    def take(self, session: _Session, now: float) -> tuple[StoredMessage, int] | None:
        """The next message for `session` and its attempts, now in flight; or None."""
        self._pull()
        candidates = [w for w in self.waiting if session.wants(w.message)]
        if self.ordered:
            # "One message in flight per partition connection, whatever the RDY", and
            # a requeued message comes back before the next even when delayed. Counted
            # per channel partition: the same for the one connection per partition of
            # an ordered consumer.
            if self.in_flight or not candidates or candidates[0].ready_at > now:
                return None
            chosen: _Waiting | None = candidates[0]
        else:
            chosen = next((w for w in candidates if w.ready_at <= now), None)
        if chosen is None:
            return None
        self.waiting.remove(chosen)
        message = chosen.message
        attempts = self.attempts.get(message.id, 0) + 1
        self.attempts[message.id] = attempts
        deadline = now + session.msg_timeout_ms / 1000
        self.in_flight[message.id] = _InFlight(message, session, deadline)
        session.in_flight += 1
        return message, attempts

    def settle(self, session: _Session, message_id: bytes) -> _InFlight | None:
        """Take a message `session` has in flight out of flight (FIN, REQ)."""
        entry = self.in_flight.get(message_id)
        if entry is None or entry.session is not session:
            return None
        del self.in_flight[message_id]
        session.in_flight -= 1
        return entry

    def requeue(self, message: StoredMessage, ready_at: float) -> None:
        entry = _Waiting(message, ready_at)
        bisect.insort(self.waiting, entry, key=lambda w: w.message.offset)

    def expire(self, now: float) -> bool:
        """Requeue what timed out; True if anything did."""
        expired = [key for key, entry in self.in_flight.items() if entry.deadline <= now]
        for key in expired:
            entry = self.in_flight.pop(key)
            entry.session.in_flight -= 1
            self.requeue(entry.message, now)
        return bool(expired)

    def drop_session(self, session: _Session, now: float) -> None:
        """A consumer went away: what it had in flight is sent again at once. (The page is
        silent; sooner than waiting for msg_timeout, and tests need no long timeout.)"""
        with contextlib.suppress(ValueError):
            self.sessions.remove(session)
        for key, entry in list(self.in_flight.items()):
            if entry.session is session:
                del self.in_flight[key]
                self.requeue(entry.message, now)
        session.in_flight = 0

    def next_event(self, now: float) -> float | None:
        """When a timer of this channel fires next (a timeout, a delayed requeue)."""
        times = [entry.deadline for entry in self.in_flight.values()]
        times += [w.ready_at for w in self.waiting if w.ready_at > now]
        return min(times, default=None)

    def _pull(self) -> None:
        # New messages have higher offsets than anything waiting: appending keeps order.
        messages = self.partition.messages
        self.waiting.extend(_Waiting(message) for message in messages[self.cursor :])
        self.cursor = len(messages)


@dataclass
class _Partition:
    topic: ForkTopic
    number: int
    leader: int  # the nsqd's index
    messages: list[StoredMessage] = field(default_factory=list)
    channels: dict[str, _Channel] = field(default_factory=dict)
    # Error codes for the next commands, by kind ("pub", "sub"): refuse_next().
    refusals: dict[str, list[str]] = field(default_factory=lambda: {"pub": [], "sub": []})

    @property
    def next_offset(self) -> int:
        last = self.messages[-1] if self.messages else None
        return 0 if last is None else last.offset + last.raw_size

    def channel(self, name: str) -> _Channel:
        if name not in self.channels:
            self.channels[name] = _Channel(self, name)
        return self.channels[name]


@dataclass
class _Topic:
    config: ForkTopic
    partitions: list[_Partition]
    writable: bool = True

    def channel_names(self) -> list[str]:
        """Every partition's channels, each once, in order of creation."""
        names: dict[str, None] = {}
        for partition in self.partitions:
            names.update(dict.fromkeys(partition.channels))
        return list(names)


@dataclass(frozen=True)
class _Draft:
    """A message to store, as read from a PUB-family body."""

    body: bytes
    trace_id: int = 0
    traced: bool = False  # asked for the 30-byte answer
    ext: bytes = b""
    tag: str = ""


class _Store:
    """Topics, messages, channels and the record of commands, under one lock."""

    def __init__(self, nsqd_count: int) -> None:
        self.lock = threading.Condition()
        self.nsqd_count = nsqd_count
        self.topics: dict[str, _Topic] = {}
        self.finished: dict[tuple[str, str], list[bytes]] = {}
        self.commands: list[tuple[int, bytes]] = []
        self.sessions: set[_Session] = set()

    def add_topic(self, config: ForkTopic) -> None:
        if config.name in self.topics:
            raise ValueError(f"topic {config.name!r} exists already")
        if config.partitions < 1:
            raise ValueError("a topic has at least one partition")
        partitions = [
            _Partition(config, number, number % self.nsqd_count)
            for number in range(config.partitions)
        ]
        for partition in partitions:
            for name in config.channels:
                partition.channel(name)
        self.topics[config.name] = _Topic(config, partitions)

    def topic(self, name: str) -> _Topic:
        try:
            return self.topics[name]
        except KeyError:
            raise KeyError(f"no topic {name!r}") from None

    def partition(self, topic: str, number: int) -> _Partition:
        partitions = self.topic(topic).partitions
        if not 0 <= number < len(partitions):
            raise KeyError(f"topic {topic!r} has no partition {number}")
        return partitions[number]

    def append(self, partition: _Partition, draft: _Draft, timestamp: int) -> StoredMessage:
        sequence = len(partition.messages) + 1
        message = StoredMessage(
            topic=partition.topic.name,
            partition=partition.number,
            internal_id=(partition.number << PARTITION_SHIFT) + sequence,
            trace_id=draft.trace_id,
            timestamp=timestamp,
            offset=partition.next_offset,
            raw_size=raw_size_of(draft.body, draft.ext, partition.topic.extend),
            body=draft.body,
            tag=draft.tag,
            ext=draft.ext,
        )
        partition.messages.append(message)
        self.lock.notify_all()  # consumers waiting for messages
        return message

    def resolve(
        self, nsqd: int, topic_name: str, number: int | None, *, publishing: bool = False
    ) -> _Partition:
        """The partition a command names on this nsqd, or the one it leads for the topic
        (the lowest if several)."""
        topic = self.topics.get(topic_name)
        if topic is None:
            raise Refusal("E_TOPIC_NOT_EXIST")
        if number is None and publishing and topic.config.ordered:
            raise Refusal("E_BAD_PARTITION", "topic partition is not valid for multi partition: -1")
        if number is None:
            led = [p for p in topic.partitions if p.leader == nsqd]
            if not led:
                raise Refusal("E_TOPIC_NOT_EXIST")
            return led[0]
        if not 0 <= number < len(topic.partitions) or topic.partitions[number].leader != nsqd:
            raise Refusal("E_TOPIC_NOT_EXIST")
        return topic.partitions[number]


def _take_refusal(partition: _Partition, kind: str) -> Refusal | None:
    codes = partition.refusals[kind]
    if not codes:
        return None
    code = codes.pop(0)
    return Refusal(code, fatal=kind == "sub" or code not in NON_FATAL_ON_PUB)


# Reading PUB-family bodies.


def _payload(name: str, body: bytes) -> bytes:
    if not body:
        raise Refusal("E_BAD_MESSAGE", f"{name} invalid message body size 0")
    return body


def _traced_draft(name: str, data: bytes) -> _Draft:
    """[8-byte BE trace id][payload]."""
    if len(data) < 8:
        raise Refusal("E_BAD_BODY", f"{name} body too short for a trace id")
    (trace_id,) = struct.unpack(">Q", data[:8])
    return _Draft(_payload(name, data[8:]), trace_id=trace_id, traced=True)


def _ext_draft(name: str, data: bytes) -> _Draft:
    """[2-byte BE json len][json header][payload]."""
    if len(data) < 2:
        raise Refusal("E_BAD_BODY", f"{name} body too short for an extend header")
    (size,) = struct.unpack(">H", data[:2])
    ext, payload = data[2 : 2 + size], data[2 + size :]
    if len(ext) < size:
        raise Refusal("E_BAD_BODY", f"{name} extend header longer than the body")
    header = _json_header(ext) if ext else {}
    trace = _trace_id(header)
    tag = header.get(TAG_KEY, "")
    if not isinstance(tag, str):
        raise Refusal("E_BAD_TAG")
    return _Draft(
        _payload(name, payload), trace_id=trace or 0, traced=trace is not None, ext=ext, tag=tag
    )


def _trace_id(header: dict[str, Any]) -> int | None:
    """ "##trace_id": a decimal string of a 64-bit id; None without one."""
    trace = header.get(TRACE_ID_KEY)
    if trace is None:
        return None
    if not (isinstance(trace, str) and trace.isascii() and trace.isdigit()):
        raise Refusal("E_INVALID_JSON_HEADER", f"{TRACE_ID_KEY} is not a decimal string")
    if int(trace) >= 2**64:
        raise Refusal("E_INVALID_JSON_HEADER", f"{TRACE_ID_KEY} is out of range")
    return int(trace)


def _json_header(ext: bytes) -> dict[str, Any]:
    try:
        header = json.loads(ext)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise Refusal("E_INVALID_JSON_HEADER")
    return header


def _split_batch(name: str, body: bytes) -> list[bytes]:
    """[4B count] then [4B size][data] for each message."""
    if len(body) < 4:
        raise Refusal("E_BAD_BODY", f"{name} failed to read message count")
    (count,) = struct.unpack(">i", body[:4])
    if count <= 0:
        raise Refusal("E_BAD_BODY", f"{name} invalid message count {count}")
    parts, position = [], 4
    for index in range(count):
        header = body[position : position + 4]
        size = struct.unpack(">i", header)[0] if len(header) == 4 else -1
        data = body[position + 4 : position + 4 + size] if size >= 0 else b""
        if size < 0 or len(data) < size:
            raise Refusal("E_BAD_BODY", f"{name} failed to read message({index}) body")
        parts.append(data)
        position += 4 + size
    if position != len(body):
        raise Refusal("E_BAD_BODY", f"{name} body has bytes after its messages")
    return parts


def _drafts(name: bytes, body: bytes) -> list[_Draft]:
    text = name.decode()
    read_one: Callable[[str, bytes], _Draft] = {
        b"PUB": lambda n, d: _Draft(_payload(n, d)),
        b"PUB_TRACE": _traced_draft,
        b"PUB_EXT": _ext_draft,
    }[name.removeprefix(b"M")]
    if name.startswith(b"M"):
        return [read_one(text, data) for data in _split_batch(text, body)]
    return [read_one(text, body)]


def _publish_answer(name: bytes, drafts: list[_Draft], stored: list[StoredMessage]) -> bytes:
    first = stored[0]
    if name == b"MPUB_TRACE":
        # The first message's id and offset, trace id 0, the batch's total raw size.
        total = sum(message.raw_size for message in stored)
        return trace_answer(first.internal_id, 0, first.offset, total)
    if name in (b"PUB_TRACE", b"PUB_EXT") and drafts[0].traced:
        return trace_answer(first.internal_id, first.trace_id, first.offset, first.raw_size)
    # MPUB_EXT: the page does not say; plain OK, as MPUB.
    return OK


def _partition_param(value: bytes) -> int | None:
    """A partition parameter; -1 is none, as the fork's clients send it."""
    try:
        number = int(value)
    except ValueError:
        raise Refusal("E_BAD_PARTITION", f"topic partition is not valid: {value!r}") from None
    return None if number == -1 else number


def _check_name(command: str, kind: str, name: str, pattern: re.Pattern[str]) -> None:
    if not pattern.match(name):
        code = "E_BAD_TOPIC" if kind == "topic" else "E_BAD_CHANNEL"
        raise Refusal(code, f'{command} {kind} name "{name}" is not valid')


# A start position of SUB_ADVANCED: the index of the first message to send.


def _start_index(messages: list[StoredMessage], position: bytes) -> int:
    kind, _, value = position.decode(errors="replace").partition(":")
    try:
        number = int(value)
    except ValueError:
        raise _invalid(f"SUB_ADVANCED invalid start position {position!r}") from None
    if kind == "special" and number == -1:
        return len(messages)  # the end: only what is stored after the SUB
    if kind == "timestamp":
        return _first(messages, lambda m: m.timestamp >= number * 1_000_000_000)
    if kind == "virtual_queue":
        return _first(messages, lambda m: m.offset >= number)
    if kind == "msgcount":
        # The page gives no detail: skip the first <n> messages of the partition.
        return min(max(number, 0), len(messages))
    raise _invalid(f"SUB_ADVANCED invalid start position {position!r}")


def _first(messages: list[StoredMessage], wanted: Callable[[StoredMessage], bool]) -> int:
    return next((i for i, message in enumerate(messages) if wanted(message)), len(messages))


# One client connection to an nsqd.

_INIT, _SUBSCRIBED, _CLOSING = "init", "subscribed", "closing"


class _Session:
    """A client's connection: a reader thread runs its commands, a delivery thread sends
    its messages and heartbeats. Socket writes are serialised by write_lock."""

    def __init__(self, store: _Store, nsqd: int, sock: socket.socket) -> None:
        self.store = store
        self.nsqd = nsqd
        self.sock = sock
        # Closed by the reader thread only: closing it while a read blocks is not safe.
        self.file: BinaryIO = sock.makefile("rb")
        self.write_lock = threading.Lock()
        self.closed = False
        # Negotiated in IDENTIFY.
        self.identified = False
        self.heartbeat_ms = DEFAULT_HEARTBEAT_MS
        self.next_heartbeat = time.monotonic() + DEFAULT_HEARTBEAT_MS / 1000
        self.msg_timeout_ms = DEFAULT_MSG_TIMEOUT_MS
        self.sample_rate = 0
        self.extend_support = False
        self.desired_tag = ""
        # Subscription.
        self.state = _INIT
        self.channel: _Channel | None = None
        self.detail = False  # offset and raw size in MESSAGE frames
        self.rdy = 0
        self.in_flight = 0

    def wants(self, message: StoredMessage) -> bool:
        # "A consumer with desired_tag gets only messages with that tag"; the page is
        # silent about consumers without one: they get every message.
        return not self.desired_tag or message.tag == self.desired_tag

    # The reader thread.

    def serve(self, spawn: Callable[[Callable[[], None]], None]) -> None:
        try:
            if self._read(4) != MAGIC:
                self._refuse(Refusal("E_BAD_PROTOCOL", "bad protocol magic"))
                return
            spawn(self._deliver)
            while not self.closed:
                self._run(*self._read_command())
        except Refusal as refusal:  # a command that cannot be read: the stream is lost
            self._refuse(refusal)
        except (_Closed, OSError):
            pass
        finally:
            self.close()
            self.file.close()

    def _run(self, name: bytes, params: list[bytes], body: bytes) -> None:
        try:
            answer = self._answer(name, params, body)
        except Refusal as refusal:
            self._refuse(refusal)
            return
        if answer is not None:
            self._send(FRAME_RESPONSE, answer)

    def _answer(self, name: bytes, params: list[bytes], body: bytes) -> bytes | None:
        if name == b"IDENTIFY":
            return self._identify(body)
        if name in PUB_COMMANDS:
            return self._publish(name, params, body)
        if name in SUB_COMMANDS:
            return self._subscribe(name, params)
        handlers: dict[bytes, Callable[[list[bytes]], bytes | None]] = {
            b"RDY": self._ready,
            b"FIN": self._finish,
            b"REQ": self._requeue,
            b"TOUCH": self._touch,
            b"NOP": lambda _: None,
            b"CLS": self._close_wait,
        }
        if name == b"AUTH":
            raise Refusal("E_AUTH_DISABLED", "AUTH disabled")  # auth_required is false
        if name not in handlers:
            # SUB_ORDER (the design doc's name) among them; INTERNAL_CREATE_TOPIC too:
            # it is for non-cluster mode only, and this is a cluster.
            raise _invalid("invalid command")
        return handlers[name](params)

    def _refuse(self, refusal: Refusal) -> None:
        self._send(FRAME_ERROR, refusal.frame_data)
        if refusal.fatal:
            self._linger_close()

    # Reading commands. FIN, REQ and TOUCH are read at fixed length: their ids are
    # binary and may hold a 0x0a, so no line can be split at "\n" before the id is read.

    def _read_command(self) -> tuple[bytes, list[bytes], bytes]:
        raw = bytearray()
        name, ended = self._read_name(raw)
        params: list[bytes] = []
        if not ended and name in FIXED_ID_COMMANDS:
            params = self._read_id_params(name, raw)
        elif not ended:
            line = self._read_line(raw)
            params = line.split(b" ")
        body = self._read_body(name, raw) if name in BODY_COMMANDS else b""
        with self.store.lock:
            self.store.commands.append((self.nsqd, bytes(raw)))
        return name, params, body

    def _read_name(self, raw: bytearray) -> tuple[bytes, bool]:
        """The command's name, and whether the line ended with it."""
        name = bytearray()
        while True:
            byte = self._read(1)
            raw += byte
            if byte in (b" ", b"\n"):
                return bytes(name).removesuffix(b"\r"), byte == b"\n"
            name += byte
            if len(name) > 64:
                raise _invalid("invalid command")

    def _read_id_params(self, name: bytes, raw: bytearray) -> list[bytes]:
        message_id = self._read(ID_SIZE)
        raw += message_id
        if name != b"REQ":
            end = self._read(1)
            raw += end
            if end != b"\n":
                raise _invalid(f"{name.decode()} id must be {ID_SIZE} bytes")
            return [message_id]
        rest = self._read_line(raw)  # " <ms>"
        return [message_id, *rest.split(b" ")[1:]]

    def _read_line(self, raw: bytearray) -> bytes:
        line = self.file.readline(MAX_LINE_SIZE)
        if len(line) == MAX_LINE_SIZE and not line.endswith(b"\n"):
            raise _invalid("command line too long")
        if not line.endswith(b"\n"):
            raise _Closed
        raw += line
        return line[:-1].removesuffix(b"\r")

    def _read_body(self, name: bytes, raw: bytearray) -> bytes:
        header = self._read(4)
        raw += header
        (size,) = struct.unpack(">i", header)
        if not 0 <= size <= MAX_BODY_SIZE:
            raise Refusal("E_BAD_BODY", f"{name.decode()} invalid body size {size}")
        body = self._read(size)
        raw += body
        return body

    def _read(self, size: int) -> bytes:
        data = self.file.read(size)
        if len(data) < size:
            raise _Closed
        return data

    # Commands.

    def _identify(self, body: bytes) -> bytes:
        if self.identified:
            raise _invalid("cannot IDENTIFY in current state")
        try:
            request = json.loads(body)
        except (ValueError, RecursionError):
            request = None
        if not isinstance(request, dict):
            raise Refusal("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        heartbeat = _int_field(request, "heartbeat_interval", 0)
        msg_timeout = _int_field(request, "msg_timeout", 0)
        with self.store.lock:
            self.identified = True
            # -1 disables heartbeats, 0 keeps the default. Any positive interval is
            # taken as it is (nsqd wants 1 s or more): fast heartbeats for tests.
            if heartbeat:
                self.heartbeat_ms = heartbeat
                self.next_heartbeat = time.monotonic() + heartbeat / 1000
            if msg_timeout > 0:
                self.msg_timeout_ms = min(msg_timeout, MAX_MSG_TIMEOUT_MS)
            self.sample_rate = _int_field(request, "sample_rate", 0)
            self.extend_support = request.get("extend_support") is True
            tag = request.get("desired_tag", "")
            self.desired_tag = tag if isinstance(tag, str) else ""
            # ext_filter is read by the fork; the page says nothing of what it does.
            self.store.lock.notify_all()  # the delivery thread's heartbeat timer
        if request.get("feature_negotiation") is not True:
            return OK
        return json.dumps(self._identify_answer(request), separators=(",", ":")).encode()

    def _identify_answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """Upstream nsqd 1.x's answer, in its order, with the fork's version and desired_tag.
        TLS, snappy and deflate are never granted: the client goes on in plain text."""
        answer: dict[str, Any] = {
            "max_rdy_count": MAX_RDY_COUNT,
            "version": VERSION,
            "max_msg_timeout": MAX_MSG_TIMEOUT_MS,
            "msg_timeout": self.msg_timeout_ms,
            "tls_v1": False,
            "deflate": False,
            "deflate_level": _int_field(request, "deflate_level", 6) or 6,
            "max_deflate_level": 6,
            "snappy": False,
            "sample_rate": self.sample_rate,
            "auth_required": False,
            "output_buffer_size": OUTPUT_BUFFER_SIZE,
            "output_buffer_timeout": _int_field(request, "output_buffer_timeout", 0)
            or DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS,
        }
        if self.desired_tag:  # omitempty
            answer["desired_tag"] = self.desired_tag
        return answer

    def _publish(self, name: bytes, params: list[bytes], body: bytes) -> bytes:
        command = name.decode()
        if not params or not params[0]:
            raise _invalid(f"{command} insufficient number of parameters")
        topic_name = params[0].decode(errors="replace")
        _check_name(command, "topic", topic_name, _TOPIC_NAME)
        number = _partition_param(params[1]) if len(params) > 1 else None
        drafts = _drafts(name, body)
        timestamp = time.time_ns()
        with self.store.lock:
            partition = self.store.resolve(self.nsqd, topic_name, number, publishing=True)
            refusal = _take_refusal(partition, "pub")
            if refusal is not None:
                raise refusal
            if not self.store.topics[topic_name].writable:
                raise Refusal("E_FAILED_ON_NOT_WRITABLE", fatal=False)
            if name.endswith(b"_EXT") and not partition.topic.extend:
                raise Refusal("E_EXT_NOT_SUPPORT")
            stored = [self.store.append(partition, draft, timestamp) for draft in drafts]
        return _publish_answer(name, drafts, stored)

    def _subscribe(self, name: bytes, params: list[bytes]) -> bytes:
        command = name.decode()
        if self.state != _INIT:
            raise _invalid(f"cannot {command} in current state")
        if len(params) < (3 if name == b"SUB_ORDERED" else 2):
            raise _invalid(f"{command} insufficient number of parameters")
        topic_name, channel_name = (param.decode(errors="replace") for param in params[:2])
        _check_name(command, "topic", topic_name, _TOPIC_NAME)
        _check_name(command, "channel", channel_name, _CHANNEL_NAME)
        rest = params[2:]
        position = rest.pop() if name == b"SUB_ADVANCED" and rest and b":" in rest[-1] else None
        number = _partition_param(rest[0]) if rest else None
        with self.store.lock:
            partition = self.store.resolve(self.nsqd, topic_name, number)
            self._check_subscription(name, partition)
            channel = self._join(partition, channel_name, position)
            channel.ordered = channel.ordered or name == b"SUB_ORDERED"
            self.detail = name != b"SUB"
        return OK

    def _check_subscription(self, name: bytes, partition: _Partition) -> None:
        refusal = _take_refusal(partition, "sub")
        if refusal is not None:
            raise refusal
        topic = partition.topic
        # The page names plain SUB; SUB_ADVANCED is no ordered sub either.
        if topic.ordered and name != b"SUB_ORDERED":
            raise Refusal("E_SUB_ORDER_IS_MUST")
        if name == b"SUB_ORDERED" and self.sample_rate != 0:
            raise _invalid("SUB_ORDERED needs sample_rate 0")
        if topic.extend and not self.extend_support:
            raise Refusal("E_SUB_EXTEND_NEED")
        if self.extend_support and not topic.extend:
            raise Refusal("E_SUB_EXTEND_FORBIDDON")

    def _join(self, partition: _Partition, name: str, position: bytes | None) -> _Channel:
        if name not in partition.channels and partition.topic.disable_channel_auto_create:
            raise Refusal("E_SUB_CHANNEL_NOT_REGISTERED")
        channel = partition.channel(name)
        start = _start_index(partition.messages, position) if position is not None else None
        # "Only the channel's first client can set it": later ones subscribe where the
        # channel is (the page is silent about an error, so none).
        if start is not None and not channel.sessions:
            channel.seek(start)
        channel.sessions.append(self)
        self.channel = channel
        self.state = _SUBSCRIBED
        return channel

    def _ready(self, params: list[bytes]) -> None:
        if self.state == _CLOSING:
            return None  # nsqd ignores RDY after CLS
        if self.state != _SUBSCRIBED:
            raise _invalid("cannot RDY in current state")
        try:
            count = int(params[0]) if params else 1
        except ValueError:
            raise _invalid(f"RDY could not parse RDY count {params[0]!r}") from None
        if not 0 <= count <= MAX_RDY_COUNT:
            raise _invalid(f"RDY count {count} out of range 0-{MAX_RDY_COUNT}")
        with self.store.lock:
            self.rdy = count
            self.store.lock.notify_all()
        return None

    def _finish(self, params: list[bytes]) -> None:
        channel = self._subscribed_channel("FIN", params)
        with self.store.lock:
            if channel.settle(self, params[0]) is None:
                raise _not_in_flight("FIN", params[0])
            channel.attempts.pop(params[0], None)
            key = (channel.partition.topic.name, channel.name)
            self.store.finished.setdefault(key, []).append(params[0])
            self.store.lock.notify_all()
        return None

    def _requeue(self, params: list[bytes]) -> None:
        channel = self._subscribed_channel("REQ", params)
        if len(params) < 2:
            raise _invalid("REQ insufficient number of params")
        try:
            delay_ms = int(params[1])
        except ValueError:
            raise _invalid(f"REQ could not parse timeout {params[1]!r}") from None
        delay_ms = min(max(delay_ms, 0), MAX_REQ_TIMEOUT_MS)  # clamped, as nsqd 1.x does
        with self.store.lock:
            entry = channel.settle(self, params[0])
            if entry is None:
                raise _not_in_flight("REQ", params[0])
            channel.requeue(entry.message, time.monotonic() + delay_ms / 1000)
            self.store.lock.notify_all()
        return None

    def _touch(self, params: list[bytes]) -> None:
        channel = self._subscribed_channel("TOUCH", params)
        with self.store.lock:
            entry = channel.in_flight.get(params[0])
            if entry is None or entry.session is not self:
                raise _not_in_flight("TOUCH", params[0])
            entry.deadline = time.monotonic() + self.msg_timeout_ms / 1000
            self.store.lock.notify_all()
        return None

    def _close_wait(self, params: list[bytes]) -> bytes:
        if self.state != _SUBSCRIBED:
            raise _invalid("cannot CLS in current state")
        with self.store.lock:
            self.state = _CLOSING  # no more messages; the client closes when it is done
        return b"CLOSE_WAIT"

    def _subscribed_channel(self, command: str, params: list[bytes]) -> _Channel:
        if self.channel is None:
            raise _invalid(f"cannot {command} in current state")
        if not params:
            raise _invalid(f"{command} insufficient number of params")
        return self.channel

    # The delivery thread: heartbeats, messages while RDY allows, timeouts.

    def _deliver(self) -> None:
        while True:
            with self.store.lock:
                frame = self._next_frame()
            if frame is None:
                return
            self._send(*frame)

    def _next_frame(self) -> tuple[int, bytes] | None:
        """The next frame to send, waiting for one; None once the session is closed."""
        lock = self.store.lock
        while not self.closed:
            now = time.monotonic()
            if self.heartbeat_ms > 0 and now >= self.next_heartbeat:
                self.next_heartbeat = now + self.heartbeat_ms / 1000
                return FRAME_RESPONSE, HEARTBEAT
            channel = self.channel
            if channel is not None and channel.expire(now):
                lock.notify_all()  # other consumers of the channel may take them
            if channel is not None and self.state == _SUBSCRIBED and self.in_flight < self.rdy:
                taken = channel.take(self, now)
                if taken is not None:
                    return FRAME_MESSAGE, self._message_frame(*taken)
            lock.wait(self._wait_time(now))
        return None

    def _wait_time(self, now: float) -> float:
        times = [now + MAX_WAIT_SECONDS]
        if self.heartbeat_ms > 0:
            times.append(self.next_heartbeat)
        if self.channel is not None:
            event = self.channel.next_event(now)
            times += [] if event is None else [event]
        return max(min(times) - now, 0.001)

    def _message_frame(self, message: StoredMessage, attempts: int) -> bytes:
        """[8B ts][2B attempts][16B id][ext][detail][body], as the page lays it out."""
        parts = [struct.pack(">QH", message.timestamp, attempts), message.id]
        # A client with extend_support is subscribed to an extend topic only.
        if self.extend_support:
            if message.ext:
                parts += [bytes([EXT_VERSION_JSON]), struct.pack(">H", len(message.ext))]
                parts.append(message.ext)
            else:
                parts.append(bytes([EXT_VERSION_NONE]))
        if self.detail:  # after SUB_ORDERED or SUB_ADVANCED
            parts.append(struct.pack(">QI", message.offset, message.raw_size))
        parts.append(message.body)
        return b"".join(parts)

    # Writing and closing.

    def _send(self, frame_type: int, data: bytes) -> None:
        frame = struct.pack(">ii", len(data) + 4, frame_type) + data
        try:
            with self.write_lock:
                self.sock.sendall(frame)
        except OSError:
            self.close()

    def _linger_close(self) -> None:
        """Close after a fatal error, so that the client reads the error frame: closing
        with its later commands unread would reset the connection and lose the frame."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(LINGER_SECONDS)
            while self.file.read(4096):
                pass
        self.close()

    def close(self) -> None:
        """Safe twice, from any thread."""
        with self.store.lock:
            if self.closed:
                return
            self.closed = True
            if self.channel is not None:
                self.channel.drop_session(self, time.monotonic())
            self.store.sessions.discard(self)
            self.store.lock.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _not_in_flight(command: str, message_id: bytes) -> Refusal:
    code = {"FIN": "E_FIN_FAILED", "REQ": "E_REQ_FAILED", "TOUCH": "E_TOUCH_FAILED"}[command]
    return Refusal(code, f"{command} {message_id.hex()} failed ID not in flight", fatal=False)


def _int_field(request: dict[str, Any], name: str, default: int) -> int:
    value = request.get(name, default)
    if type(value) is not int:
        raise Refusal("E_BAD_BODY", f"IDENTIFY {name} is not an integer: {value!r}")
    return value


# HTTP: the lookupd's API and each nsqd's minimal one.


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class _HttpReply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json; charset=utf-8"),)


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _enveloped(
    route: Callable[[str, dict[str, str]], Any], path: str, query: dict[str, str], v1: bool
) -> _HttpReply:
    """0.3.x's envelope unless the client asked for v1: {"status_code","status_txt","data"},
    and every error as HTTP 500 with its text in status_txt; v1 sends the data bare and an
    error with its own status as {"message": ...}."""
    try:
        data = route(path, query)
    except _HttpError as error:
        if v1:
            return _HttpReply(error.status, _json({"message": error.message}), _V1_HEADERS)
        return _HttpReply(
            500, _json({"status_code": 500, "status_txt": error.message, "data": None})
        )
    if isinstance(data, _HttpReply):
        return data
    if v1:
        return _HttpReply(200, _json(data), _V1_HEADERS)
    return _HttpReply(200, _json({"status_code": 200, "status_txt": "OK", "data": data}))


_V1_HEADERS = (
    ("Content-Type", "application/json; charset=utf-8"),
    ("X-NSQ-Content-Type", "nsq; version=1.0"),
)
_PLAIN_OK = _HttpReply(200, b"OK", (("Content-Type", "text/plain; charset=utf-8"),))


def _http_server(route: Callable[[str, dict[str, str]], Any]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            v1 = self.headers.get("Accept") == V1_ACCEPT
            reply = _enveloped(route, url.path, query, v1)
            self.send_response(reply.status)
            for key, value in reply.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        do_POST = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests look at the state instead."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def _port_of(server: ThreadingHTTPServer | socket.socket) -> int:
    sock = server.socket if isinstance(server, ThreadingHTTPServer) else server
    return int(sock.getsockname()[1])


class _NsqdNode:
    """One nsqd: its TCP listener and its HTTP API (/ping and /info only: the page's
    /pub, /pubtrace, /pub_ext and /channel/create are not served)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.http = _http_server(self._route)
        self.tcp_port = _port_of(self.listener)
        self.http_port = _port_of(self.http)

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

    def _route(self, path: str, query: dict[str, str]) -> Any:
        if path == "/ping":
            return _PLAIN_OK
        if path == "/info":
            return {
                "version": VERSION,
                "broadcast_address": "127.0.0.1",
                "hostname": HOSTNAME,
                "http_port": self.http_port,
                "tcp_port": self.tcp_port,
                "ha_support": True,
            }
        raise _HttpError(404, "NOT_FOUND")


class YouzanCluster(StartsAndStops):
    """A fork cluster: one nsqlookupd (HTTP only) and `nsqd_count` nsqds, replica 1."""

    def __init__(self, topics: Sequence[ForkTopic] = (), nsqd_count: int = 2) -> None:
        if nsqd_count < 1:
            raise ValueError("a cluster has at least one nsqd")
        self._store = _Store(nsqd_count)
        for topic in topics:
            self._store.add_topic(topic)
        self._nsqds = [_NsqdNode(index) for index in range(nsqd_count)]
        self._lookupd = _http_server(self._lookupd_route)
        self.lookupd_http_address = f"127.0.0.1:{_port_of(self._lookupd)}"
        self.nsqd_tcp_addresses = [nsqd.tcp_address for nsqd in self._nsqds]
        self.nsqd_http_addresses = [f"127.0.0.1:{nsqd.http_port}" for nsqd in self._nsqds]
        self._servers = [self._lookupd, *(nsqd.http for nsqd in self._nsqds)]
        self._threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()
        self._started = False
        self._stopped = False

    # Lifetime.

    def start(self) -> None:
        self._started = True
        for server in self._servers:
            # shutdown() waits for the loop's next poll: short ones keep stop() fast.
            self._spawn(functools.partial(server.serve_forever, HTTP_POLL_SECONDS))
        for nsqd in self._nsqds:
            self._spawn(functools.partial(self._accept, nsqd))

    def stop(self) -> None:
        """Close every listener and connection and join every thread. Safe twice."""
        if self._stopped:
            return
        self._stopped = True
        for nsqd in self._nsqds:
            with contextlib.suppress(OSError):
                nsqd.listener.shutdown(socket.SHUT_RDWR)
            nsqd.listener.close()
        for server in self._servers:
            if self._started:
                server.shutdown()
            server.server_close()
        with self._store.lock:
            sessions = list(self._store.sessions)
        for session in sessions:
            session.close()
        self._join_all()

    def _join_all(self) -> None:
        # Accepting threads end first (their listeners are closed), so once these are
        # joined no thread is added: join until the list stops growing.
        joined = 0
        while True:
            with self._threads_lock:
                threads = self._threads[joined:]
            if not threads:
                return
            for thread in threads:
                thread.join()
            joined += len(threads)

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        with self._threads_lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self, nsqd: _NsqdNode) -> None:
        while True:
            try:
                sock, _ = nsqd.listener.accept()
            except OSError:  # the listener was closed: the cluster stops
                return
            session = _Session(self._store, nsqd.index, sock)
            with self._store.lock:
                self._store.sessions.add(session)
            if self._stopped:
                session.close()
                session.file.close()
                continue
            self._spawn(functools.partial(session.serve, self._spawn))

    # What tests script.

    def add_topic(self, topic: ForkTopic) -> None:
        with self._store.lock:
            self._store.add_topic(topic)

    def inject(
        self,
        topic: str,
        partition: int,
        body: bytes,
        *,
        trace_id: int = 0,
        tag: str = "",
        ext: bytes = b"",
        timestamp: int | None = None,
    ) -> StoredMessage:
        """Store a message as if published (whatever the leader, refusals or writability).
        ext and tag are stored as given: a tag without ext goes out with ext version 0."""
        with self._store.lock:
            target = self._store.partition(topic, partition)
            if (ext or tag) and not target.topic.extend:
                raise ValueError(f"topic {topic!r} is not an extend topic: no ext, no tag")
            draft = _Draft(body, trace_id=trace_id, ext=ext, tag=tag)
            stamp = time.time_ns() if timestamp is None else timestamp
            return self._store.append(target, draft, stamp)

    def refuse_next(
        self,
        topic: str,
        partition: int,
        code: str,
        times: int = 1,
        *,
        on: Literal["pub", "sub"] = "pub",
    ) -> None:
        """Answer the next `times` PUB-family commands to the partition (or SUB-family ones,
        with on="sub") with this error code. On PUB, not-leader, not-writable and
        E_PUB_TOO_MUCH_WAITING leave the connection open; every other code, and every
        code on SUB, closes it."""
        with self._store.lock:
            self._store.partition(topic, partition).refusals[on].extend([code] * times)

    def move_partition(self, topic: str, partition: int, nsqd: int) -> None:
        """A leader change: lookups name the new nsqd, the old one answers
        E_TOPIC_NOT_EXIST for the partition. Its consumers on the old nsqd are
        disconnected (the page is silent: this makes them look the leader up again).
        The messages and channels move along: the replicas hold them too."""
        if not 0 <= nsqd < len(self._nsqds):
            raise ValueError(f"no nsqd {nsqd}")
        with self._store.lock:
            moved = self._store.partition(topic, partition)
            moved.leader = nsqd
            stranded = [
                session
                for channel in moved.channels.values()
                for session in channel.sessions
                if session.nsqd != nsqd
            ]
        for session in stranded:
            session.close()

    def set_writable(self, topic: str, enabled: bool) -> None:
        """Unwritable is a topic "right after creation": lookups with access=w list no
        partition and no producer, and publishing gets E_FAILED_ON_NOT_WRITABLE."""
        with self._store.lock:
            self._store.topic(topic).writable = enabled

    # What tests read.

    def stored(self, topic: str, partition: int | None = None) -> list[StoredMessage]:
        """Every message of the topic (or of one partition), by partition then offset."""
        with self._store.lock:
            partitions = self._store.topic(topic).partitions
            if partition is not None:
                partitions = [self._store.partition(topic, partition)]
            chosen = partitions
            return [message for p in chosen for message in p.messages]

    def finished(self, topic: str, channel: str) -> list[bytes]:
        """The ids FIN'd on the topic's channel, in order."""
        with self._store.lock:
            return list(self._store.finished.get((topic, channel), []))

    def commands(self, nsqd: int | None = None) -> list[bytes]:
        """Every command received (by one nsqd, or all), raw and in order: the line with its
        "\\n", and for those with a body the 4-byte size and the body."""
        with self._store.lock:
            return [raw for index, raw in self._store.commands if nsqd in (None, index)]

    def connections(self) -> int:
        """Client connections to the nsqds open now."""
        with self._store.lock:
            return len(self._store.sessions)

    # The lookupd's HTTP API.

    def _lookupd_route(self, path: str, query: dict[str, str]) -> Any:
        routes: dict[str, Callable[[dict[str, str]], Any]] = {
            "/lookup": self._lookup,
            "/listlookup": lambda _: self._listlookup(),
            "/info": lambda _: {"version": VERSION, "ha_support": True},
            "/topics": lambda _: {"topics": list(self._store.topics)},
            "/channels": self._channels,
            "/nodes": lambda _: {"producers": self._nodes()},
            "/ping": lambda _: _PLAIN_OK,
        }
        if path not in routes:
            raise _HttpError(404, "NOT_FOUND")
        with self._store.lock:
            return routes[path](query)

    def _lookup(self, query: Mapping[str, str]) -> dict[str, Any]:
        topic = self._store.topics.get(_topic_arg(query))
        access = query.get("access", "r")
        if access not in ("r", "w"):
            raise _HttpError(400, "INVALID_ACCESS_MODE")
        partitions = _partition_filter(topic, query.get("partition"))
        if topic is None:
            if access == "w":
                raise _HttpError(404, "Key not found")
            return {"channels": [], "partitions": {}, "producers": []}
        if access == "w":
            partitions = self._writable(topic, partitions)
        data: dict[str, Any] = {"channels": topic.channel_names()}
        if query.get("metainfo") == "true":
            data["meta"] = self._meta(topic.config)
        # Keys in Go's order for a map: sorted, the partition ids too (as strings).
        data["partitions"] = {
            key: self._nsqds[p.leader].peer()
            for key, p in sorted((str(p.number), p) for p in partitions)
        }
        leaders = sorted({p.leader for p in partitions})
        data["producers"] = [self._nsqds[index].peer() for index in leaders]
        return data

    @staticmethod
    def _writable(topic: _Topic, partitions: list[_Partition]) -> list[_Partition]:
        """access=w: nothing before writes are enabled, then the partitions with a channel
        (no node is tombstoned here)."""
        if not topic.writable:
            return []
        kept = [p for p in partitions if p.channels]
        if not kept:
            raise _HttpError(
                500, "Topic has no channel, should init at least one for the new topic"
            )
        return kept

    def _meta(self, config: ForkTopic) -> dict[str, Any]:
        return {
            "disable_channel_auto_create": config.disable_channel_auto_create,
            "extend_support": config.extend,
            # The fork needs multi_part to put two partitions on one node.
            "multi_part": config.partitions > len(self._nsqds),
            "ordered": config.ordered,
            "partition_num": config.partitions,
            "replica": 1,
        }

    def _listlookup(self) -> dict[str, Any]:
        # One lookupd, the leader. The fork's ID format is not on the page; its TCP and
        # RPC ports are not served here, hence "0".
        port = self.lookupd_http_address.rpartition(":")[2]
        node = {
            "ID": self.lookupd_http_address,
            "NodeIP": "127.0.0.1",
            "TcpPort": "0",
            "HttpPort": port,
            "RpcPort": "0",
            "Epoch": 1,
        }
        return {"lookupdleader": node, "lookupdnodes": [node]}

    def _channels(self, query: Mapping[str, str]) -> dict[str, Any]:
        topic = self._store.topics.get(_topic_arg(query))
        return {"channels": [] if topic is None else topic.channel_names()}

    def _nodes(self) -> list[dict[str, Any]]:
        """nsqlookupd v1's /nodes: each nsqd with the topics it leads a partition of, none
        tombstoned."""
        nodes = []
        for nsqd in self._nsqds:
            topics = [
                name
                for name, topic in self._store.topics.items()
                if any(p.leader == nsqd.index for p in topic.partitions)
            ]
            nodes.append({**nsqd.peer(), "tombstones": [False] * len(topics), "topics": topics})
        return nodes


def _topic_arg(query: Mapping[str, str]) -> str:
    if not query.get("topic"):
        raise _HttpError(400, "MISSING_ARG_TOPIC")
    return query["topic"]


def _partition_filter(topic: _Topic | None, value: str | None) -> list[_Partition]:
    partitions = [] if topic is None else topic.partitions
    if value is None:
        return partitions
    try:
        number = int(value)
    except ValueError:
        raise _HttpError(400, "INVALID_ARG_PARTITION") from None
    return [p for p in partitions if p.number == number]
