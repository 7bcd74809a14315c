"""to_nsq's run: records read from files or stdin (or made from `nsq pub`'s body
template), published to every nsqd, and what is reported at the end.

RecordPublisher reads each source in turn, splits it into records on the delimiter (a
template's records are made a batch at a time, as they are published), holds them to
--rate, routes them by partition (a shard key hashed, with their trace ids) and queues
them with the producer, which publishes them to every nsqd. A record that fails (not
acknowledged by every nsqd, or without its shard key or trace id) is counted, with its
reason, and kept in the failed file. The first SIGINT/SIGTERM stops the reading and lets
what was read be published; a second exits at once, every record without an answer
counted failed (and kept in the failed file) after the publisher has said so. problem()
is then the line the command ends with.

The command draws the progress line (ProgressLine) and says what a second signal
loses (the `say_lost` callback): nothing here writes to the terminal.
"""

from __future__ import annotations

import functools
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import trio

from nsqtools import flow
from nsqtools.formats import BodyTemplate
from nsqtools.partitions import Partitions
from nsqtools.producer import PUT_MANY_CHUNK, Producer, open_producer
from nsqtools.records import RecordKey, RecordKeyError, split_records
from nsqtools.runtime.progress import measure_rate
from nsqtools.runtime.signals import watch_signals
from nsqtools.runtime.stdio import read_chunks

if TYPE_CHECKING:
    from nsqtools.config import ClientConfig
    from nsqtools.producer import PublishOutcome

log = logging.getLogger("nsqtools")

# Records by the Youzan fork's partition (None: the one nsqd leads), with trace ids.
_ByPartition = dict[int | None, tuple[list[bytes], list[int] | None]]
PROGRESS_INTERVAL = 0.5
# A body template's records made at once (fewer with --rate: a second's worth, so that
# each {ts} is within about a second of its publishing).
MADE_AT_ONCE = 1000

# What records come from: a file ("-": stdin), or `nsq pub`'s body template.
Source = Path | BodyTemplate


@dataclass(frozen=True)
class PublishSettings:
    """What to publish and how (to_nsq's options, checked)."""

    topic: str
    delimiter: bytes
    rate: int  # records per second; 0: no limit
    delay: float | None  # seconds (DPUB); None: none
    reconnect_timeout: float
    lookupd_http_addresses: tuple[str, ...]  # the Youzan fork's: publish to the leaders
    partition: int | None  # the Youzan fork's partition of every PUB
    shard_key: RecordKey | None
    trace_id: RecordKey | None


class ProgressLine(Protocol):
    """The progress line the command draws while records are published."""

    def show(self, published: int, per_second: float, failed: int) -> None: ...

    def end(self, published: int, failed: int) -> None:
        """The final count, left in place."""


