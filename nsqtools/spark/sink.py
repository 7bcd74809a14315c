"""The sink of `format("nsq")` (streaming.py's data source): each Spark task's rows (a
`body` column; a `topic` column or the topic option) published with the pipelined
producer. The task, and so the batch, succeeds only when every message is acknowledged;
an nsqd that restarts meanwhile is redialed (reconnect_timeout). Given
lookupd_http_addresses (the Youzan fork's), it publishes to each partition's leader, in
turn, and waits through a leader move (the go-nsq-style option partition_wait).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import trio
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import Row

from nsqtools.config import ClientConfig
from nsqtools.durations import parse_duration
from nsqtools.errors import NsqError
from nsqtools.partitions import Partitions
from nsqtools.producer import MODES, open_producer
from nsqtools.spark.streaming import OptionError, _addresses, _config

# The sink's own options, not go-nsq's (Spark gives option names in lower case).
SINK_OPTIONS = frozenset(
    {"topic", "nsqd_tcp_addresses", "lookupd_http_addresses", "mode", "reconnect_timeout"}
)


@dataclass(frozen=True)
class SinkSettings:
    topic: str  # "": each row's topic column
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]  # the Youzan fork's: to the partitions' leaders
    mode: str
    reconnect_timeout: float
    config: ClientConfig

    @classmethod
    def of(cls, options: Mapping[str, str]) -> SinkSettings:
        nsqd = _addresses(options, "nsqd_tcp_addresses")
        lookupd = _addresses(options, "lookupd_http_addresses")
        if bool(nsqd) == bool(lookupd):
            raise OptionError(
                'format("nsq") sink needs .option("nsqd_tcp_addresses", ...) or, on the '
                'Youzan fork, .option("lookupd_http_addresses", ...), not both'
            )
        mode = options.get("mode", "round-robin")
        if mode not in MODES:
            raise OptionError(f"mode must be one of {', '.join(MODES)}: {mode!r}")
        try:
            reconnect_timeout = parse_duration(options.get("reconnect_timeout", "2m"))
        except ValueError as error:
            raise OptionError(f"reconnect_timeout: {error}") from None
        config = _config(options, SINK_OPTIONS)
        return cls(options.get("topic", ""), nsqd, lookupd, mode, reconnect_timeout, config)


@dataclass
class PublishedMessage(WriterCommitMessage):
    count: int


class NsqStreamWriter(DataSourceStreamWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Row]) -> PublishedMessage:
        by_topic: dict[str, list[bytes]] = {}
        for row in iterator:
            by_topic.setdefault(self._topic_of(row), []).append(_body_of(row))
        count = sum(map(len, by_topic.values()))
        if count:
            trio.run(self._publish, by_topic)
        return PublishedMessage(count)

    def _topic_of(self, row: Row) -> str:
        topic = self.settings.topic or (row["topic"] if "topic" in row.__fields__ else None)
        if not topic:
            raise OptionError('format("nsq") sink needs a topic column or .option("topic", ...)')
        return str(topic)

    async def _publish(self, by_topic: dict[str, list[bytes]]) -> None:
        settings = self.settings
        async with contextlib.AsyncExitStack() as stack:
            partitions = None
            if settings.lookupd_http_addresses:
                partitions = await stack.enter_async_context(
                    Partitions(settings.lookupd_http_addresses, settings.config)
                )
            producer = await stack.enter_async_context(
                open_producer(
                    settings.nsqd_tcp_addresses,
                    settings.config,
                    # Through the fork's lookupd, each batch goes to its partition's leader.
                    settings.mode if partitions is None else "all",
                    reconnect_timeout=settings.reconnect_timeout,
                    partitions=partitions,
                )
            )
            for topic, bodies in by_topic.items():
                await producer.put_many(topic, bodies)
            await producer.flush()
        if producer.failed:
            reason = next(iter(producer.failure_reasons))
            raise NsqError(f"{producer.failed} messages were not published: {reason}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task's messages were acknowledged before it reported: nothing to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Published messages stay published: the sink is at least once."""


def _body_of(row: Row) -> bytes:
    body = row["body"]
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    raise OptionError(f"the body column must be binary or string, not {type(body).__name__}")
