"""The Producer, what a caller publishes through, and open_producer(), which runs one for
the body of a block.

Two ways to publish: awaited calls (publish, publish_many, publish_deferred) that return
once nsqd answered, and a streaming path (put, put_many, flush) that queues messages
(queues.py), cuts them into batches when its caller lets other tasks run (or every
DISPATCH_BYTES), and waits only while max_unacknowledged messages or
max_unacknowledged_bytes are without an outcome. Both hand their batches to the
Dispatcher (dispatch.py); every outcome is counted in the OutcomeLedger (outcomes.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import Any, Self, TypedDict, Unpack

import trio

from nsqtools.addresses import split_address
from nsqtools.config import ClientConfig
from nsqtools.errors import NsqError, single_errors
from nsqtools.hostpolicy import make_policy
from nsqtools.partitions import Partitions
from nsqtools.producer.dispatch import Dispatcher
from nsqtools.producer.encoding import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    ForkPublish,
    cut_points,
)
from nsqtools.producer.outcomes import OutcomeHandler, OutcomeLedger, PublishBatch, PublishOutcome
from nsqtools.producer.queues import PutQueues, QueueKey
from nsqtools.protocol import LocalProtocolError, check_topic, commands, youzan

DEFAULT_MAX_UNACKNOWLEDGED = 200_000
DEFAULT_MAX_UNACKNOWLEDGED_BYTES = 64 * 1024 * 1024
DEFAULT_RECONNECT_TIMEOUT = 120.0
# put() hands its messages to the connections, and lets them run, after this many bytes.
DISPATCH_BYTES = 256 * 1024
# put_many() queues at most this many messages before it looks at the limits again.
PUT_MANY_CHUNK = 1024

_EMPTY = "message body is empty: nsqd rejects empty messages"


class ProducerOptions(TypedDict, total=False):
    """The Producer's keyword options (see Producer), for those that pass them on."""

    max_message_size: int
    max_body_size: int
    max_unacknowledged: int
    max_unacknowledged_bytes: int
    reconnect_timeout: float
    retry_delay: float
    max_retry_delay: float
    on_outcome: OutcomeHandler | None
    partitions: Partitions | None


