"""The state the nsqds and the lookupd share: topics as the fork's admin creates them,
their partitions (each led by one nsqd) and stored messages, each channel's delivery
state (waiting, in flight, attempts, timeouts, requeues), what was FIN'd and every
command received. Store holds it all under one lock; every method here runs with
Store.lock held.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nsqtools.testing.youzan.wire import (
    DISK_LENGTH_PREFIX,
    FIRST_SEQUENCE,
    MESSAGE_HEADER_SIZE,
    NON_FATAL_ON_PUB,
    PARTITION_SHIFT,
    Refusal,
)

if TYPE_CHECKING:
    from nsqtools.testing.youzan.session import ForkSession


@dataclass(frozen=True)
class ForkTopic:
    """A topic as the fork's admin would create it."""

    name: str
    partitions: int = 2  # partition p is led by nsqd p % len(nsqds)
    ordered: bool = False
    extend: bool = False  # "extend_support" in meta; needs extend_support in IDENTIFY
    disable_channel_auto_create: bool = False
    # Channels created with the topic on every partition (lookup's "channels"; access=w
    # needs one): they get every message, as they exist before the first.
    channels: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredMessage:
    """One message as a partition stores it."""

    topic: str
    partition: int
    internal_id: int  # (partition << 50) + sequence (from FIRST_SEQUENCE, per partition)
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


@dataclass
class _Waiting:
    """A message waiting in a channel to be sent; a requeued one once its delay is over."""

    message: StoredMessage
    ready_at: float = 0.0


@dataclass
class InFlight:
    message: StoredMessage
    session: ForkSession
    deadline: float


class Channel:
    """Delivery state of one channel of one partition, shared by its consumers."""

    def __init__(self, partition: Partition, name: str) -> None:
        self.partition = partition
        self.name = name
        # partition.messages[cursor:] were never waiting here. "A new channel starts at
        # the end of its partition" (spec, Observed on a running fork): it gets only what
        # is stored after it exists. The topic's own channels exist before any message.
        self.cursor = len(partition.messages)
        self.waiting: list[_Waiting] = []  # in offset order
        self.in_flight: dict[bytes, InFlight] = {}
        self.attempts: dict[bytes, int] = {}
        self.sessions: list[ForkSession] = []
        self.ordered = False
        self.requeue_count = 0  # REQs (nsqd's channel requeue_count)
        self.timeout_count = 0  # messages that timed out in flight
        self.created_over_http = False  # by nsqd's POST /channel/create
        self.duplicate_next = False  # the next message sent goes out twice: order()

    def seek(self, start: int) -> None:
        """Send from partition.messages[start] on (SUB_ADVANCED); what is in flight stays."""
        self.waiting = []
        self.cursor = start

    def order(self) -> None:
        """SUB_ORDERED: the channel is ordered from now on. The first SUB_ORDERED on a
        channel created over HTTP delivers the first message twice, same id and attempts
        (spec, "Observed on a running fork": 6 of 7 tries; here always); the copy is not
        in flight, so its FIN fails."""
        if not self.ordered and self.created_over_http:
            self.duplicate_next = True
        self.ordered = True

    def sends_twice(self) -> bool:
        """True, once, for the message just taken if it goes out twice (order())."""
        twice, self.duplicate_next = self.duplicate_next, False
        return twice

    def take(self, session: ForkSession, now: float) -> tuple[StoredMessage, int] | None:
        """The next message for `session` and its attempts, now in flight; or None.
        The fork's channel sends its messages one after the other: the first one ready
        waits for a consumer that may take it, and the ones behind it wait too."""
        self._pull()
        if self.ordered:
            # "One message in flight per partition connection, whatever the RDY", and
            # a requeued message comes back before the next even when delayed. Counted
            # per channel partition: the same for the one connection per partition of
            # an ordered consumer.
            if self.in_flight or not self.waiting or self.waiting[0].ready_at > now:
                return None
            chosen: _Waiting | None = self.waiting[0]
        else:
            chosen = next((w for w in self.waiting if w.ready_at <= now), None)
        if chosen is None or not self._dispatches_to(session, chosen.message):
            return None
        self.waiting.remove(chosen)
        message = chosen.message
        attempts = self.attempts.get(message.id, 0) + 1
        self.attempts[message.id] = attempts
        deadline = now + session.msg_timeout_ms / 1000
        self.in_flight[message.id] = InFlight(message, session, deadline)
        session.in_flight += 1
        return message, attempts

    def _dispatches_to(self, session: ForkSession, message: StoredMessage) -> bool:
        """Tags (spec, Observed: Tags): a tagged message goes only to the consumers that
        identified its tag when one is connected; any other message to the untagged
        ones. With none connected the channel stalls at that message, "by design"."""
        wanted = message.tag and any(s.desired_tag == message.tag for s in self.sessions)
        return session.desired_tag == (message.tag if wanted else "")

    def settle(self, session: ForkSession, message_id: bytes) -> InFlight | None:
        """Take a message `session` has in flight out of flight (FIN, REQ)."""
        entry = self.in_flight.get(message_id)
        if entry is None or entry.session is not session:
            return None
        del self.in_flight[message_id]
        session.in_flight -= 1
        return entry

    def requeue(self, message: StoredMessage, ready_at: float) -> None:
        """A REQ: the message waits again, and /stats counts it."""
        self.requeue_count += 1
        self._put_back(message, ready_at)

    def _put_back(self, message: StoredMessage, ready_at: float) -> None:
        entry = _Waiting(message, ready_at)
        bisect.insort(self.waiting, entry, key=lambda w: w.message.offset)

    def unconsumed(self) -> list[StoredMessage]:
        """What the channel has not finished: waiting, in flight, and not yet pulled
        (/stats's depth)."""
        pending = [w.message for w in self.waiting]
        pending += [entry.message for entry in self.in_flight.values()]
        pending += self.partition.messages[self.cursor :]
        return pending

    def expire(self, now: float) -> bool:
        """Requeue what timed out; True if anything did."""
        expired = [key for key, entry in self.in_flight.items() if entry.deadline <= now]
        for key in expired:
            entry = self.in_flight.pop(key)
            entry.session.in_flight -= 1
            self._put_back(entry.message, now)
        self.timeout_count += len(expired)
        return bool(expired)

    def drop_session(self, session: ForkSession, now: float) -> None:
        """A consumer went away: what it had in flight is sent again at once. (The page is
        silent; sooner than waiting for msg_timeout, and tests need no long timeout.)"""
        with contextlib.suppress(ValueError):
            self.sessions.remove(session)
        for key, entry in list(self.in_flight.items()):
            if entry.session is session:
                del self.in_flight[key]
                self._put_back(entry.message, now)
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
class Move:
    """A leader move under way ("takes 0.5-1.4 s"): the partition has no writable
    leader; its old and new nsqds refuse PUB with `refusal` (not-writable, then
    not-leader)."""

    to: int  # the new leader's index
    refusal: str = "E_FAILED_ON_NOT_WRITABLE"


