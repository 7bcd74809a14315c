"""nsq archive replay: archived messages published again to a topic, by Spark tasks.

Each partition of the messages (nsqtools.spark.messages), in time order, goes to a
Python task that publishes its bodies, byte-equal, with the pipelined Producer to every
nsqd given (as to_nsq does), at its share of the overall rate; each task returns its
counts (published and failed by topic of origin, failure reasons, malformed lines left
out) and the driver sums them. A task Spark runs again publishes its messages again:
replay is at-least-once, as NSQ is.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from nsqtools.config import ClientConfig
from nsqtools.errors import NsqError
from nsqtools.flow import TokenBucket
from nsqtools.producer import PUT_MANY_CHUNK, Producer, PublishOutcome, open_producer

UNKNOWN_TOPIC = "(unknown)"  # an envelope without a topic, in a file whose name has none
# Time first; raw archives only have their file's hour, so then the file and the order
# the lines were read in (what monotonically_increasing_id gives within a partition).
_READ_ORDER = "_read_order"
_ORDER = ("timestamp", "timestamp_ns", "file", _READ_ORDER)


class BadCondition(NsqError):
    """A --where Spark cannot parse or apply to the messages' columns."""


@dataclass(frozen=True)
class Destination:
    """Where the messages go: a topic on every one of the nsqds."""

    topic: str
    addresses: tuple[str, ...]
    config: ClientConfig


@dataclass
class Replayed:
    """What became of the messages: per task, then summed."""

    published: Counter[str] = field(default_factory=Counter)  # by topic of origin
    failed: Counter[str] = field(default_factory=Counter)  # by topic of origin
    reasons: Counter[str] = field(default_factory=Counter)  # failed messages by reason
    malformed: int = 0  # lines that are no message (no envelope, or empty): left out
    tasks: int = 0  # tasks run at once, each publishing at rate / tasks

    def count(self, outcome: PublishOutcome) -> None:
        """The Producer's on_outcome: its tokens are the messages' topics of origin."""
        assert outcome.tokens is not None  # every message is put with its topic
        (self.published if outcome.error is None else self.failed).update(outcome.tokens)

    def add(self, other: Replayed) -> None:
        self.published.update(other.published)
        self.failed.update(other.failed)
        self.reasons.update(other.reasons)
        self.malformed += other.malformed


def replay(
    messages: DataFrame, destination: Destination, rate: int = 0, where: str | None = None
) -> Replayed:
    """Publish the messages (those `where` selects, a Spark SQL condition over their
    columns) to the destination, at most `rate` a second overall (0: no limit)."""
    ordered, tasks = _in_tasks(_selected(messages, where), rate)
    task_rate = rate / tasks if rate else 0.0
    publish = functools.partial(_publish_partition, destination, task_rate)
    rows = ordered.select("topic", "body", "malformed").rdd
    replayed = Replayed(tasks=tasks)
    for counts in rows.mapPartitions(publish).collect():
        replayed.add(counts)
    return replayed


def _selected(messages: DataFrame, where: str | None) -> DataFrame:
    """The messages `where` selects, and every malformed line (for the task to count)."""
    if where is None:
        return messages
    try:
        return messages.where(F.col("malformed") | F.expr(where))
    except AnalysisException as error:  # ParseException included
        reason = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
        raise BadCondition(f"{where!r}: {reason}") from None


def _in_tasks(messages: DataFrame, rate: int) -> tuple[DataFrame, int]:
    """The messages in time order within each partition, and how many tasks run at
    once. Under a rate lower than that, partitions are merged into `rate` tasks: each
    task's share must be at least one message a second (a token bucket holds no more
    than a second's worth, so a smaller share would never reach one token)."""
    numbered = messages.withColumn(_READ_ORDER, F.monotonically_increasing_id())
    partitions = max(1, numbered.rdd.getNumPartitions())
    tasks = min(partitions, numbered.sparkSession.sparkContext.defaultParallelism)
    if rate and rate < tasks:
        numbered, tasks = numbered.coalesce(rate), rate
    return numbered.sortWithinPartitions(*_ORDER), tasks


def _publish_partition(
    destination: Destination, rate: float, rows: Iterable[Any]
) -> Iterator[Replayed]:
    """A task: the partition's rows published; its counts as its only result."""
    yield trio.run(_publish_rows, destination, rate, rows)


async def _publish_rows(destination: Destination, rate: float, rows: Iterable[Any]) -> Replayed:
    counts = Replayed()
    bucket = TokenBucket(rate, trio.current_time()) if rate else None
    producing = open_producer(destination.addresses, destination.config, on_outcome=counts.count)
    async with producing as producer:
        for topics, bodies in _chunks(rows, counts):
            await _put_paced(producer, destination.topic, topics, bodies, bucket)
    counts.reasons.update(producer.failure_reasons)
    return counts


async def _put_paced(
    producer: Producer,
    topic: str,
    origins: Sequence[str],
    bodies: Sequence[bytes],
    bucket: TokenBucket | None,
) -> None:
    """put_many, each message once the bucket has a token for it (all at once without
    a bucket); the origins go along as the messages' tokens."""
    while bodies:
        granted = len(bodies) if bucket is None else bucket.take(len(bodies), trio.current_time())
        await producer.put_many(topic, bodies[:granted], tokens=origins[:granted])
        origins, bodies = origins[granted:], bodies[granted:]
        if bodies and bucket is not None:
            await trio.sleep(bucket.wait_time(trio.current_time()))


def _chunks(
    rows: Iterable[Any], counts: Replayed
) -> Iterator[tuple[Sequence[str], Sequence[bytes]]]:
    """The rows' topics of origin and bodies (bytes, as Spark gives bytearrays), a
    put_many's worth at a time. Malformed lines, and empty ones (nsqd takes no empty
    message, so none was archived), are counted and left out."""
    topics: list[str] = []
    bodies: list[bytes] = []
    for row in rows:
        if row.malformed or not row.body:
            counts.malformed += 1
            continue
        topics.append(row.topic or UNKNOWN_TOPIC)
        bodies.append(bytes(row.body))
        if len(bodies) == PUT_MANY_CHUNK:
            yield topics, bodies
            topics, bodies = [], []
    if bodies:
        yield topics, bodies