class Producer:
    """Publishes to one or more nsqds, while run by `async with open_producer(...) as
    producer:`.

    Awaited calls (publish, publish_many, publish_deferred) return once nsqd answered
    and raise an NsqError (or LocalProtocolError for what would never be sent). put()
    queues a message and returns at once, unless max_unacknowledged messages or
    max_unacknowledged_bytes are without an outcome; flush() waits for outcomes.
    acknowledged and failed count messages; failure_reasons keeps each distinct reason;
    on_outcome, if given, is told what became of every message put (with its token).
    max_message_size and max_body_size are where cutting MPUBs starts: nsqd's defaults,
    lowered when an nsqd says its own are smaller. reconnect_timeout: how long an nsqd
    that was reachable may stay down before the messages meant for it fail.
    mode: "all" (every nsqd gets every message) or a host policy of hostpolicy.py, with
    retry_delay and max_retry_delay. partitions: the Youzan fork's (leaders.py).
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
        policy = make_policy(mode, len(self.addresses), retry_delay, max_retry_delay)
        self.max_unacknowledged = max_unacknowledged
        self.max_unacknowledged_bytes = max_unacknowledged_bytes
        self.reconnect_timeout = reconnect_timeout
        self.partitions = partitions
        self._ledger = OutcomeLedger(max_unacknowledged, max_unacknowledged_bytes, on_outcome)
        self._dispatcher = Dispatcher(
            self.addresses,
            self.config,
            policy,
            reconnect_timeout,
            self._ledger,
            max_message_size=max_message_size,
            max_body_size=max_body_size,
            partitions=partitions,
        )
        self._nursery: trio.Nursery | None = None
        # put, not yet batched, by topic, delay (None: publish now, in MPUBs) and the
        # fork's partition and tracing; with the tokens of those bodies when any were given
        self._queues = PutQueues()
        self._put_room_messages = 0  # what put may add before it must look at limits
        self._put_room_bytes = 0
        self._sequence = 0

    # -- outcomes --------------------------------------------------------------------

    @property
    def acknowledged(self) -> int:
        """Messages every nsqd they were meant for acknowledged."""
        return self._ledger.acknowledged

    @property
    def failed(self) -> int:
        """Messages that ended in an error (refused, or not acknowledged)."""
        return self._ledger.failed

    @property
    def failure_reasons(self) -> Mapping[str, int]:
        """Each distinct one-line reason, with how many messages it failed."""
        return MappingProxyType(self._ledger.failure_reasons)

    @property
    def pending(self) -> int:
        """Messages without an outcome yet."""
        return self._ledger.unresolved + self._queues.count

    @property
    def max_message_size(self) -> int:
        """Messages over this go out alone, as a PUB (lowered to what nsqds named)."""
        return self._dispatcher.max_message_size

    @property
    def max_body_size(self) -> int:
        """MPUBs are cut to bodies of at most this (lowered to what nsqds named)."""
        return self._dispatcher.max_body_size

    # -- lifetime --------------------------------------------------------------------

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[Self]:
        """Run the connections for the body of the block; on leaving it, wait for every
        outcome, then close the connections (each sends what it has). The block's own
        exception propagates as is, not wrapped in a group."""
        with single_errors():
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._dispatcher.start(nursery)
                nursery.start_soon(self._send_queued)
                self._refill_put_room()
                try:
                    yield self
                finally:
                    try:
                        await self.flush()
                    finally:
                        self._nursery = None
                        nursery.cancel_scope.cancel()

    def _require_open(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("use the Producer in `async with` to publish")
        return self._nursery

    def abandon(self, reason: str) -> None:
        """Fail every message without an outcome, with `reason`, and report them (for an
        exit that cannot wait: some may yet reach nsqd). Later answers are ignored."""
        self._dispatch_queued()
        self._ledger.fail_all(NsqError(reason))

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

    async def _publish(self, batch: PublishBatch) -> None:
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
    ) -> PublishBatch:
        check_topic(topic)
        leaders = self._dispatcher.leaders
        if leaders is not None:
            fork = leaders.with_partition(topic, fork or ForkPublish())
        # A topic not looked up yet: the partition, and so the command, come once it is.
        unrouted = fork is not None and fork.partition is None and leaders is not None
        self._sequence += 1
        size = sum(map(len, bodies))
        return PublishBatch(
            topic, bodies, tokens, delay, size, self._sequence, fork, unrouted=unrouted
        )

    def _send(self, batch: PublishBatch) -> None:
        self._require_open()
        self._dispatcher.send(batch)

    # -- streaming -------------------------------------------------------------------

    async def put(
        self, topic: str, body: bytes, delay: float | None = None, token: Any = None
    ) -> None:
        """Queue one message for batching; return at once unless back-pressure applies
        (every DISPATCH_BYTES it lets the sending tasks run).

        With a delay (seconds), the message goes out as its own DPUB. An empty message
        is never sent: it fails with its reason. The token, if any, comes back with the
        message's PublishOutcome. A bad topic name raises LocalProtocolError.
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
        key = QueueKey(topic, delay, partition, trace_ids is not None)
        for start in range(0, len(bodies), PUT_MANY_CHUNK):
            end = start + PUT_MANY_CHUNK
            chunk = bodies[start:end]
            chunk_tokens = None if tokens is None else tokens[start:end]
            chunk_traces = None if trace_ids is None else trace_ids[start:end]
            size = sum(map(len, chunk))
            if not all(chunk):
                self._refuse_empty(key, chunk, chunk_tokens, chunk_traces)
            else:
                self._queues.add(key, chunk, chunk_tokens, chunk_traces)
            self._put_room_messages -= len(chunk)
            self._put_room_bytes -= size
            if self._put_room_bytes <= 0 or self._put_room_messages <= 0:
                await self._hand_over()

    async def flush(self) -> None:
        """Wait until everything put or published so far has an outcome."""
        self._dispatch_queued()
        await self._ledger.wait_all()

    def _refuse_empty(
        self,
        key: QueueKey,
        bodies: Sequence[bytes],
        tokens: Sequence[Any] | None,
        trace_ids: Sequence[int] | None,
    ) -> None:
        """Queue the non-empty messages; fail the empty ones, which nsqd never accepts."""
        for index, body in enumerate(bodies):
            token = None if tokens is None else [tokens[index]]
            if body:
                trace_id = None if trace_ids is None else [trace_ids[index]]
                self._queues.add(key, [body], token, trace_id)
                continue
            error = LocalProtocolError(_EMPTY)
            self._ledger.record(
                PublishOutcome(key.topic, [body], token, error, None, key.partition)
            )

    async def _hand_over(self) -> None:
        """Batch what put queued, wait while the limits are reached, let the sends run."""
        self._dispatch_queued()
        if self._ledger.is_full():
            await self._ledger.wait_for_room()
            self._refill_put_room()
        else:
            await trio.lowlevel.checkpoint()

    def _refill_put_room(self) -> None:
        ledger = self._ledger
        self._put_room_messages = self.max_unacknowledged - ledger.unresolved
        room_bytes = self.max_unacknowledged_bytes - ledger.unresolved_bytes
        self._put_room_bytes = min(DISPATCH_BYTES, room_bytes)

    async def _send_queued(self) -> None:
        """Batch whatever put queued whenever its caller lets other tasks run."""
        while True:
            await self._queues.wait_started()
            self._dispatch_queued()

    def _dispatch_queued(self) -> None:
        for key, queue in self._queues.take().items():
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
    ) -> Iterator[PublishBatch]:
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


@asynccontextmanager
async def open_producer(
    addresses: str | Sequence[str],
    config: ClientConfig | None = None,
    mode: str = "all",
    **options: Unpack[ProducerOptions],
) -> AsyncIterator[Producer]:
    """Run a Producer for the body of the block (see Producer for the arguments).

    Bad addresses, a bad mode or limit raise ValueError before the block starts; the
    nsqds are dialed as publishing first needs them. Leaving the block waits for every
    outcome (flush), then closes the connections.
    """
    async with Producer(addresses, config, mode, **options)._running() as producer:
        yield producer


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
