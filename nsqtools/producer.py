"""Publishing to one or more nsqds: pipelined PUB, MPUB and DPUB over Conn.

Owns the Producer and the host-selection policies behind its modes. The Producer dials
each nsqd when a publish first needs it and again on the next publish after a failure
(never in a loop of its own); keeps many commands in flight per connection, written in
the order they were made and answered FIFO; cuts MPUBs to nsqd's message and body
limits; and offers a streaming path (put, flush) that batches messages into MPUBs
behind bounded back-pressure and counts every outcome. Modes across nsqds: "all"
(every nsqd gets every message, as to_nsq does), "round-robin", "hostpool" and
"epsilon-greedy" (go-hostpool's pools, as nsq_to_nsq uses them). The policies are pure:
no trio inside, the time is passed in, so they are tested without sockets.
"""

from __future__ import annotations

import logging
import random
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from itertools import accumulate
from types import MappingProxyType, TracebackType
from typing import Protocol, Self

import trio

from nsqtools.addresses import split_address
from nsqtools.config import ClientConfig
from nsqtools.errors import ConnectError, ConnectionClosed, NsqError
from nsqtools.protocol import LocalProtocolError, ProtocolError, check_topic, commands
from nsqtools.transport import Conn, open_connection

log = logging.getLogger("nsqtools.producer")

MODES = ("all", "round-robin", "hostpool", "epsilon-greedy")
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024  # nsqd --max-msg-size
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024  # nsqd --max-body-size
DEFAULT_MAX_UNACKNOWLEDGED = 200_000
DEFAULT_MAX_UNACKNOWLEDGED_BYTES = 64 * 1024 * 1024
# put() hands its messages to the connections, and lets them run, after this many bytes.
DISPATCH_BYTES = 256 * 1024
# put_many() queues at most this many messages before it looks at the limits again.
PUT_MANY_CHUNK = 1024

_MPUB_OVERHEAD = 4  # the message count before the first message
_MESSAGE_OVERHEAD = 4  # the size before each message


# -- encoding ---------------------------------------------------------------------------


def cut_points(sizes: Sequence[int], max_body_size: int) -> list[tuple[int, int]]:
    """Ranges [start, end) of messages, in order, each fitting one MPUB body of at most
    max_body_size bytes. A message too big to share an MPUB gets a range of its own."""
    count = len(sizes)
    if not count:
        return []
    if _MPUB_OVERHEAD + _MESSAGE_OVERHEAD * count + sum(sizes) <= max_body_size:
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


# -- host selection (pure) --------------------------------------------------------------


class HostPolicy(Protocol):
    """Chooses which nsqd (by index) gets the next batch; told how each attempt went."""

    def pick(self, now: float) -> int:
        """The host for a new batch."""

    def pick_another(self, now: float, tried: Collection[int]) -> int | None:
        """A live host not in `tried` for a batch that failed there, or None."""

    def mark_success(self, host: int, now: float, response_time: float) -> None: ...

    def mark_failed(self, host: int, now: float) -> None: ...


class _Rotation:
    """Hosts taken in turn, starting after the last one taken."""

    def __init__(self, host_count: int) -> None:
        self.host_count = host_count
        self._next = 0

    def _rotation(self) -> Iterator[int]:
        for offset in range(self.host_count):
            yield (self._next + offset) % self.host_count

    def _take(self, host: int) -> int:
        self._next = host + 1
        return host


class RoundRobin(_Rotation):
    """Every host in turn, whatever happened before; a retry goes to the next host
    that has not failed since its last success."""

    def __init__(self, host_count: int) -> None:
        super().__init__(host_count)
        self._failing: set[int] = set()

    def pick(self, now: float) -> int:
        return self._take(next(self._rotation()))

    def pick_another(self, now: float, tried: Collection[int]) -> int | None:
        for host in self._rotation():
            if host not in tried and host not in self._failing:
                return self._take(host)
        return None

    def mark_success(self, host: int, now: float, response_time: float) -> None:
        self._failing.discard(host)

    def mark_failed(self, host: int, now: float) -> None:
        self._failing.add(host)


@dataclass
class _Health:
    dead: bool = False
    retry_delay: float = 0.0
    next_retry: float = 0.0