class FailedFile:
    """--failed-file: the records that failed, each followed by the delimiter, made
    durable (fsync) before the command reports."""

    def __init__(self, path: Path, delimiter: bytes) -> None:
        self.path = path
        self.delimiter = delimiter
        self._file = path.open("wb")

    def write(self, records: Sequence[bytes]) -> None:
        delimiter = self.delimiter
        self._file.write(b"".join(record + delimiter for record in records))

    def close(self) -> None:
        """Flush and fsync; safe twice."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


class RecordPublisher:
    """One to_nsq run: reading, publishing, signals, and what is reported at the end."""

    def __init__(
        self,
        settings: PublishSettings,
        failed_file: FailedFile | None,
        *,
        progress: ProgressLine | None,
        say_lost: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.topic = settings.topic
        self.failed_file = failed_file
        self.progress = progress
        self.say_lost = say_lost  # the problem, when a second signal exits at once
        self.partitions: Partitions | None = None
        self.unkeyed: Counter[str] = Counter()  # records without a shard key or trace id
        self.held: list[bytes] = []  # read, not yet given to the producer (--rate)
        self.unsent = 0  # held records given up on a second signal
        self.interrupted = False  # a first signal stopped the reading
        self.producer: Producer | None = None

    async def publish(
        self, sources: Sequence[Source], addresses: list[str], config: ClientConfig
    ) -> None:
        """Publish every record of the sources, then make the failed file durable."""
        on_outcome = self._record_failures if self.failed_file is not None else None
        lookupds = list(self.settings.lookupd_http_addresses)
        async with AsyncExitStack() as stack:
            if lookupds:
                self.partitions = await stack.enter_async_context(Partitions(lookupds, config))
                await self.partitions.refresh_until_writable(self.topic)
            producer = await stack.enter_async_context(
                open_producer(
                    addresses,
                    config,
                    mode="all",
                    reconnect_timeout=self.settings.reconnect_timeout,
                    on_outcome=on_outcome,
                    partitions=self.partitions,
                )
            )
            self.producer = producer
            await self._publish_all(sources, producer)
        if self.failed_file is not None:
            self.failed_file.close()

    async def _publish_all(self, sources: Sequence[Source], producer: Producer) -> None:
        async with trio.open_nursery() as nursery:
            reading = trio.CancelScope()
            # First SIGINT/SIGTERM (one that came while starting, too): read no more,
            # publish what was read, exit. Second: exit at once, every record without an
            # answer counted failed (and kept in the failed file).
            await nursery.start(
                functools.partial(
                    watch_signals, self._stop_reading(reading), before_exit=self._abandon
                )
            )
            if self.progress is not None:
                nursery.start_soon(_show_progress, producer, self.progress)
            with reading:
                for source in sources:
                    await self._publish_source(source)
            await self._give(len(self.held))  # what --rate held back when reading stopped
            await producer.flush()
            nursery.cancel_scope.cancel()

    async def _publish_source(self, source: Source) -> None:
        if isinstance(source, BodyTemplate):
            await self._publish_records(_made(source, self.settings.rate))
            return
        fd = 0 if str(source) == "-" else os.open(source, os.O_RDONLY)
        try:
            await self._publish_records(split_records(read_chunks(fd), self.settings.delimiter))
        finally:
            if fd != 0:
                os.close(fd)

    async def _publish_records(self, batches: AsyncIterator[list[bytes]]) -> None:
        rate = self.settings.rate
        bucket = flow.TokenBucket(rate, trio.current_time()) if rate else None
        async for records in batches:
            self.held = records
            while bucket is not None and self.held:
                await self._give(bucket.take(len(self.held), trio.current_time()))
                if self.held:
                    await trio.sleep(bucket.wait_time(trio.current_time()))
            await self._give(len(self.held))

    async def _give(self, count: int) -> None:
        """Queue the first `count` records held. Each leaves `held` as it is queued
        (put_many queues up to PUT_MANY_CHUNK records before it may wait), so that a
        second signal meanwhile counts every record once."""
        while count > 0:
            piece = min(count, PUT_MANY_CHUNK)
            records, self.held = self.held[:piece], self.held[piece:]
            count -= piece
            await self._put(records)

    async def _put(self, records: list[bytes]) -> None:
        """Queue records read; a signal stops the reading, never the queueing of what was read."""
        assert self.producer is not None
        settings = self.settings
        with trio.CancelScope(shield=True):
            if settings.shard_key is None and settings.trace_id is None:
                await self.producer.put_many(
                    self.topic, records, settings.delay, partition=settings.partition
                )
                return
            for partition, (bodies, trace_ids) in self._keyed(records).items():
                await self.producer.put_many(
                    self.topic, bodies, partition=partition, trace_ids=trace_ids
                )

    def _keyed(self, records: list[bytes]) -> _ByPartition:
        """The records by partition (in their order within each), with their trace ids.
        A record without its key fails here: written to the failed file, counted."""
        trace_key = self.settings.trace_id
        groups: _ByPartition = {}
        unkeyed: list[bytes] = []
        for record in records:
            try:
                partition = self._partition_of(record)
            except RecordKeyError as error:
                self.unkeyed[f"--shard-key: {error}"] += 1
                unkeyed.append(record)
                continue
            try:
                trace_id = None if trace_key is None else _trace_id(trace_key.of(record))
            except RecordKeyError as error:
                self.unkeyed[f"--trace-id: {error}"] += 1
                unkeyed.append(record)
                continue
            bodies, trace_ids = groups.setdefault(partition, ([], None if trace_id is None else []))
            bodies.append(record)
            if trace_ids is not None and trace_id is not None:
                trace_ids.append(trace_id)
        if unkeyed and self.failed_file is not None:
            self.failed_file.write(unkeyed)
        return groups

    def _partition_of(self, record: bytes) -> int | None:
        shard_key = self.settings.shard_key
        if shard_key is None:
            return self.settings.partition
        assert self.partitions is not None  # --shard-key needs --lookupd-http-address
        return self.partitions.for_key(self.topic, shard_key.of(record).encode())

    def _record_failures(self, outcome: PublishOutcome) -> None:
        if outcome.error is not None and self.failed_file is not None:
            self.failed_file.write(outcome.bodies)

    def _stop_reading(self, reading: trio.CancelScope) -> Callable[[], None]:
        def stop() -> None:
            reading.cancel()
            self.interrupted = True
            self._say_stopping()

        return stop

    def _say_stopping(self) -> None:
        assert self.producer is not None
        waiting = self.producer.pending + len(self.held)
        log.info(
            "stopping: reading no more; %s records wait for an answer "
            "(a second signal exits at once, counting them failed)",
            f"{waiting:,}",
        )

    def _abandon(self) -> None:
        """Count (and keep in the failed file) every record without an answer yet."""
        assert self.producer is not None
        self.producer.abandon("interrupted before every nsqd acknowledged")
        if self.held:
            self.unsent = len(self.held)
            if self.failed_file is not None:
                self.failed_file.write(self.held)
        if self.failed_file is not None:
            self.failed_file.close()
        problem = self.problem()
        if problem is not None:
            self.say_lost(problem)

    def problem(self) -> str | None:
        """How many records failed and the commonest reason; None when none did."""
        assert self.producer is not None
        producer = self.producer
        reasons = Counter(producer.failure_reasons) + self.unkeyed
        if self.unsent:
            reasons["interrupted before it was sent"] += self.unsent
        failed = producer.failed + self.unsent + self.unkeyed.total()
        if not failed:
            return None
        where = f"; they are in {self.failed_file.path}" if self.failed_file is not None else ""
        return unpublished(failed, producer.acknowledged + failed, reasons) + where


async def _made(template: BodyTemplate, rate: int) -> AsyncIterator[list[bytes]]:
    """The template's records, numbered from 1, made a batch at a time."""
    size = min(rate or MADE_AT_ONCE, MADE_AT_ONCE)
    for first in range(1, template.count + 1, size):
        yield template.bodies(first, min(size, template.count + 1 - first))
        await trio.lowlevel.checkpoint()


def _trace_id(text: str) -> int:
    if not text.isdigit() or int(text) >= 2**64:
        raise RecordKeyError(f"trace id {text[:40]!r} is not an unsigned 64-bit number")
    return int(text)


def unpublished(failed: int, total: int, reasons: Counter[str], what: str = "records") -> str:
    """'N of M records were not published to every nsqd' and every reason with its count,
    the commonest first (to_nsq's error line, and nsq archive replay's)."""
    named = "; ".join(f"{reason} ({count:,})" for reason, count in reasons.most_common())
    return f"{failed:,} of {total:,} {what} were not published to every nsqd: {named}"


async def _show_progress(producer: Producer, line: ProgressLine) -> None:
    """The progress line, redrawn every PROGRESS_INTERVAL: published, rate, failed; the
    final count at the end."""

    def show(per_second: float) -> None:
        line.show(producer.acknowledged, per_second, producer.failed)

    try:
        await measure_rate(lambda: producer.acknowledged, PROGRESS_INTERVAL, show)
    finally:
        line.end(producer.acknowledged, producer.failed)
