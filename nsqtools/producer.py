"""Publishing to one or more nsqds: pipelined PUB, MPUB and DPUB over Conn.

Owns the Producer, how messages become commands (MPUBs cut to nsqd's limits), and what
happens when an nsqd refuses or fails them. The Producer dials each nsqd when a publish
first needs it; keeps many commands in flight per connection, written in the order they
were made and answered FIFO; and offers a streaming path (put, flush) that batches
messages into MPUBs behind bounded back-pressure and reports every outcome, message by
message, to the caller (on_outcome) as well as in counters.

Nothing is refused locally that nsqd may accept (only empty messages, which nsqd never
takes). nsqd's limits are learned from its own refusals: an MPUB refused with E_BAD_BODY
or E_BAD_MESSAGE is cut again under the limit nsqd named and re-sent, so only the
messages nsqd really refuses fail. A connection that fails (nsqd killed, restarting, a
link cut) is redialed with backoff and the commands it did not answer are re-sent in
order; the messages meant for it fail only once it has been down for reconnect_timeout
(or when it was never reachable at all). Meanwhile nothing is resolved, so put() blocks
at its limits and the caller stops reading: nothing piles up without bound.

Modes across nsqds: "all" (every nsqd gets every message, as to_nsq does), or a host
policy from hostpolicy.py ("round-robin", "hostpool", "epsilon-greedy", as nsq_to_nsq).

The Youzan fork: a batch may name its partition (PUB/MPUB with it), carry trace ids
(PUB_TRACE/MPUB_TRACE, whose 30-byte answer comes back in its Outcome) or an extend
header (PUB_EXT, one message). With Partitions (nsqtools.partitions), batches go to
their partition's leader, a partition picked for each batch when none is named, and a
refusal that says the partition moved (not leader, not writable, not on this nsqd)
makes Partitions look the topic up again and the batch go to the new leader, at most
MAX_REROUTES times.
"""

from __future__ import annotations

import logging
import random
import re
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from itertools import accumulate
from types import MappingProxyType, TracebackType
from typing import Any, NamedTuple, Self

import trio

from nsqtools.addresses import split_address
from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import ConnectError, ConnectionClosed, NsqError, NsqErrorResponse
from nsqtools.hostpolicy import MODES, make_policy
from nsqtools.partitions import PartitionError, Partitions
from nsqtools.protocol import LocalProtocolError, ProtocolError, check_topic, commands, youzan
from nsqtools.transport import Conn, open_connection

log = logging.getLogger("nsqtools.producer")

__all__ = ["MODES", "Outcome", "Producer", "cut_points"]

# nsqd's defaults (--max-msg-size, --max-body-size): where cutting starts, until an nsqd
# says its own limits are smaller. Larger messages are still sent, each on its own.
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024
DEFAULT_MAX_UNACKNOWLEDGED = 200_000
DEFAULT_MAX_UNACKNOWLEDGED_BYTES = 64 * 1024 * 1024
DEFAULT_RECONNECT_TIMEOUT = 120.0
# put() hands its messages to the connections, and lets them run, after this many bytes.
DISPATCH_BYTES = 256 * 1024
# put_many() queues at most this many messages before it looks at the limits again.
PUT_MANY_CHUNK = 1024
# How often a batch follows its partition to a new leader before it fails.
MAX_REROUTES = 5
# A lost nsqd is redialed after 50ms, 100ms, ... up to this, with 20% jitter.
FIRST_REDIAL_DELAY = 0.05
MAX_REDIAL_DELAY = 2.0

_MPUB_OVERHEAD = 4  # the message count before the first message
_MESSAGE_OVERHEAD = 4  # the size before each message
# nsqd's answers that name the limit a command broke, e.g. "MPUB body too big 6000 > 4096".
_TOO_BIG = re.compile(r"too big (\d+) > (\d+)")
_SIZE_ERRORS = {"E_BAD_BODY", "E_BAD_MESSAGE"}
# nsqd could not queue the messages (the topic is closing as nsqd exits): try again.
_TRANSIENT_ERRORS = {"E_PUB_FAILED", "E_MPUB_FAILED", "E_DPUB_FAILED"}


# -- encoding ---------------------------------------------------------------------------


def cut_points(
    sizes: Sequence[int], max_body_size: int, max_message_size: int | None = None
) -> list[tuple[int, int]]:
    """Ranges [start, end) of messages, in order, each fitting one MPUB body of at most
    max_body_size bytes. A message too big to share an MPUB, or over max_message_size,
    gets a range of its own (it goes out as a PUB)."""
    if max_message_size is not None and sizes and max(sizes) > max_message_size:
        return list(_cut_around_oversize(sizes, max_body_size, max_message_size))
    count = len(sizes)
    if not count:
        return []
    if commands.mpub_body_size(sizes) <= max_body_size:
        return [(0, count)]
    # ends[i]: MPUB body bytes taken by messages 0..i, without the count.
    ends = list(accumulate(map(_MESSAGE_OVERHEAD.__add__, sizes)))
    ranges = []
    start, before = 0, 0
    room = max_body_size - _MPUB_OVERHEAD
    while start < count:
        end = max(bisect_right(ends, before + room, start), start + 1)
        ranges.append((start, end))
        before, start = ends[end - 1], end
    return ranges