class HostPool(_Rotation):
    """go-hostpool's standard pool: live hosts in turn; a host that failed is skipped
    until its retry time, and each retry that is not followed by a success doubles
    the delay (up to max_retry_delay). When every host is down, all are tried again."""

    def __init__(
        self, host_count: int, retry_delay: float = 30.0, max_retry_delay: float = 900.0
    ) -> None:
        super().__init__(host_count)
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._health = [_Health() for _ in range(host_count)]

    def pick(self, now: float) -> int:
        host = self.pick_another(now, ())
        if host is not None:
            return host
        self._health = [_Health() for _ in range(self.host_count)]
        return self._take(0)

    def pick_another(self, now: float, tried: Collection[int]) -> int | None:
        for host in self._rotation():
            if host not in tried and self.can_try(host, now):
                self._retry_if_dead(host, now)
                return self._take(host)
        return None

    def can_try(self, host: int, now: float) -> bool:
        health = self._health[host]
        return not health.dead or health.next_retry < now

    def _retry_if_dead(self, host: int, now: float) -> None:
        health = self._health[host]
        if health.dead:
            health.retry_delay = min(2 * health.retry_delay, self.max_retry_delay)
            health.next_retry = now + health.retry_delay

    def mark_success(self, host: int, now: float, response_time: float) -> None:
        self._health[host].dead = False

    def mark_failed(self, host: int, now: float) -> None:
        health = self._health[host]
        if not health.dead:
            health.dead = True
            health.retry_delay = self.retry_delay
            health.next_retry = now + self.retry_delay


