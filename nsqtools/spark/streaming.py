"""Live topics in Spark Structured Streaming: `format("nsq")`, a source and a sink.

The source reads in the executors: each micro-batch is `readers` read tasks, and each
task takes its share of maxMessagesPerTrigger from the consumer its executor process
keeps for the query (readers.py's Holder, started by the first task there). The
messages stay in flight, TOUCHed before nsqd's msg_timeout, until Spark commits their
batch: the query's reader on the driver (NsqStreamReader, here) then tells the holders
over a control channel (coordination.py), and only then are they FIN'd. A stopped or
failed query requeues what its holders hold at once. Delivery is at least once, and
each row has the message id for deduplication. What happens on each failure:

- a task retried in the same process reads the same messages again (its holder still
  holds them); in another process, other messages: then both readings are requeued at
  the commit, since which one Spark used is not known here (so with speculative
  tasks);
- an executor lost: its messages come back from nsqd after msg_timeout; the batch's
  retried tasks read others;
- the driver restarted from its checkpoint: the old holders lose their control channel
  and requeue at once; the uncommitted batch is read again from what nsqd gives now;
- nsqd restarted: it requeues what was in flight; a FIN after that is refused and the
  message comes again.

Spark commits batch k only when it plans batch k+1: so a batch is planned when a batch
not yet committed carries messages, even when nothing new waits (the batch that commits
the last one).

The sink is sink.py's. This module holds the options both read.

Options of both: nsqd_tcp_addresses or lookupd_http_addresses (comma-separated), and
any go-nsq option by its name (tls_v1, auth_secret, msg_timeout, ...). The source's:
topic, channel, maxMessagesPerTrigger, readers, idle_timeout. The sink's: topic, mode,
reconnect_timeout.
"""

from __future__ import annotations

import atexit
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from nsqtools import __version__
from nsqtools.config import ClientConfig, ConfigError
from nsqtools.durations import parse_duration
from nsqtools.formats import message_id
from nsqtools.protocol import Message
from nsqtools.spark import readers
from nsqtools.spark.coordination import Coordinator, CoordinatorAddress

NAME = "nsq"
SCHEMA = (
    "id string, body binary, timestamp timestamp, attempts int, topic string, nsqd_address string"
)
COLUMNS = ["id", "body", "timestamp", "attempts", "topic", "nsqd_address"]
DEFAULT_MAX_MESSAGES_PER_TRIGGER = 1000
# Read tasks per batch when register() could not ask Spark for its parallelism.
DEFAULT_READERS = 2
DEFAULT_IDLE_TIMEOUT = "10s"
# Options that are ours, not go-nsq's (Spark gives option names in lower case).
_SOURCE_OPTIONS = frozenset(
    {
        "topic",
        "channel",
        "nsqd_tcp_addresses",
        "lookupd_http_addresses",
        "maxmessagespertrigger",
        "readers",
        "idle_timeout",
    }
)
# Spark's own options, which it passes to every data source too.
_SPARKS_OPTIONS = frozenset({"checkpointlocation", "path", "queryname", "outputmode"})


class OptionError(ValueError):
    """An option of format("nsq") that is missing or wrong; its message is one line."""


def _addresses(options: Mapping[str, str], name: str) -> list[str]:
    return [address.strip() for address in options.get(name, "").split(",") if address.strip()]


def _config(options: Mapping[str, str], ours: frozenset[str]) -> ClientConfig:
    config = ClientConfig(user_agent=f"nsqtools-spark/{__version__}")
    try:
        config.apply_options(
            f"{key},{value}"
            for key, value in options.items()
            if key.lower() not in ours | _SPARKS_OPTIONS
        )
    except ConfigError as error:
        raise OptionError(f'format("nsq"): {error}') from None
    return config


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name, "")
    if not value:
        raise OptionError(f'format("nsq") needs .option("{name}", ...)')
    return value


