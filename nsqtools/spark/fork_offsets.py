"""format("nsq") with startingOffsets: a replayable offset source for the Youzan fork.

Owns the source that reads the fork's partitions by queue offset: its options, the
offsets Spark keeps in its checkpoint, how a micro-batch is cut, and how a task reads
its range. streaming.py hands a query to it when the options carry startingOffsets.

Design. Spark's partitions are the topic's partitions; an offset is, per partition, a
queue offset (the fork's virtual queue offset: bytes into the partition's disk queue):
{"0": 1024, "1": 980}. Batch k covers, in each partition, the messages whose queue
offset lies in [start, end): the driver only plans (latestOffset: each partition's end
from its leader's /stats; Spark writes the plan to its offset log before any task
runs), and each task reads its range in an executor: POST /channel/setoffset
virtual_queue:start on the partition leader's HTTP API, then SUB_ADVANCED naming the
partition and no position (SUB_ORDERED on an ordered topic): their messages carry their
queue offset and raw size, which a plain SUB's do not (spec, "nsqd TCP", MESSAGE frame);
and SUB_ADVANCED with a position would serve a partition of the nsqd's choosing (spec,
"Observed on a running fork"). It reads until its position reaches end.
It FINs what it read and closes. A message's data never depends on the delivery: the
attempts column is always 1 (the fork counts deliveries on the channel, which a replay
adds to); so a range read again gives the same rows.

The channel. Each task uses the query's channel on its own partition: the fork keeps a
cursor per channel and partition, and a query's batches run one after the other, so no
two tasks of a query share one (two would move each other's cursor). After the last
batch the channel stands at the end of what the query read: its depth is the query's
lag. Two queries need two channels.

The cap. maxMessagesPerTrigger is spread over the partitions; offsets count bytes, not
messages, so a partition's share becomes bytes at its average message size (/stats:
queue end / message count) and the cut may fall inside a message: that message belongs
to the range it starts in, and the next range starts at the first message after the
cut (setoffset virtual_queue:<offset> lands on the first message at or after it, as
the fork's SearchLogByMsgOffset does). No cut leaves a tail shorter than one share.

Failures. Task retry: the retry moves the channel to its start again and reads the
same range. Executor loss: the same, in another executor; what the lost task held in
flight is requeued by the fork when its connection drops, and the next setoffset moves
past it anyway. Driver restart: Spark replans the batches its offset log holds and
whose commit it did not log, with the same offsets: the same messages, in the same
rows; with an idempotent sink, exactly once. A FIN is never the safety net here: the
offsets are (a message FIN'd in a batch that fails is read again by the replay).
Leader move: every task and every plan looks the leader up again (queue offsets are the
same on every replica); a task whose leader moves mid-range follows it (the consumer
looks it up again; what comes again is dropped by offset), or fails and is retried.
Speculative tasks (off by default in Spark) would share a channel with the task they
copy, and either could FIN what the other waits for: spark.speculation must stay off. A
task on an executor that vanished without closing its connections holds its messages
until the fork gives up on it (heartbeats, msg_timeout); its retry waits for them.
A range ending inside a partition's last message, which the tail rule allows only when
that message is larger than a share's worth of bytes, waits for the next message
published to the partition.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from pyspark.sql.datasource import CaseInsensitiveDict, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from nsqtools.consumer import ConsumerOptions, open_consumer
from nsqtools.httpapi import HttpApiError, lookupd, nsqd, send_sync
from nsqtools.protocol import Message
from nsqtools.protocol.youzan import ForkMessage, StartPosition, is_fork_version
from nsqtools.spark.readers import STOP_TIMEOUT
from nsqtools.spark.streaming import OptionError, SourceSettings, record_batch

if TYPE_CHECKING:
    import httpx

STARTING_OFFSETS = "startingOffsets"
EARLIEST = "earliest"
LATEST = "latest"
# In startingOffsets' JSON, as in Spark's Kafka source: a partition's start or end.
_EARLIEST_VALUE = -2
_LATEST_VALUE = -1
_STARTING_HELP = 'earliest, latest, or JSON like {"0": 1024, "1": 0} (queue offsets)'
# How long the driver's HTTP requests may take (lookups, /info, /stats).
HTTP_TIMEOUT = 10.0
# How long the driver keeps asking for the partitions' ends when a lookup or a leader
# fails, and how long it waits between two tries.
PLAN_PATIENCE = 5.0
RETRY_PAUSE = 0.5

Offsets = dict[str, int]  # {"<partition>": queue offset}


class PlanError(RuntimeError):
    """The partitions' leaders or ends could not be learnt; its message is one line."""