class EpsilonGreedy(HostPool):
    """go-hostpool's epsilon-greedy pool: with probability epsilon (0.3, decaying by
    0.9 at each exploration down to 0.01) explore in turn like HostPool; otherwise
    choose among the hosts that can be tried, weighted by 1 / their recent response
    time. Response times are kept in 120 buckets over decay_duration; newer buckets
    weigh more. Unlike go-hostpool, times are not rounded to whole milliseconds (so
    sub-millisecond answers count) and the weighted mean is a mean (go-hostpool's sum
    lets one old sample grow as it ages)."""

    BUCKETS = 120
    INITIAL_EPSILON = 0.3
    EPSILON_DECAY = 0.9
    MIN_EPSILON = 0.01

    def __init__(
        self,
        host_count: int,
        retry_delay: float = 30.0,
        max_retry_delay: float = 900.0,
        decay_duration: float = 300.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(host_count, retry_delay, max_retry_delay)
        self.epsilon = self.INITIAL_EPSILON
        self._rng = rng or random.Random()
        self._bucket_duration = decay_duration / self.BUCKETS
        self._bucket_number = 0  # of the bucket being filled, counted from time 0
        self._counts = [[0] * self.BUCKETS for _ in range(host_count)]
        self._totals = [[0.0] * self.BUCKETS for _ in range(host_count)]

    def pick(self, now: float) -> int:
        self._advance(now)
        if self._rng.random() < self.epsilon:
            self.epsilon = max(self.epsilon * self.EPSILON_DECAY, self.MIN_EPSILON)
            return super().pick(now)
        host = self._weighted_choice(now)
        if host is None:
            return super().pick(now)
        self._retry_if_dead(host, now)
        return host

    def _weighted_choice(self, now: float) -> int | None:
        values = {}
        for host in range(self.host_count):
            average = self.average_response_time(host, now)
            if average > 0 and self.can_try(host, now):
                values[host] = 1 / average
        if not values:
            return None
        return self._rng.choices(list(values), weights=list(values.values()))[0]

    def average_response_time(self, host: int, now: float) -> float:
        """The mean of the buckets' means, bucket i of 120 (oldest first) weighing i, so
        recent answers count more; 0 when none came within decay_duration."""
        self._advance(now)
        weighted = weights = 0.0
        current = self._bucket_number % self.BUCKETS
        counts, totals = self._counts[host], self._totals[host]
        for age in range(1, self.BUCKETS + 1):
            position = (current + age) % self.BUCKETS
            if counts[position]:
                weighted += age * totals[position] / counts[position]
                weights += age
        return weighted / weights if weights else 0.0

    def mark_success(self, host: int, now: float, response_time: float) -> None:
        super().mark_success(host, now, response_time)
        self._advance(now)
        position = self._bucket_number % self.BUCKETS
        self._counts[host][position] += 1
        self._totals[host][position] += response_time

    def _advance(self, now: float) -> None:
        """Empty the buckets that time has moved past (all of them after a long gap)."""
        number = int(now // self._bucket_duration)
        last_to_empty = min(number, self._bucket_number + self.BUCKETS)
        for skipped in range(self._bucket_number + 1, last_to_empty + 1):
            position = skipped % self.BUCKETS
            for counts, totals in zip(self._counts, self._totals, strict=True):
                counts[position], totals[position] = 0, 0.0
        self._bucket_number = max(number, self._bucket_number)


def make_policy(
    mode: str, host_count: int, retry_delay: float, max_retry_delay: float
) -> HostPolicy | None:
    """The policy for a mode; None for "all", which sends every batch everywhere."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "round-robin":
        return RoundRobin(host_count)
    if mode == "hostpool":
        return HostPool(host_count, retry_delay, max_retry_delay)
    if mode == "epsilon-greedy":
        return EpsilonGreedy(host_count, retry_delay, max_retry_delay)
    return None


# -- batches and connections ------------------------------------------------------------


class _Batch:
    """One command carrying `count` messages, and what became of it."""

    __slots__ = ("awaiting", "command", "count", "done", "error", "size", "tried")

    def __init__(self, command: bytes, count: int, size: int) -> None:
        self.command = command
        self.count = count
        self.size = size  # message bytes, for back-pressure
        self.awaiting = 0  # "all" mode: nsqds yet to answer
        self.tried: list[int] = []  # other modes: hosts that failed it
        self.error: NsqError | None = None
        self.done = trio.Event()


AnswerHandler = Callable[["_Node", _Batch, NsqError | None, float], None]


class _Node:
    """One nsqd: its connection, dialed when a batch needs it, and the batches waiting
    for it. One task writes them in the order they came; each answer is awaited by a
    task of its own, so many are in flight."""

    def __init__(
        self, index: int, address: str, config: ClientConfig, on_answer: AnswerHandler
    ) -> None:
        self.index = index
        self.address = address
        self._config = config
        self._on_answer = on_answer  # with the error, or None, and the response time
        self._outbox: deque[_Batch] = deque()
        self._wakeup = trio.Event()
        self._conn: Conn | None = None

    def send(self, batch: _Batch) -> None:
        self._outbox.append(batch)
        self._wakeup.set()

    async def run(self, nursery: trio.Nursery) -> None:
        """Write the batches as they come; tasks for answers and the connection go in nursery."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            while self._outbox:
                await self._write_next(nursery)

    async def _write_next(self, nursery: trio.Nursery) -> None:
        try:
            conn = await self._connection(nursery)
        except NsqError as error:
            self._fail_waiting(error)  # the batches that asked for this dial
            return
        try:
            await conn.wait_writable()
        except ConnectionClosed:
            return  # closed meanwhile: the next round dials again
        # The request is written before start() returns, so writes keep outbox order.
        await nursery.start(self._exchange, conn, self._outbox.popleft())

    async def _exchange(
        self, conn: Conn, batch: _Batch, *, task_status: trio.TaskStatus[None]
    ) -> None:
        task_status.started()
        started = trio.current_time()
        try:
            await conn.request(batch.command)
        except NsqError as error:
            self._on_answer(self, batch, error, trio.current_time() - started)
        else:
            self._on_answer(self, batch, None, trio.current_time() - started)

    def _fail_waiting(self, error: NsqError) -> None:
        while self._outbox:
            self._on_answer(self, self._outbox.popleft(), error, 0.0)

    async def _connection(self, nursery: trio.Nursery) -> Conn:
        if self._conn is None or self._conn.closed:
            self._conn = None
            self._conn = await nursery.start(self._keep_open)
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


# -- the producer -----------------------------------------------------------------------


class Producer:
    """Publishes to one or more nsqds. Use as `async with Producer(...) as producer:`.

    Awaited calls (publish, publish_many, publish_deferred) return once nsqd answered
    and raise an NsqError (or LocalProtocolError for what would never be sent). put()
    queues a message and returns at once, unless max_unacknowledged messages or
    max_unacknowledged_bytes are without an outcome; flush() waits for outcomes.
    acknowledged and failed count messages; failure_reasons keeps each distinct reason.
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
        retry_delay: float = 30.0,
        max_retry_delay: float = 900.0,
    ) -> None:
        if isinstance(addresses, str):
            addresses = [addresses]
        self.addresses = tuple(dict.fromkeys(addresses))  # a repeat is the same nsqd
        if not self.addresses:
            raise ValueError("no nsqd address given")
        for address in self.addresses:
            split_address(address)
        _check_limits(max_message_size, max_body_size, max_unacknowledged, max_unacknowledged_bytes)
        self.config = config or ClientConfig()
        self.mode = mode
        self._policy = make_policy(mode, len(self.addresses), retry_delay, max_retry_delay)
        self.max_message_size = max_message_size
        self.max_body_size = max_body_size
        self.max_unacknowledged = max_unacknowledged
        self.max_unacknowledged_bytes = max_unacknowledged_bytes
        self._nodes = [
            _Node(index, address, self.config, self._on_answer)
            for index, address in enumerate(self.addresses)
        ]
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._acknowledged = 0
        self._failed = 0
        self._failure_reasons: Counter[str] = Counter()
        self._in_flight: set[_Batch] = set()  # batches sent, awaiting their outcome
        self._unresolved = 0  # messages in those batches
        self._unresolved_bytes = 0
        self._room = trio.Event()  # set when the unresolved fall below the limits
        # put, not yet batched, by topic and delay (None: publish now, in MPUBs)
        self._queues: dict[tuple[str, float | None], list[bytes]] = {}
        self._topics: set[str] = set()  # names already checked
        self._queued = trio.Event()  # set when put starts a new queue
        self._put_room_messages = 0  # what put may add before it must look at limits
        self._put_room_bytes = 0

    # -- outcomes --------------------------------------------------------------------

    @property
    def acknowledged(self) -> int:
        """Messages every nsqd they were meant for acknowledged."""
        return self._acknowledged

    @property
    def failed(self) -> int:
        """Messages that ended in an error (refused locally, or not acknowledged)."""
        return self._failed

    @property
    def failure_reasons(self) -> Mapping[str, int]:
        """Each distinct one-line reason, with how many messages it failed."""
        return MappingProxyType(self._failure_reasons)

    @property
    def pending(self) -> int:
        """Messages without an outcome yet."""
        return self._unresolved + sum(map(len, self._queues.values()))

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

    # -- awaited publishing ----------------------------------------------------------

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; return once acknowledged (by every nsqd in "all" mode)."""
        self._check_message_size(len(body))
        await self._publish(_Batch(commands.pub(topic, body), 1, len(body)))

    async def publish_deferred(self, topic: str, body: bytes, delay_seconds: float) -> None:
        """DPUB: nsqd delivers the message after delay_seconds (whole milliseconds)."""
        self._check_message_size(len(body))
        await self._publish(_Batch(commands.dpub(topic, delay_seconds, body), 1, len(body)))

    async def publish_many(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB the messages, in order, in as many commands as nsqd's limits need.

        A message that is empty or over max_message_size raises LocalProtocolError and
        nothing is sent. A failed MPUB raises its error once all have an outcome; the
        MPUBs that succeeded stay published.
        """
        check_topic(topic)
        sizes = list(map(len, bodies))
        for index, size in enumerate(sizes):
            if not 0 < size <= self.max_message_size:
                problem = _size_problem(size, self.max_message_size)
                raise LocalProtocolError(f"message {index} of {len(sizes)}: {problem}")
        batches = list(self._batches(topic, list(bodies), sizes))
        for batch in batches:
            self._send(batch)
        for batch in batches:
            await batch.done.wait()
        for batch in batches:
            if batch.error is not None:
                raise batch.error

    async def _publish(self, batch: _Batch) -> None:
        self._send(batch)
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error

    def _check_message_size(self, size: int) -> None:
        if size > self.max_message_size:
            raise LocalProtocolError(_size_problem(size, self.max_message_size))

    # -- streaming -------------------------------------------------------------------

    async def put(self, topic: str, body: bytes, delay: float | None = None) -> None:
        """Queue one message for batching; return at once unless back-pressure applies
        (every DISPATCH_BYTES it lets the sending tasks run).

        With a delay (seconds), the message goes out as its own DPUB. A message that is
        empty or over max_message_size is never sent: it counts as failed, with its
        reason. A bad topic name raises LocalProtocolError.
        """
        size = len(body)
        if not 0 < size <= self.max_message_size:
            self._resolve_refused(size)
            return
        if delay is not None:
            commands.delay_milliseconds(delay, "DPUB delay")
        key = (topic, delay)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._new_queue(key)
        queue.append(body)
        self._put_room_messages -= 1
        self._put_room_bytes -= size
        if self._put_room_bytes <= 0 or self._put_room_messages <= 0:
            await self._hand_over()

    async def put_many(
        self, topic: str, bodies: Sequence[bytes], delay: float | None = None
    ) -> None:
        """put() for each message, in order, with a fraction of its per-message cost."""
        sizes = list(map(len, bodies))
        if not sizes:
            return
        if delay is not None:
            commands.delay_milliseconds(delay, "DPUB delay")
        if not (all(sizes) and max(sizes) <= self.max_message_size):
            for body in bodies:  # rare: some are refused; count each on its own
                await self.put(topic, body, delay)
            return
        key = (topic, delay)
        for start in range(0, len(bodies), PUT_MANY_CHUNK):
            queue = self._queues.get(key)
            if queue is None:
                queue = self._new_queue(key)
            chunk = bodies[start : start + PUT_MANY_CHUNK]
            queue.extend(chunk)
            self._put_room_messages -= len(chunk)
            self._put_room_bytes -= sum(sizes[start : start + PUT_MANY_CHUNK])
            if self._put_room_bytes <= 0 or self._put_room_messages <= 0:
                await self._hand_over()

    async def flush(self) -> None:
        """Wait until everything put or published so far has an outcome."""
        self._dispatch_queued()
        for batch in list(self._in_flight):
            await batch.done.wait()

    def _new_queue(self, key: tuple[str, float | None]) -> list[bytes]:
        topic = key[0]
        if topic not in self._topics:
            check_topic(topic)
            self._topics.add(topic)
        queue: list[bytes] = []
        self._queues[key] = queue
        self._queued.set()
        return queue

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
        for (topic, delay), bodies in queues.items():
            if delay is None:
                batches = self._batches(topic, bodies, list(map(len, bodies)))
            else:
                batches = self._deferred(topic, bodies, delay)
            for batch in batches:
                self._send(batch)
        self._refill_put_room()

    def _deferred(self, topic: str, bodies: list[bytes], delay: float) -> Iterator[_Batch]:
        """A DPUB for each message: nsqd has no deferred MPUB."""
        for body in bodies:
            yield _Batch(commands.dpub(topic, delay, body), 1, len(body))

    def _batches(self, topic: str, bodies: list[bytes], sizes: list[int]) -> Iterator[_Batch]:
        """Commands for the messages in order: MPUBs within max_body_size, a lone one as PUB."""
        for start, end in cut_points(sizes, self.max_body_size):
            if end - start == 1:
                yield _Batch(commands.pub(topic, bodies[start]), 1, sizes[start])
            else:
                chunk = sizes[start:end]
                command = commands.mpub(topic, bodies[start:end], chunk)
                yield _Batch(command, end - start, sum(chunk))

    # -- routing and outcomes --------------------------------------------------------

    def _send(self, batch: _Batch) -> None:
        self._require_open()
        self._in_flight.add(batch)
        self._unresolved += batch.count
        self._unresolved_bytes += batch.size
        if self._policy is None:
            batch.awaiting = len(self._nodes)
            for node in self._nodes:
                node.send(batch)
        else:
            self._nodes[self._policy.pick(trio.current_time())].send(batch)

    def _on_answer(
        self, node: _Node, batch: _Batch, error: NsqError | None, response_time: float
    ) -> None:
        """A node's answer (or failure) for a batch it was sent."""
        if self._policy is None:
            batch.error = batch.error or error
            batch.awaiting -= 1
            if not batch.awaiting:
                self._resolve(batch)
            return
        now = trio.current_time()
        if error is None:
            self._policy.mark_success(node.index, now, response_time)
            self._resolve(batch)
            return
        self._policy.mark_failed(node.index, now)
        batch.tried.append(node.index)
        retry = self._policy.pick_another(now, batch.tried) if len(batch.tried) == 1 else None
        if retry is None:
            batch.error = error
            self._resolve(batch)
        else:
            log.warning("%s; retrying on %s", error, self.addresses[retry])
            self._nodes[retry].send(batch)

    def _resolve(self, batch: _Batch) -> None:
        self._in_flight.discard(batch)
        self._unresolved -= batch.count
        self._unresolved_bytes -= batch.size
        if batch.error is None:
            self._acknowledged += batch.count
        else:
            self._failed += batch.count
            self._failure_reasons[str(batch.error)] += batch.count
        batch.done.set()
        if not self._is_full():
            self._room.set()

    def _resolve_refused(self, size: int) -> None:
        self._failed += 1
        self._failure_reasons[_size_problem(size, self.max_message_size)] += 1


def _size_problem(size: int, max_message_size: int) -> str:
    if not size:
        return "message body is empty: nsqd rejects empty messages"
    return f"message of {size} bytes is over max_message_size ({max_message_size}): not sent"


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