# -- the source -------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSettings:
    topic: str
    channel: str
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    max_messages_per_trigger: int
    readers: int  # read tasks per micro-batch
    idle_timeout: float  # seconds after which a holder no task uses lets go
    config: ClientConfig

    @classmethod
    def of(
        cls, options: Mapping[str, str], default_readers: int = DEFAULT_READERS
    ) -> SourceSettings:
        nsqd = _addresses(options, "nsqd_tcp_addresses")
        lookupd = _addresses(options, "lookupd_http_addresses")
        if bool(nsqd) == bool(lookupd):
            raise OptionError(
                'format("nsq") needs nsqd_tcp_addresses or lookupd_http_addresses, not both'
            )
        limit = _positive(options, "maxMessagesPerTrigger", DEFAULT_MAX_MESSAGES_PER_TRIGGER)
        reader_count = _positive(options, "readers", default_readers)
        try:
            idle_timeout = parse_duration(options.get("idle_timeout", DEFAULT_IDLE_TIMEOUT))
        except ValueError as error:
            raise OptionError(f"idle_timeout: {error}") from None
        config = _config(options, _SOURCE_OPTIONS)
        if "max_in_flight" not in {key.lower() for key in options}:
            # Each reader's share of a batch, twice: room for the next batch's while
            # one waits for its commit.
            config.max_in_flight = 2 * math.ceil(limit / reader_count)
        return cls(
            _required(options, "topic"),
            _required(options, "channel"),
            nsqd,
            lookupd,
            limit,
            reader_count,
            idle_timeout,
            config,
        )


def _positive(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name, str(default))
    if not text.isdigit() or int(text) < 1:
        raise OptionError(f"{name} must be a positive number: {text!r}")
    return int(text)


def record_batch(topic: str, messages: list[tuple[Message, str]]) -> Any:
    """Messages (with the nsqd each came from) as the source's rows: one Arrow record
    batch, which Spark takes as is (tuples it would convert row by row: half the time
    of a large batch)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [
            pa.array([message_id(message) for message, _ in messages], pa.string()),
            pa.array([message.body for message, _ in messages], pa.binary()),
            pa.array(
                [message.timestamp // 1000 for message, _ in messages],  # ns -> Spark's us
                pa.timestamp("us", tz="UTC"),
            ),
            pa.array([message.attempts for message, _ in messages], pa.int32()),
            pa.array([topic] * len(messages), pa.string()),
            pa.array([nsqd for _, nsqd in messages], pa.string()),
        ],
        names=COLUMNS,
    )


@dataclass(frozen=True)
class ReaderPartition(InputPartition):
    """One read task: slot `slot` of micro-batch `batch`, at most `limit` messages,
    read by its executor process's holder (readers.py), which reaches the driver's
    coordinator at `coordinator`."""

    coordinator: CoordinatorAddress
    batch: int
    slot: int
    limit: int


class NsqStreamReader(DataSourceStreamReader):
    """Offsets are micro-batch numbers: {"batch": n}. A batch is `readers` read tasks,
    each its share of maxMessagesPerTrigger. A batch is planned when messages wait in
    some holder, when a batch not yet committed carries messages (Spark commits batch k
    only when it plans k+1), and when no holder is there yet (its tasks start them)."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._coordinator: Coordinator | None = None

    @property
    def coordinator(self) -> Coordinator:
        """Started on first use: Spark also makes readers only to send their read() to
        the tasks (pickled without it)."""
        if self._coordinator is None:
            self._coordinator = Coordinator()
            atexit.register(self._coordinator.close)
        return self._coordinator

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "_coordinator": None}

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.max_messages_per_trigger)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        coordinator = self.coordinator
        if coordinator.waiting() or coordinator.holds_messages() or not coordinator.holders():
            return {"batch": start["batch"] + 1}
        return start

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        count = self.settings.readers
        share = math.ceil(self.settings.max_messages_per_trigger / count)
        address = self.coordinator.address
        return [ReaderPartition(address, end["batch"], slot, share) for slot in range(count)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReaderPartition)
        holder = readers.holder_for(self.settings, partition.coordinator)
        messages = holder.read(partition.batch, partition.slot, partition.limit)
        return iter([record_batch(self.settings.topic, messages)] if messages else [])

    def commit(self, end: dict[str, int]) -> None:
        self.coordinator.commit(end["batch"])

    def stop(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()


# -- the data source --------------------------------------------------------------------


class NsqDataSource(DataSource):
    """format("nsq"): readStream (the source) and writeStream (the sink)."""

    # Read tasks per batch unless the readers option says: register() sets the
    # session's parallelism (the driver's reader, in a Python worker, cannot ask).
    default_readers: ClassVar[int] = DEFAULT_READERS

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        if "startingOffsets" in self.options:  # the Youzan fork's offsets: fork_offsets.py
            from nsqtools.spark.fork_offsets import ForkOffsetReader, ForkSettings

            return ForkOffsetReader(ForkSettings.of(self.options))
        return NsqStreamReader(SourceSettings.of(self.options, self.default_readers))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from nsqtools.spark.sink import NsqStreamWriter, SinkSettings  # it imports this

        return NsqStreamWriter(SinkSettings.of(self.options))