@dataclass
class Partition:
    topic: ForkTopic
    number: int
    leader: int  # the nsqd's index
    move: Move | None = None
    former_leaders: set[int] = field(default_factory=set)  # they answer not-leader
    messages: list[StoredMessage] = field(default_factory=list)
    channels: dict[str, Channel] = field(default_factory=dict)
    # Error codes for the next commands, by kind ("pub", "sub"): refuse_next().
    refusals: dict[str, list[str]] = field(default_factory=lambda: {"pub": [], "sub": []})

    @property
    def next_offset(self) -> int:
        last = self.messages[-1] if self.messages else None
        return 0 if last is None else last.offset + last.raw_size

    def channel(self, name: str) -> Channel:
        if name not in self.channels:
            self.channels[name] = Channel(self, name)
        return self.channels[name]


@dataclass
class Topic:
    config: ForkTopic
    partitions: list[Partition]
    writable: bool = True

    def channel_names(self) -> list[str]:
        """Every partition's channels, each once, in order of creation."""
        names: dict[str, None] = {}
        for partition in self.partitions:
            names.update(dict.fromkeys(partition.channels))
        return list(names)


@dataclass(frozen=True)
class Draft:
    """A message to store, as read from a PUB-family body."""

    body: bytes
    trace_id: int = 0
    traced: bool = False  # asked for the 30-byte answer
    ext: bytes = b""
    tag: str = ""


class Store:
    """Topics, messages, channels and the record of commands, under one lock."""

    def __init__(self, nsqd_count: int) -> None:
        self.lock = threading.Condition()
        self.nsqd_count = nsqd_count
        self.topics: dict[str, Topic] = {}
        self.finished: dict[tuple[str, str], list[bytes]] = {}
        self.commands: list[tuple[int, bytes]] = []
        self.sessions: set[ForkSession] = set()

    def add_topic(self, config: ForkTopic) -> None:
        if config.name in self.topics:
            raise ValueError(f"topic {config.name!r} exists already")
        if config.partitions < 1:
            raise ValueError("a topic has at least one partition")
        partitions = [
            Partition(config, number, number % self.nsqd_count)
            for number in range(config.partitions)
        ]
        for partition in partitions:
            for name in config.channels:
                partition.channel(name)
        self.topics[config.name] = Topic(config, partitions)

    def topic(self, name: str) -> Topic:
        try:
            return self.topics[name]
        except KeyError:
            raise KeyError(f"no topic {name!r}") from None

    def partition(self, topic: str, number: int) -> Partition:
        partitions = self.topic(topic).partitions
        if not 0 <= number < len(partitions):
            raise KeyError(f"topic {topic!r} has no partition {number}")
        return partitions[number]

    def append(self, partition: Partition, draft: Draft, timestamp: int) -> StoredMessage:
        sequence = FIRST_SEQUENCE + len(partition.messages)
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
    ) -> Partition:
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


def move_refusal(store: Store, nsqd: int, topic_name: str, number: int | None) -> Refusal | None:
    """A PUB to a partition that is moving, or moved away from this nsqd: "the old
    leader answers E_FAILED_ON_NOT_WRITABLE then E_FAILED_ON_NOT_LEADER (both with an
    empty description, trailing space, non-fatal)"; after the move, not-leader."""
    topic = store.topics.get(topic_name)
    if topic is None or number is None or not 0 <= number < len(topic.partitions):
        return None
    partition = topic.partitions[number]
    move = partition.move
    if move is not None and nsqd in (partition.leader, move.to):
        return Refusal(move.refusal, "", fatal=False)
    if nsqd in partition.former_leaders and nsqd != partition.leader:
        return Refusal("E_FAILED_ON_NOT_LEADER", "", fatal=False)
    return None


def take_refusal(partition: Partition, kind: str) -> Refusal | None:
    codes = partition.refusals[kind]
    if not codes:
        return None
    code = codes.pop(0)
    return Refusal(code, fatal=kind == "sub" or code not in NON_FATAL_ON_PUB)
