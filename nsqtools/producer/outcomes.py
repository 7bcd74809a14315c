"""What became of the messages published: the PublishOutcome a caller is told; the batch
(messages put together, sent as one command to each nsqd meant) and its parts, which
keep each message's error once one failed; and the ledger, which counts the outcomes,
holds the batches still without one (what the producer's back-pressure measures) and
tells the caller's on_outcome each outcome as it is known.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import trio

from nsqtools.errors import NsqError
from nsqtools.producer.encoding import ForkPublish, publish_command
from nsqtools.protocol import ProtocolError, youzan


@dataclass(frozen=True, slots=True)
class PublishOutcome:
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


OutcomeHandler = Callable[[PublishOutcome], None]


class PublishBatch:
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
        *,
        unrouted: bool = False,
    ) -> None:
        self.topic = topic
        self.bodies = bodies
        self.tokens = tokens
        self.delay = delay
        self.size = size  # message bytes, for back-pressure
        self.sequence = sequence  # the order batches were made in
        self.fork = fork
        # Unrouted (the fork's partition not picked yet): made by to_partition().
        self.command = b"" if unrouted else publish_command(topic, bodies, delay, fork)
        self.trace: youzan.TraceAnswer | None = None
        self.awaiting = 0  # parts of it still without an outcome
        self.errors: list[NsqError | None] | None = None  # per message, once one failed
        self.resolved = False
        self.done = trio.Event()
        self.acknowledged_by: str | None = None  # modes that pick one nsqd: the last to ack

    @property
    def count(self) -> int:
        return len(self.bodies)

    def to_partition(self, partition: int) -> None:
        """The Youzan fork: publish to this partition (picked once its topic was known)."""
        assert self.fork is not None
        self.fork = replace(self.fork, partition=partition)
        self.command = publish_command(self.topic, self.bodies, self.delay, self.fork)

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

    def outcomes(self) -> Iterator[PublishOutcome]:
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
    ) -> PublishOutcome:
        partition = None if self.fork is None else self.fork.partition
        return PublishOutcome(self.topic, bodies, tokens, error, nsqd, partition, self.trace)

    def note_answer(self, response: bytes, address: str) -> NsqError | None:
        """Keep a traced publish's answer; an answer that is not one is an error."""
        if self.fork is None or not self.fork.traced:
            return None
        try:
            self.trace = youzan.TraceAnswer.parse(response)
        except ProtocolError as error:
            return NsqError(f"{address}: {error}")
        return None


class BatchPart:
    """Messages start..end of a batch as one command to one nsqd: the whole batch, or a
    piece of it cut again after that nsqd refused the whole for its size."""

    __slots__ = ("_piece_command", "batch", "end", "held_since", "holds", "start", "tried")

    def __init__(self, batch: PublishBatch, start: int = 0, end: int | None = None) -> None:
        self.batch = batch
        self.start = start
        self.end = batch.count if end is None else end
        whole = start == 0 and self.end == batch.count
        fork = None if batch.fork is None else batch.fork.piece(start, self.end)
        # A piece is cut once its batch went to its partition, so its command is final.
        self._piece_command = (
            None
            if whole
            else publish_command(batch.topic, batch.bodies[start : self.end], batch.delay, fork)
        )
        self.tried: list[int] = []  # host policies: nsqds that failed it
        # The Youzan fork: since when, and how often, it waited for its partition's leader.
        self.held_since: float | None = None
        self.holds = 0

    @property
    def command(self) -> bytes:
        """The command that publishes these messages (the batch's own, when whole)."""
        return self.batch.command if self._piece_command is None else self._piece_command

    @property
    def count(self) -> int:
        return self.end - self.start

    @property
    def order(self) -> tuple[int, int]:
        return self.batch.sequence, self.start

    def sizes(self) -> list[int]:
        return list(map(len, self.batch.bodies[self.start : self.end]))


class OutcomeLedger:
    """The outcomes counted (acknowledged, failed, each failure's reason), the batches
    sent and still without an outcome, and whether their messages or bytes reach the
    producer's limits (put() then waits for room)."""

    def __init__(
        self,
        max_unacknowledged: int,
        max_unacknowledged_bytes: int,
        on_outcome: OutcomeHandler | None,
    ) -> None:
        self.max_unacknowledged = max_unacknowledged
        self.max_unacknowledged_bytes = max_unacknowledged_bytes
        self.on_outcome = on_outcome
        self.acknowledged = 0
        self.failed = 0
        self.failure_reasons: Counter[str] = Counter()
        self.in_flight: set[PublishBatch] = set()  # batches sent, awaiting their outcome
        self.unresolved = 0  # messages in those batches
        self.unresolved_bytes = 0
        self._room = trio.Event()  # set when the unresolved fall below the limits

    def add(self, batch: PublishBatch) -> None:
        """A batch sent: without an outcome until resolved."""
        self.in_flight.add(batch)
        self.unresolved += batch.count
        self.unresolved_bytes += batch.size

    def resolve(self, batch: PublishBatch) -> None:
        """Every message of the batch has its outcome: count them and tell the caller."""
        if batch.resolved:
            return
        batch.resolved = True
        self.in_flight.discard(batch)
        self.unresolved -= batch.count
        self.unresolved_bytes -= batch.size
        if batch.errors is None:  # the usual case: all acknowledged, one outcome
            self.acknowledged += batch.count
            if self.on_outcome is not None:
                self.on_outcome(
                    batch.outcome(batch.bodies, batch.tokens, None, batch.acknowledged_by)
                )
        else:
            for outcome in batch.outcomes():
                self.record(outcome)
        batch.done.set()
        if not self.is_full():
            self._room.set()

    def record(self, outcome: PublishOutcome) -> None:
        """Count the outcome and tell the caller (also for messages never sent)."""
        count = len(outcome.bodies)
        if outcome.error is None:
            self.acknowledged += count
        else:
            self.failed += count
            self.failure_reasons[str(outcome.error)] += count
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def fail_all(self, error: NsqError) -> None:
        """Fail every batch without an outcome, in the order they were made."""
        for batch in sorted(self.in_flight, key=lambda batch: batch.sequence):
            batch.fail(0, batch.count, error)
            self.resolve(batch)

    async def wait_all(self) -> None:
        """Wait until every batch sent so far has its outcome."""
        for batch in list(self.in_flight):
            await batch.done.wait()

    def is_full(self) -> bool:
        return (
            self.unresolved >= self.max_unacknowledged
            or self.unresolved_bytes >= self.max_unacknowledged_bytes
        )

    async def wait_for_room(self) -> None:
        while self.is_full():
            self._room = trio.Event()
            await self._room.wait()