def _cut_around_oversize(
    sizes: Sequence[int], max_body_size: int, max_message_size: int
) -> Iterator[tuple[int, int]]:
    start = 0
    for index, size in enumerate(sizes):
        if size > max_message_size:
            for first, last in cut_points(sizes[start:index], max_body_size):
                yield start + first, start + last
            yield index, index + 1
            start = index + 1
    for first, last in cut_points(sizes[start:], max_body_size):
        yield start + first, start + last


# -- outcomes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of consecutive messages put together: acknowledged by every nsqd they
    were meant for (error None), or failed with `error`. `tokens` are what the caller
    passed with them to put()/put_many(), in the same order (None when none were).
    `nsqd`: in the modes that pick one nsqd, the one that acknowledged them (the last
    one, if a batch cut in pieces went to several); None in "all" mode or on failure.
    On the Youzan fork: `partition` they went to, and `trace`, nsqd's answer to a traced
    publish (for MPUB_TRACE: the first message's id and offset, the batch's size)."""

    topic: str
    bodies: Sequence[bytes]
    tokens: Sequence[Any] | None
    error: Exception | None
    nsqd: str | None = None
    partition: int | None = None
    trace: youzan.TraceAnswer | None = None


OutcomeHandler = Callable[[Outcome], None]


class _Batch:
    """Messages put together for one topic (and delay), sent as one command to each nsqd
    meant, and what became of each message."""

    __slots__ = (
        "acknowledged_by",
        "awaiting",
        "bodies",
        "command",
        "delay",
        "done",
        "errors",
        "fork",
        "resolved",
        "sequence",
        "size",
        "tokens",
        "topic",
        "trace",
    )

    def __init__(
        self,
        topic: str,
        bodies: list[bytes],
        tokens: list[Any] | None,
        delay: float | None,
        size: int,
        sequence: int,
        fork: ForkPublish | None = None,
    ) -> None:
        self.topic = topic
        self.bodies = bodies
        self.tokens = tokens
        self.delay = delay
        self.size = size  # message bytes, for back-pressure
        self.sequence = sequence  # the order batches were made in
        self.fork = fork
        self.command = _command(topic, bodies, delay, fork)
        self.trace: youzan.TraceAnswer | None = None
        self.awaiting = 0  # parts of it still without an outcome
        self.errors: list[NsqError | None] | None = None  # per message, once one failed
        self.resolved = False
        self.done = trio.Event()
        self.acknowledged_by: str | None = None  # modes that pick one nsqd: the last to ack

    @property
    def count(self) -> int:
        return len(self.bodies)

    def fail(self, start: int, end: int, error: NsqError) -> None:
        """Messages start..end failed (the first reason given for each is kept)."""
        if self.errors is None:
            self.errors = [None] * len(self.bodies)
        errors = self.errors
        for index in range(start, end):
            if errors[index] is None:
                errors[index] = error

    def first_error(self) -> NsqError | None:
        if self.errors is None:
            return None
        return next((error for error in self.errors if error is not None), None)

    def outcomes(self) -> Iterator[Outcome]:
        """Runs of consecutive messages with the same outcome, in order."""
        errors = self.errors or [None] * len(self.bodies)
        start = 0
        for index in range(1, len(errors) + 1):
            if index == len(errors) or errors[index] is not errors[start]:
                tokens = None if self.tokens is None else self.tokens[start:index]
                bodies = self.bodies if index - start == len(errors) else self.bodies[start:index]
                error = errors[start]
                nsqd = self.acknowledged_by if error is None else None
                yield self.outcome(bodies, tokens, error, nsqd)
                start = index

    def outcome(
        self,
        bodies: Sequence[bytes],
        tokens: Sequence[Any] | None,
        error: Exception | None,
        nsqd: str | None,
    ) -> Outcome:
        partition = None if self.fork is None else self.fork.partition
        return Outcome(self.topic, bodies, tokens, error, nsqd, partition, self.trace)

    def note_answer(self, response: bytes, address: str) -> NsqError | None:
        """Keep a traced publish's answer; an answer that is not one is an error."""
        if self.fork is None or not self.fork.traced:
            return None
        try:
            self.trace = youzan.TraceAnswer.parse(response)
        except ProtocolError as error:
            return NsqError(f"{address}: {error}")
        return None


@dataclass(frozen=True, slots=True)
class ForkPublish:
    """How the Youzan fork publishes a batch: to this partition (None: the one nsqd
    leads), with a trace id per message (PUB_TRACE, MPUB_TRACE), or with an extend
    header (PUB_EXT: one message; its "##trace_id" asks for a traced answer)."""

    partition: int | None = None
    trace_ids: Sequence[int] | None = None
    ext: Mapping[str, str] | None = None

    @property
    def traced(self) -> bool:
        return self.trace_ids is not None or (
            self.ext is not None and youzan.TRACE_ID_KEY in self.ext
        )

    def piece(self, start: int, end: int) -> ForkPublish:
        if self.trace_ids is None:
            return self
        return ForkPublish(self.partition, self.trace_ids[start:end], self.ext)