@dataclass(frozen=True)
class ForkSettings:
    """The source's settings, and where it starts: EARLIEST, LATEST or an offset (or
    _EARLIEST_VALUE, _LATEST_VALUE) per partition."""

    source: SourceSettings
    starting: str | dict[int, int]

    @classmethod
    def of(cls, options: Mapping[str, str]) -> ForkSettings:
        rest = CaseInsensitiveDict(
            {key: value for key, value in options.items() if key.lower() != "startingoffsets"}
        )
        source = SourceSettings.of(rest)
        if source.nsqd_tcp_addresses:
            raise OptionError(
                "startingOffsets needs lookupd_http_addresses: the Youzan fork's partitions "
                "and their leaders come from nsqlookupd"
            )
        return cls(source, _starting(options[STARTING_OFFSETS]))


def _starting(text: str) -> str | dict[int, int]:
    if text.strip() in (EARLIEST, LATEST):
        return text.strip()
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(
        key.isdigit() and type(value) is int and value >= _EARLIEST_VALUE
        for key, value in document.items()
    ):
        raise OptionError(f"startingOffsets must be {_STARTING_HELP}: {text!r}")
    return {int(key): value for key, value in document.items()}


@dataclass(frozen=True)
class PartitionSpan:
    """A partition as its leader's /stats shows it: where its queue starts and ends, and
    how many messages it ever held (the fork's TotalMessageCnt)."""

    start: int
    end: int
    messages: int

    def cut(self, start: int, share: int | None) -> int:
        """The end of a range from `start`: the partition's end, or `share` messages'
        worth of bytes when more is there and at least as much would be left after."""
        if share is None or self.messages == 0 or self.end <= start:
            return max(self.end, start)
        budget = math.ceil(share * self.end / self.messages)
        cut = start + budget
        return cut if self.end - cut >= budget else self.end


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """The messages of one partition whose queue offset is in [start, end)."""

    partition: int
    start: int
    end: int


