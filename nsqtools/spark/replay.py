"""nsq archive replay: archived messages published again to a topic, by Spark tasks.

Each partition of the messages (nsqtools.spark.messages), in time order, goes to a
Python task (mapInArrow: DataFrame operations only, so a Spark Connect session runs it
too) that publishes its bodies, byte-equal, with the pipelined Producer to every nsqd
given (as to_nsq does), at its share of the overall rate; each task returns its counts
(published and failed by topic of origin, failure reasons, malformed lines left out) as
one row, and the driver sums them. Under a rate the messages are first spread over as
many partitions as tasks run at once (fewer under a rate lower than that), so each
task's share is known before it starts. A task Spark runs again publishes its messages
again: replay is at-least-once, as NSQ is.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import trio
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Row, SparkSession
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
_COUNTS = pa.map_(pa.string(), pa.int64())
_COUNTS_SCHEMA = (
    "published map<string, bigint>, failed map<string, bigint>, "
    "reasons map<string, bigint>, malformed bigint"
)
# Rows enough that a range spread the default way leaves no partition empty.
_PROBE_ROWS = 1 << 20


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

    def as_batch(self) -> pa.RecordBatch:
        """A task's counts as its one row (_COUNTS_SCHEMA)."""
        counters = {"published": self.published, "failed": self.failed, "reasons": self.reasons}
        columns = {
            name: pa.array([list(counter.items())], _COUNTS) for name, counter in counters.items()
        }
        columns["malformed"] = pa.array([self.malformed], pa.int64())
        return pa.RecordBatch.from_pydict(columns)

    @classmethod
    def from_row(cls, row: Row) -> Replayed:
        return cls(Counter(row.published), Counter(row.failed), Counter(row.reasons), row.malformed)


def replay(
    messages: DataFrame, destination: Destination, rate: int = 0, where: str | None = None
) -> Replayed:
    """Publish the messages (those `where` selects, a Spark SQL condition over their
    columns) to the destination, at most `rate` a second overall (0: no limit)."""
    parallelism = _parallelism(messages.sparkSession)
    # Under a rate each task's share must be at least one message a second (a token
    # bucket holds no more than a second's worth, so a smaller share would never reach
    # one token): fewer tasks than run at once when the rate is lower.
    tasks = min(rate, parallelism) if rate else None
    ordered = _in_time_order(_selected(messages, where), tasks)
    publish = functools.partial(_publish_partition, destination, rate / tasks if tasks else 0.0)
    rows = ordered.select("topic", "body", "malformed").mapInArrow(publish, _COUNTS_SCHEMA)
    counts = rows.collect()  # a row per partition, empty ones included
    replayed = Replayed(tasks=tasks or min(len(counts), parallelism))
    for row in counts:
        replayed.add(Replayed.from_row(row))
    return replayed


def _selected(messages: DataFrame, where: str | None) -> DataFrame:
    """The messages `where` selects, and every malformed line (for the task to count)."""
    if where is None:
        return messages
    try:
        selected = messages.where(F.col("malformed") | F.expr(where))
        _ = selected.schema  # analysed now: a Connect session's would be at the job's start
    except AnalysisException as error:  # ParseException included
        reason = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
        raise BadCondition(f"{where!r}: {reason}") from None
    return selected


def _parallelism(spark: SparkSession) -> int:
    """How many tasks the session runs at once: the partitions Spark gives a range by
    default (its default parallelism, which a Connect session's API does not give)."""
    ids = spark.range(_PROBE_ROWS).select(F.spark_partition_id().alias("partition"))
    last: int = ids.agg(F.max("partition")).first()[0]  # type: ignore[index]
    return last + 1


def _in_time_order(messages: DataFrame, partitions: int | None) -> DataFrame:
    """The messages in time order within each partition, spread over `partitions` ones
    first if given (else as read: a file's messages in one)."""
    numbered = messages.withColumn(_READ_ORDER, F.monotonically_increasing_id())
    if partitions is not None:
        numbered = numbered.repartition(partitions)
    return numbered.sortWithinPartitions(*_ORDER)


def _publish_partition(
    destination: Destination, rate: float, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A task: the partition's messages published; its counts as its only row."""
    yield trio.run(_publish_batches, destination, rate, batches).as_batch()


async def _publish_batches(
    destination: Destination, rate: float, batches: Iterable[pa.RecordBatch]
) -> Replayed:
    counts = Replayed()
    bucket = TokenBucket(rate, trio.current_time()) if rate else None
    producing = open_producer(destination.addresses, destination.config, on_outcome=counts.count)
    async with producing as producer:
        for topics, bodies in _chunks(batches, counts):
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
    batches: Iterable[pa.RecordBatch], counts: Replayed
) -> Iterator[tuple[Sequence[str], Sequence[bytes]]]:
    """The messages' topics of origin and bodies, a put_many's worth at a time.
    Malformed lines, and empty ones (nsqd takes no empty message, so none was
    archived), are counted and left out."""
    topics: list[str] = []
    bodies: list[bytes] = []
    for batch in batches:
        columns = batch.to_pydict()
        for topic, body, malformed in zip(
            columns["topic"], columns["body"], columns["malformed"], strict=True
        ):
            if malformed or not body:
                counts.malformed += 1
                continue
            topics.append(topic or UNKNOWN_TOPIC)
            bodies.append(body)
            if len(bodies) == PUT_MANY_CHUNK:
                yield topics, bodies
                topics, bodies = [], []
    if bodies:
        yield topics, bodies