def _command(
    topic: str, bodies: list[bytes], delay: float | None, fork: ForkPublish | None = None
) -> bytes:
    if delay is not None:
        return commands.dpub(topic, delay, bodies[0])
    if fork is not None:
        return _fork_command(topic, bodies, fork)
    if len(bodies) == 1:
        return commands.pub(topic, bodies[0])
    return commands.mpub(topic, bodies, list(map(len, bodies)))


def _fork_command(topic: str, bodies: list[bytes], fork: ForkPublish) -> bytes:
    partition = fork.partition
    if fork.ext is not None or fork.trace_ids is not None:
        if partition is None:
            raise LocalProtocolError("traced and extended publishing needs a partition")
        if fork.ext is not None:
            return youzan.pub_ext(topic, partition, fork.ext, bodies[0])
        if fork.trace_ids is not None and len(bodies) == 1:
            return youzan.pub_trace(topic, partition, fork.trace_ids[0], bodies[0])
        return youzan.mpub_trace(topic, partition, fork.trace_ids or (), bodies)
    if len(bodies) == 1:
        return commands.pub(topic, bodies[0], partition)
    return commands.mpub(topic, bodies, list(map(len, bodies)), partition)


class _Part:
    """Messages start..end of a batch as one command to one nsqd: the whole batch, or a
    piece of it cut again after that nsqd refused the whole for its size."""

    __slots__ = ("batch", "command", "end", "reroutes", "start", "tried")

    def __init__(self, batch: _Batch, start: int = 0, end: int | None = None) -> None:
        self.batch = batch
        self.start = start
        self.end = batch.count if end is None else end
        whole = start == 0 and self.end == batch.count
        fork = None if batch.fork is None else batch.fork.piece(start, self.end)
        self.command = (
            batch.command
            if whole
            else _command(batch.topic, batch.bodies[start : self.end], batch.delay, fork)
        )
        self.tried: list[int] = []  # host policies: nsqds that failed it
        self.reroutes = 0  # the Youzan fork: times it followed its partition's leader

    @property
    def count(self) -> int:
        return self.end - self.start

    @property
    def order(self) -> tuple[int, int]:
        return self.batch.sequence, self.start

    def sizes(self) -> list[int]:
        return list(map(len, self.batch.bodies[self.start : self.end]))


# -- one nsqd ---------------------------------------------------------------------------

PartHandler = Callable[["_Node", _Part, NsqError | None, float], None]