class ForkOffsetReader(DataSourceStreamReader):
    """Offsets: {"<partition>": queue offset}; see the module's docstring."""

    def __init__(self, settings: ForkSettings) -> None:
        self.settings = settings
        self._check_fork()

    def _check_fork(self) -> None:
        address = self.settings.source.lookupd_http_addresses[0]
        with _http_client() as client:
            version = send_sync(client, lookupd.info(address)).version
        if not is_fork_version(version):
            raise OptionError(
                f"startingOffsets needs the Youzan fork's partitions: nsqlookupd {address} is "
                f"NSQ {version}, which has none"
            )

    def initialOffset(self) -> Offsets:
        spans = self._spans()
        starting = self.settings.starting
        if starting == EARLIEST:
            return {str(p): span.start for p, span in spans.items()}
        if starting == LATEST:
            return {str(p): span.end for p, span in spans.items()}
        assert isinstance(starting, dict)
        missing = sorted(set(spans) - set(starting))
        unknown = sorted(set(starting) - set(spans))
        if missing or unknown:
            raise OptionError(
                f"startingOffsets must name each of the {len(spans)} partitions of "
                f"{self.settings.source.topic} (missing {missing}, unknown {unknown})"
            )
        return {str(p): _resolve(value, spans[p]) for p, value in starting.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.source.max_messages_per_trigger)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        spans = self._spans()
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        share = None if rows is None else math.ceil(rows / len(spans))
        # A partition added while the query runs is read from its beginning.
        return {str(p): span.cut(start.get(str(p), 0), share) for p, span in spans.items()}

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = (OffsetRange(int(p), start.get(p, 0), stop) for p, stop in end.items())
        return [wanted for wanted in ranges if wanted.start < wanted.end]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, OffsetRange)
        source = self.settings.source
        messages = trio.run(read_range, source, partition)
        yield record_batch(source.topic, messages)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets in Spark's checkpoint are the source's state, and
        each task FIN'd what it read."""

    def _spans(self) -> dict[int, PartitionSpan]:
        """Each partition's span; asked again for a few seconds while a lookup or a
        leader fails (a leader move takes 0.5-1.4 s: spec, "Publishing and leadership")."""
        deadline = time.monotonic() + PLAN_PATIENCE
        while True:
            try:
                return self._ask_spans()
            except (HttpApiError, PlanError) as error:
                if time.monotonic() >= deadline:
                    topic = self.settings.source.topic
                    raise PlanError(f"topic {topic} cannot be read by offsets: {error}") from None
            time.sleep(RETRY_PAUSE)

    def _ask_spans(self) -> dict[int, PartitionSpan]:
        """Each partition's span, from its leader's /stats (topic backend_start,
        backend_depth and message_count: spec, "nsqd HTTP /stats"; the fork fills them
        from its queue's read start, TotalDataSize and TotalMessageCnt)."""
        topic_name = self.settings.source.topic
        with _http_client() as client:
            leaders = self._leaders(client)
            answers = {
                address: send_sync(client, nsqd.stats(address, topic_name, include_clients=False))
                for address in set(leaders.values())
            }
        spans = {
            topic.partition: PartitionSpan(
                topic.backend_start, topic.backend_depth, topic.message_count
            )
            for address, stats in answers.items()
            for topic in stats.topics
            if topic.topic_name == topic_name
            and topic.partition is not None
            and leaders.get(topic.partition) == address
        }
        if set(spans) != set(leaders):
            absent = sorted(set(leaders) - set(spans))
            raise PlanError(f"the leaders of partitions {absent} do not list them")
        return spans

    def _leaders(self, client: httpx.Client) -> dict[int, str]:
        """Each partition's leader's HTTP address, from the first nsqlookupd that knows."""
        source = self.settings.source
        errors = []
        for address in source.lookupd_http_addresses:
            try:
                found = send_sync(client, lookupd.topic_lookup(address, source.topic))
            except HttpApiError as error:
                errors.append(str(error))
                continue
            if found.partitions:
                return {p: node.http_address for p, node in found.partitions.items()}
        raise PlanError("; ".join(errors) or "no nsqlookupd lists its partitions")


def _http_client() -> httpx.Client:
    """A client for the driver's few requests of one plan (httpx is imported here: the
    tasks never need it)."""
    from nsqtools.httpapi.clients import sync_client

    return sync_client(timeout=HTTP_TIMEOUT)


def _resolve(value: int, span: PartitionSpan) -> int:
    if value == _EARLIEST_VALUE:
        return span.start
    if value == _LATEST_VALUE:
        return span.end
    return value


async def read_range(source: SourceSettings, wanted: OffsetRange) -> list[tuple[Message, str]]:
    """The messages of the range, in offset order, each once, with the nsqd that served
    it: the query's channel moved to the range's start, then read until its end."""
    options = ConsumerOptions(
        lookupd_http_addresses=source.lookupd_http_addresses,
        partition=wanted.partition,
        start_at=StartPosition("virtual_queue", wanted.start),
        stop_timeout=STOP_TIMEOUT,
    )
    kept: dict[int, tuple[Message, str]] = {}
    position = wanted.start
    async with open_consumer(source.topic, source.channel, source.config, options) as consumer:
        async for batch in consumer:
            mine = []
            for message in batch.messages:
                assert isinstance(message, ForkMessage)
                offset, size = message.queue_offset, message.raw_size
                assert offset is not None and size is not None  # SUB_ADVANCED's detail
                if offset >= wanted.end:
                    position = wanted.end  # the next range's: left to the fork
                    continue
                mine.append(message)
                if offset >= wanted.start and offset not in kept:
                    # A redelivery (a message timed out in flight) is not kept twice.
                    kept[offset] = (_first_delivery(message), batch.nsqd_address)
                position = max(position, offset + size)
            batch.finish(mine)
            if position >= wanted.end:
                break
    return [kept[offset] for offset in sorted(kept)]


def _first_delivery(message: ForkMessage) -> ForkMessage:
    """The message as a range's row carries it: attempts 1, whatever the deliveries."""
    first = Message(message.id, message.timestamp, 1, message.body)
    return ForkMessage(
        first,
        message.body,
        message.partition,
        queue_offset=message.queue_offset,
        raw_size=message.raw_size,
        ext=message.ext,
    )