class _Node:
    """One nsqd: its connection, dialed when a part needs it and redialed with backoff,
    the parts waiting for it, and the limits it has told us about. One task writes the
    parts in order, many in flight; the connection reports each answer, in order, as it
    comes. Parts that come back for another try go in front again, in their first order."""

    def __init__(
        self,
        index: int,
        address: str,
        config: ClientConfig,
        reconnect_timeout: float,
        on_part: PartHandler,
    ) -> None:
        self.index = index
        self.address = address
        self._config = config
        self._reconnect_timeout = reconnect_timeout
        self._on_part = on_part  # with the error, or None, and the response time
        self._outbox: deque[_Part] = deque()
        self._again: list[_Part] = []  # parts back for another try
        self._wakeup = trio.Event()
        self._conn: Conn | None = None
        self.ever_connected = False
        self.down_since: float | None = None  # since the first failure after a success
        self._dial_failures = 0
        self._next_dial = 0.0
        self._dial_error: NsqError | None = None  # why the last dial failed
        # Limits nsqd named when it refused a command (None: none refused yet).
        self.max_message_size: int | None = None
        self.max_body_size: int | None = None

    def send(self, part: _Part) -> None:
        self._outbox.append(part)
        self._wakeup.set()

    def send_again(self, part: _Part) -> None:
        self._again.append(part)
        self._wakeup.set()

    def given_up(self, now: float) -> bool:
        """Never reachable, or down for reconnect_timeout: what is meant for it fails."""
        if not self.ever_connected:
            return True
        down_for = 0.0 if self.down_since is None else now - self.down_since
        return down_for >= self._reconnect_timeout

    def mark_down(self, now: float, error: NsqError) -> None:
        if self.down_since is not None:
            return
        self.down_since = now
        if self.ever_connected:
            waiting = format_duration(self._reconnect_timeout)
            log.warning("%s; keeping what is meant for it and redialing for %s", error, waiting)

    async def run(self, nursery: trio.Nursery) -> None:
        """Write the parts as they come; tasks for answers and the connection go in nursery."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            while self._outbox or self._again:
                if self._again:
                    self._again.sort(key=lambda part: part.order)
                    self._outbox.extendleft(reversed(self._again))
                    self._again.clear()
                await self._write_next(nursery)

    async def _write_next(self, nursery: trio.Nursery) -> None:
        try:
            conn = await self._connection(nursery)
        except NsqError as error:
            self._fail_waiting(error)  # their outcomes decide what is tried again
            return
        try:
            await conn.wait_writable()
        except ConnectionClosed:
            return  # closed meanwhile: the next round dials again
        part = self._outbox.popleft()
        refusal = self._known_refusal(part) or _not_the_fork(conn, part)
        if refusal is not None:
            self._on_part(self, part, refusal, 0.0)
            return
        started = trio.current_time()

        def on_answer(response: bytes, error: NsqError | None) -> None:
            if error is None:
                error = part.batch.note_answer(response, self.address)
            self._on_part(self, part, error, trio.current_time() - started)

        try:
            conn.send_request(part.command, on_answer)
        except ConnectionClosed as error:
            self._on_part(self, part, error, 0.0)

    def _fail_waiting(self, error: NsqError) -> None:
        waiting = list(self._outbox)
        self._outbox.clear()
        for part in waiting:
            self._on_part(self, part, error, 0.0)

    async def _connection(self, nursery: trio.Nursery) -> Conn:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = None
        now = trio.current_time()
        if self._dial_error is not None and now < self._next_dial and self.given_up(now):
            raise self._dial_error  # no waiting for a redial: it fails at once meanwhile
        await trio.sleep_until(self._next_dial)
        try:
            self._conn = await nursery.start(self._keep_open)
        except NsqError as error:
            self._dial_failures += 1
            self._dial_error = error
            delay = min(FIRST_REDIAL_DELAY * 2 ** (self._dial_failures - 1), MAX_REDIAL_DELAY)
            self._next_dial = trio.current_time() + delay * (1 + 0.2 * random.random())
            raise
        if self.down_since is not None:
            down_for = trio.current_time() - self.down_since
            log.warning("%s: connected again after %.1fs", self.address, down_for)
        self._dial_failures = 0
        self._dial_error = None
        self.ever_connected = True
        self.down_since = None
        return self._conn

    async def _keep_open(self, *, task_status: trio.TaskStatus[Conn]) -> None:
        try:
            async with open_connection(self.address, self._config) as conn:
                task_status.started(conn)
                await conn.wait_closed()
        except (ProtocolError, OSError, trio.BrokenResourceError) as error:
            # Set-up failures the transport does not already report as NsqError.
            reason = str(error) or type(error).__name__
            raise ConnectError(f"cannot connect to {self.address}: {reason}") from error

    def learn_limit(self, part: _Part, error: NsqErrorResponse) -> None:
        """Remember the limit nsqd named in refusing the part (or guess it from the part)."""
        named = _TOO_BIG.search(error.message)
        if error.code == "E_BAD_BODY":
            limit = int(named[2]) if named else commands.mpub_body_size(part.sizes()) - 1
            self.max_body_size = min(limit, self.max_body_size or limit)
        elif named or part.count == 1:
            limit = int(named[2]) if named else max(part.sizes()) - 1
            self.max_message_size = min(limit, self.max_message_size or limit)

    def _known_refusal(self, part: _Part) -> NsqErrorResponse | None:
        """nsqd's answer, known in advance, to a part over a limit it named. Sending it
        would only make nsqd close the connection again, and the reset that closes it
        can take the answers to the commands before it along (sent again: duplicates)."""
        if self.max_message_size is None and self.max_body_size is None:
            return None  # the usual case: nothing refused yet
        sizes = part.sizes()
        message_limit, body_limit = self.max_message_size, self.max_body_size
        if message_limit is not None and max(sizes) > message_limit:
            command = "PUB" if part.count == 1 else "MPUB"
            problem = f"{command} message too big {max(sizes)} > {message_limit}"
            return NsqErrorResponse(self.address, "E_BAD_MESSAGE", problem)
        body = commands.mpub_body_size(sizes)
        if body_limit is not None and part.count > 1 and body > body_limit:
            problem = f"MPUB body too big {body} > {body_limit}"
            return NsqErrorResponse(self.address, "E_BAD_BODY", problem)
        return None


# -- the producer -----------------------------------------------------------------------


class Producer:
    """Publishes to one or more nsqds. Use as `async with Producer(...) as producer:`.

    Awaited calls (publish, publish_many, publish_deferred) return once nsqd answered
    and raise an NsqError (or LocalProtocolError for what would never be sent). put()
    queues a message and returns at once, unless max_unacknowledged messages or
    max_unacknowledged_bytes are without an outcome; flush() waits for outcomes.
    acknowledged and failed count messages; failure_reasons keeps each distinct reason;
    on_outcome, if given, is told what became of every message put (with its token).
    max_message_size and max_body_size are where cutting MPUBs starts: nsqd's defaults,
    lowered when an nsqd says its own are smaller. reconnect_timeout: how long an nsqd
    that was reachable may stay down before the messages meant for it fail.
    Leaving the block flushes, then closes the connections.
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        config: ClientConfig | None = None,
        mode: str = "all",
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_unacknowledged: int = DEFAULT_MAX_UNACKNOWLEDGED,
        max_unacknowledged_bytes: int = DEFAULT_MAX_UNACKNOWLEDGED_BYTES,
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT,
        retry_delay: float = 30.0,
        max_retry_delay: float = 900.0,
        on_outcome: OutcomeHandler | None = None,
        partitions: Partitions | None = None,
    ) -> None:
        if isinstance(addresses, str):
            addresses = [addresses]
        self.addresses = tuple(dict.fromkeys(addresses))  # a repeat is the same nsqd
        if not self.addresses and partitions is None:
            raise ValueError("no nsqd address given")
        for address in self.addresses:
            split_address(address)
        _check_limits(max_message_size, max_body_size, max_unacknowledged, max_unacknowledged_bytes)
        if reconnect_timeout < 0:
            raise ValueError(f"reconnect_timeout must not be negative, got {reconnect_timeout}")
        self.config = config or ClientConfig()
        self.mode = mode
        self._policy = make_policy(mode, len(self.addresses), retry_delay, max_retry_delay)
        self.max_message_size = max_message_size
        self.max_body_size = max_body_size
        self.max_unacknowledged = max_unacknowledged
        self.max_unacknowledged_bytes = max_unacknowledged_bytes
        self.reconnect_timeout = reconnect_timeout
        self.on_outcome = on_outcome
        self._nodes = [
            _Node(index, address, self.config, reconnect_timeout, self._on_part)
            for index, address in enumerate(self.addresses)
        ]
        # The Youzan fork's: partitions' leaders, dialed as batches need them.
        self.partitions = partitions
        self._leaders: dict[str, _Node] = {}
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._acknowledged = 0
        self._failed = 0
        self._failure_reasons: Counter[str] = Counter()
        self._in_flight: set[_Batch] = set()  # batches sent, awaiting their outcome
        self._unresolved = 0  # messages in those batches
        self._unresolved_bytes = 0
        self._room = trio.Event()  # set when the unresolved fall below the limits
        # put, not yet batched, by topic, delay (None: publish now, in MPUBs) and the
        # fork's partition and tracing; with the tokens of those bodies when any were given
        self._queues: dict[_QueueKey, _Queue] = {}
        self._topics: set[str] = set()  # names already checked
        self._queued = trio.Event()  # set when put starts a new queue
        self._put_room_messages = 0  # what put may add before it must look at limits
        self._put_room_bytes = 0
        self._sequence = 0

    # -- outcomes --------------------------------------------------------------------

    @property
    def acknowledged(self) -> int:
        """Messages every nsqd they were meant for acknowledged."""
        return self._acknowledged

    @property
    def failed(self) -> int:
        """Messages that ended in an error (refused, or not acknowledged)."""
        return self._failed

    @property
    def failure_reasons(self) -> Mapping[str, int]:
        """Each distinct one-line reason, with how many messages it failed."""
        return MappingProxyType(self._failure_reasons)

    @property
    def pending(self) -> int:
        """Messages without an outcome yet."""
        return self._unresolved + sum(len(queue.bodies) for queue in self._queues.values())

    # -- lifetime --------------------------------------------------------------------

    def _require_open(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("use the Producer in `async with` to publish")
        return self._nursery

    async def __aenter__(self) -> Self:
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._nursery, self._nursery_manager = nursery, manager
        for node in self._nodes:
            nursery.start_soon(node.run, nursery)
        nursery.start_soon(self._send_queued)
        self._refill_put_room()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Wait for every outcome, then close the connections (each sends what it has)."""
        nursery, manager = self._require_open(), self._nursery_manager
        assert manager is not None  # set with the nursery
        try:
            await self.flush()
        finally:
            self._nursery = None
            nursery.cancel_scope.cancel()
            # The block's own exception propagates as is, not wrapped in a group.
            await manager.__aexit__(None, None, None)

    def abandon(self, reason: str) -> None:
        """Fail every message without an outcome, with `reason`, and report them (for an
        exit that cannot wait: some may yet reach nsqd). Later answers are ignored."""
        self._dispatch_queued()
        error = NsqError(reason)
        for batch in sorted(self._in_flight, key=lambda batch: batch.sequence):
            batch.fail(0, batch.count, error)
            self._resolve(batch)

    # -- awaited publishing ----------------------------------------------------------

    async def publish(
        self,
        topic: str,
        body: bytes,
        *,
        partition: int | None = None,
        trace_id: int | None = None,
        tag: str = "",
    ) -> youzan.TraceAnswer | None:
        """PUB one message; return once acknowledged (by every nsqd in "all" mode).

        The Youzan fork's: to `partition`; with a trace id (PUB_TRACE) or a tag (PUB_EXT,
        carrying the trace id too), returning nsqd's TraceAnswer when traced."""
        fork = None
        if tag:
            fork = ForkPublish(partition, ext=youzan.ext_header(tag, trace_id))
        elif trace_id is not None:
            fork = ForkPublish(partition, trace_ids=[trace_id])
        elif partition is not None or self.partitions is not None:
            fork = ForkPublish(partition)
        batch = self._batch(topic, [body], None, None, fork)
        await self._publish(batch)
        return batch.trace

    async def publish_deferred(self, topic: str, body: bytes, delay_seconds: float) -> None:
        """DPUB: nsqd delivers the message after delay_seconds (whole milliseconds)."""
        commands.delay_milliseconds(delay_seconds, "DPUB delay")
        await self._publish(self._batch(topic, [body], None, delay_seconds))

    async def publish_many(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB the messages, in order, in as many commands as nsqd's limits need.

        An empty message raises LocalProtocolError and nothing is sent. A failed message
        raises its error once all have an outcome; the others stay published.
        """
        check_topic(topic)
        for index, body in enumerate(bodies):
            if not body:
                raise LocalProtocolError(f"message {index} of {len(bodies)}: {_EMPTY}")
        batches = list(self._batches(topic, list(bodies), None))
        for batch in batches:
            self._send(batch)
        for batch in batches:
            await batch.done.wait()
        for batch in batches:
            error = batch.first_error()
            if error is not None:
                raise error

    async def _publish(self, batch: _Batch) -> None:
        if not batch.size:
            raise LocalProtocolError(_EMPTY)
        self._send(batch)
        await batch.done.wait()
        error = batch.first_error()
        if error is not None:
            raise error

    def _batch(
        self,
        topic: str,
        bodies: list[bytes],
        tokens: list[Any] | None,
        delay: float | None,
        fork: ForkPublish | None = None,
    ) -> _Batch:
        check_topic(topic)
        if self.partitions is not None:
            fork = self._with_partition(topic, fork or ForkPublish())
        self._sequence += 1
        size = sum(map(len, bodies))
        return _Batch(topic, bodies, tokens, delay, size, self._sequence, fork)

    def _with_partition(self, topic: str, fork: ForkPublish) -> ForkPublish:
        """The batch's partition: the one named, else the next in turn (an ordered
        topic's messages must name theirs: their order holds within one)."""
        assert self.partitions is not None
        if fork.partition is not None:
            return fork
        if self.partitions.is_ordered(topic):
            raise PartitionError(
                f"topic {topic} is ordered: give each message a partition or a shard key"
            )
        return ForkPublish(self.partitions.next_partition(topic), fork.trace_ids, fork.ext)

    # -- streaming -------------------------------------------------------------------

    async def put(
        self, topic: str, body: bytes, delay: float | None = None, token: Any = None
    ) -> None:
        """Queue one message for batching; return at once unless back-pressure applies
        (every DISPATCH_BYTES it lets the sending tasks run).

        With a delay (seconds), the message goes out as its own DPUB. An empty message
        is never sent: it fails with its reason. The token, if any, comes back with the
        message's Outcome. A bad topic name raises LocalProtocolError.
        """
        await self.put_many(topic, [body], delay, None if token is None else [token])

    async def put_many(
        self,
        topic: str,
        bodies: Sequence[bytes],
        delay: float | None = None,
        tokens: Sequence[Any] | None = None,
        *,
        partition: int | None = None,
        trace_ids: Sequence[int] | None = None,
    ) -> None:
        """put() for each message, in order, with a fraction of its per-message cost.

        The Youzan fork's: to `partition` (None: one picked per batch), with a trace id
        for each message (MPUB_TRACE)."""
        if not bodies:
            return
        if tokens is not None and len(tokens) != len(bodies):
            raise ValueError(f"{len(tokens)} tokens for {len(bodies)} messages")
        if trace_ids is not None and len(trace_ids) != len(bodies):
            raise ValueError(f"{len(trace_ids)} trace ids for {len(bodies)} messages")
        if delay is not None:
            commands.delay_milliseconds(delay, "DPUB delay")
        key = _QueueKey(topic, delay, partition, trace_ids is not None)
        for start in range(0, len(bodies), PUT_MANY_CHUNK):
            end = start + PUT_MANY_CHUNK
            chunk = bodies[start:end]
            chunk_tokens = None if tokens is None else tokens[start:end]
            chunk_traces = None if trace_ids is None else trace_ids[start:end]
            size = sum(map(len, chunk))
            if not all(chunk):
                self._refuse_empty(key, chunk, chunk_tokens, chunk_traces)
            else:
                queue = self._queues.get(key)
                if queue is None:
                    queue = self._new_queue(key)
                queue.add(chunk, chunk_tokens, chunk_traces)
            self._put_room_messages -= len(chunk)
            self._put_room_bytes -= size
            if self._put_room_bytes <= 0 or self._put_room_messages <= 0:
                await self._hand_over()

    async def flush(self) -> None:
        """Wait until everything put or published so far has an outcome."""
        self._dispatch_queued()
        for batch in list(self._in_flight):
            await batch.done.wait()

    def _new_queue(self, key: _QueueKey) -> _Queue:
        topic = key.topic
        if topic not in self._topics:
            check_topic(topic)
            self._topics.add(topic)
        queue = _Queue()
        self._queues[key] = queue
        self._queued.set()
        return queue

    def _refuse_empty(
        self,
        key: _QueueKey,
        bodies: Sequence[bytes],
        tokens: Sequence[Any] | None,
        trace_ids: Sequence[int] | None,
    ) -> None:
        """Queue the non-empty messages; fail the empty ones, which nsqd never accepts."""
        for index, body in enumerate(bodies):
            token = None if tokens is None else [tokens[index]]
            if body:
                queue = self._queues.get(key) or self._new_queue(key)
                queue.add([body], token, None if trace_ids is None else [trace_ids[index]])
                continue
            self._failed += 1
            self._failure_reasons[_EMPTY] += 1
            if self.on_outcome is not None:
                error = LocalProtocolError(_EMPTY)
                self.on_outcome(Outcome(key.topic, [body], token, error, None, key.partition))

    async def _hand_over(self) -> None:
        """Batch what put queued, wait while the limits are reached, let the sends run."""
        self._dispatch_queued()
        if self._is_full():
            await self._wait_for_room()
        else:
            await trio.lowlevel.checkpoint()

    def _is_full(self) -> bool:
        return (
            self._unresolved >= self.max_unacknowledged
            or self._unresolved_bytes >= self.max_unacknowledged_bytes
        )

    async def _wait_for_room(self) -> None:
        while self._is_full():
            self._room = trio.Event()
            await self._room.wait()
        self._refill_put_room()

    def _refill_put_room(self) -> None:
        self._put_room_messages = self.max_unacknowledged - self._unresolved
        room_bytes = self.max_unacknowledged_bytes - self._unresolved_bytes
        self._put_room_bytes = min(DISPATCH_BYTES, room_bytes)

    async def _send_queued(self) -> None:
        """Batch whatever put queued whenever its caller lets other tasks run."""
        while True:
            await self._queued.wait()
            self._queued = trio.Event()
            self._dispatch_queued()

    def _dispatch_queued(self) -> None:
        queues, self._queues = self._queues, {}
        for key, queue in queues.items():
            for batch in self._batches(
                key.topic, queue.bodies, queue.tokens, key.delay, key.partition, queue.trace_ids
            ):
                self._send(batch)
        self._refill_put_room()

    def _batches(
        self,
        topic: str,
        bodies: list[bytes],
        tokens: list[Any] | None,
        delay: float | None = None,
        partition: int | None = None,
        trace_ids: list[int] | None = None,
    ) -> Iterator[_Batch]:
        """Batches for the messages in order: MPUBs within the limits known, a message
        alone as PUB, and a DPUB each when deferred (nsqd has no deferred MPUB)."""
        if delay is None:
            sizes = list(map(len, bodies))
            ranges = cut_points(sizes, self.max_body_size, self.max_message_size)
        else:
            ranges = [(index, index + 1) for index in range(len(bodies))]
        fork = None
        if partition is not None or trace_ids is not None:
            fork = ForkPublish(partition, trace_ids)
        for start, end in ranges:
            chunk_tokens = None if tokens is None else tokens[start:end]
            chunk_fork = None if fork is None else fork.piece(start, end)
            yield self._batch(topic, bodies[start:end], chunk_tokens, delay, chunk_fork)

    # -- routing and outcomes --------------------------------------------------------

    def _send(self, batch: _Batch) -> None:
        self._require_open()
        self._in_flight.add(batch)
        self._unresolved += batch.count
        self._unresolved_bytes += batch.size
        if self.partitions is not None:
            batch.awaiting = 1
            self._send_to_leader(_Part(batch))
        elif self._policy is None:
            batch.awaiting = len(self._nodes)
            for node in self._nodes:
                node.send(_Part(batch))
        else:
            batch.awaiting = 1
            self._nodes[self._policy.pick(trio.current_time())].send(_Part(batch))

    def _send_to_leader(self, part: _Part) -> None:
        """The Youzan fork: to the nsqd leading the batch's partition."""
        assert self.partitions is not None and part.batch.fork is not None
        topic, partition = part.batch.topic, part.batch.fork.partition
        assert partition is not None  # _batch names one
        address = self.partitions.leader(topic, partition)
        if address is None:
            self._fail(part, PartitionError(f"no nsqd leads partition {partition} of {topic}"))
            return
        node = self._leaders.get(address)
        if node is None:
            node = _Node(-1, address, self.config, self.reconnect_timeout, self._on_part)
            self._leaders[address] = node
            self._require_open().start_soon(node.run, self._require_open())
        node.send(part)

    def _reroute(self, part: _Part, error: NsqErrorResponse) -> None:
        """The partition moved: look the topic up again and follow it, a few times."""
        part.reroutes += 1
        if part.reroutes > MAX_REROUTES:
            self._fail(part, error)
            return
        log.warning("%s; looking up %s again", error, part.batch.topic)
        self._require_open().start_soon(self._send_after_lookup, part)

    async def _send_after_lookup(self, part: _Part) -> None:
        assert self.partitions is not None
        try:
            await self.partitions.refresh(part.batch.topic)
        except NsqError as error:
            self._fail(part, error)
            return
        self._send_to_leader(part)

    def _on_part(
        self, node: _Node, part: _Part, error: NsqError | None, response_time: float
    ) -> None:
        """A node's answer (or failure) for a part it was sent."""
        if part.batch.resolved:
            return  # abandoned meanwhile
        now = trio.current_time()
        if error is None:
            if self._policy is not None or self.partitions is not None:
                part.batch.acknowledged_by = node.address
            if self._policy is not None:
                self._policy.mark_success(node.index, now, response_time)
            self._settle(part)
        elif self.partitions is not None and _moved(error):
            assert isinstance(error, NsqErrorResponse)
            self._reroute(part, error)
        elif isinstance(error, NsqErrorResponse) and error.code in _SIZE_ERRORS:
            self._cut_again(node, part, error)
        elif _is_transient(error):
            self._try_again(node, part, error, now)
        else:
            self._fail(part, error)

    def _cut_again(self, node: _Node, part: _Part, error: NsqErrorResponse) -> None:
        """nsqd refused the part for its size: re-send it in pieces under the limit it
        named; a message over its message limit fails, alone."""
        node.learn_limit(part, error)
        self._learn_limits(node)
        if part.count == 1:
            self._fail(part, error)
            return
        sizes = part.sizes()
        body_limit = node.max_body_size or self.max_body_size
        ranges = cut_points(sizes, body_limit, node.max_message_size)
        if len(ranges) == 1:  # nothing learned that splits it: halve it
            middle = part.count // 2
            ranges = [(0, middle), (middle, part.count)]
        log.info("%s; sending its %d messages again in %d parts", error, part.count, len(ranges))
        part.batch.awaiting += len(ranges) - 1
        for start, end in ranges:
            node.send_again(_Part(part.batch, part.start + start, part.start + end))

    def _learn_limits(self, node: _Node) -> None:
        """Cut later batches under the smallest limits any nsqd named."""
        if node.max_body_size is not None:
            self.max_body_size = min(self.max_body_size, node.max_body_size)
        if node.max_message_size is not None:
            self.max_message_size = min(self.max_message_size, node.max_message_size)

    def _try_again(self, node: _Node, part: _Part, error: NsqError, now: float) -> None:
        """A connection failed under the part: another nsqd (host policies) or the same
        one again once redialed, until it has been down for reconnect_timeout."""
        node.mark_down(now, error)
        if self._policy is not None:
            self._policy.mark_failed(node.index, now)
            part.tried.append(node.index)
            other = self._policy.pick_another(now, part.tried)
            if other is not None:
                log.warning("%s; retrying on %s", error, self.addresses[other])
                self._nodes[other].send_again(part)
                return
        if not node.ever_connected:
            self._fail(part, error)  # never reachable: a wrong address, not an outage
            return
        if node.given_up(now):
            waited = format_duration(self.reconnect_timeout)
            self._fail(part, ConnectError(f"{error} (down for {waited}: reconnect_timeout)"))
            return
        if self._policy is not None:
            part.tried.clear()
            node = self._nodes[self._policy.pick(now)]
        node.send_again(part)

    def _fail(self, part: _Part, error: NsqError) -> None:
        part.batch.fail(part.start, part.end, error)
        self._settle(part)

    def _settle(self, part: _Part) -> None:
        batch = part.batch
        batch.awaiting -= 1
        if not batch.awaiting:
            self._resolve(batch)

    def _resolve(self, batch: _Batch) -> None:
        if batch.resolved:
            return
        batch.resolved = True
        self._in_flight.discard(batch)
        self._unresolved -= batch.count
        self._unresolved_bytes -= batch.size
        if batch.errors is None:
            self._acknowledged += batch.count
            if self.on_outcome is not None:
                self.on_outcome(
                    batch.outcome(batch.bodies, batch.tokens, None, batch.acknowledged_by)
                )
        else:
            for outcome in batch.outcomes():
                if outcome.error is None:
                    self._acknowledged += len(outcome.bodies)
                else:
                    self._failed += len(outcome.bodies)
                    self._failure_reasons[str(outcome.error)] += len(outcome.bodies)
                if self.on_outcome is not None:
                    self.on_outcome(outcome)
        batch.done.set()
        if not self._is_full():
            self._room.set()


class _QueueKey(NamedTuple):
    """What messages must share to be batched together."""

    topic: str
    delay: float | None
    partition: int | None = None  # the Youzan fork's
    traced: bool = False


class _Queue:
    """Messages put for one topic, delay and partition, not yet batched, with their
    tokens and trace ids."""

    __slots__ = ("bodies", "tokens", "trace_ids")

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.tokens: list[Any] | None = None
        self.trace_ids: list[int] | None = None

    def add(
        self,
        bodies: Sequence[bytes],
        tokens: Sequence[Any] | None,
        trace_ids: Sequence[int] | None = None,
    ) -> None:
        if tokens is not None and self.tokens is None:
            self.tokens = [None] * len(self.bodies)
        if trace_ids is not None and self.trace_ids is None:
            self.trace_ids = [0] * len(self.bodies)
        self.bodies.extend(bodies)
        if self.tokens is not None:
            self.tokens.extend([None] * len(bodies) if tokens is None else tokens)
        if self.trace_ids is not None:
            self.trace_ids.extend([0] * len(bodies) if trace_ids is None else trace_ids)


_EMPTY = "message body is empty: nsqd rejects empty messages"


def _not_the_fork(conn: Conn, part: _Part) -> NsqError | None:
    """A fork-only publish (a partition, a trace) to upstream nsqd, which would take
    `PUB topic 3` as `PUB topic` and refuse the rest: refused here, in words."""
    if part.batch.fork is None or youzan.is_fork_version(conn.identify.version):
        return None
    version = conn.identify.version or "an unknown version"
    return NsqError(
        f"{conn.address} is NSQ {version}, not the Youzan fork: partitions and tracing "
        "need the fork"
    )


def _moved(error: NsqError) -> bool:
    """The Youzan fork's refusal of a partition that moved, or is moving."""
    return isinstance(error, NsqErrorResponse) and error.code in youzan.REROUTE_ERRORS


def _is_transient(error: NsqError) -> bool:
    """A failure that a new connection may not have: try again rather than fail."""
    if isinstance(error, NsqErrorResponse):
        return error.code in _TRANSIENT_ERRORS
    return isinstance(error, ConnectError | ConnectionClosed)


def _check_limits(
    max_message_size: int,
    max_body_size: int,
    max_unacknowledged: int,
    max_unacknowledged_bytes: int,
) -> None:
    limits = {
        "max_message_size": max_message_size,
        "max_body_size": max_body_size,
        "max_unacknowledged": max_unacknowledged,
        "max_unacknowledged_bytes": max_unacknowledged_bytes,
    }
    for name, value in limits.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
