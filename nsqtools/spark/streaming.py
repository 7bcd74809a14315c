"""Live topics in Spark Structured Streaming: `format("nsq")`, a source and a sink.

The source runs our consumer in a thread of the Python worker that Spark keeps on the
driver for the query's reader. Messages are taken into micro-batches (at most
maxMessagesPerTrigger each) and stay in flight, TOUCHed before nsqd's msg_timeout,
until Spark commits their batch: only then are they FIN'd. A stopped or failed query
requeues what it holds at once (REQ 0 after RDY 0, so nothing is sent straight back):
on stop(), and on SIGTERM, which is how Spark may end the worker without stop(); a
worker whose parent (the JVM, or Spark's daemon) is gone requeues and ends itself too.
So delivery is at least once, and each row has the message id for deduplication.

Two things keep the source from stalling. Spark commits batch k only when it plans
batch k+1: with nothing new the last batch would never be committed, and a window of
uncommitted messages as wide as RDY means nothing new. So when nothing new came and the
last batch holds messages, the source reports one empty batch, whose planning commits
it. A query restarted from its checkpoint replays its uncommitted batch empty: those
messages were requeued (or time out) and come back from nsqd in later batches.

The sink is sink.py's. This module holds the options both read.

Options of both: nsqd_tcp_addresses or lookupd_http_addresses (comma-separated), and
any go-nsq option by its name (tls_v1, auth_secret, msg_timeout, ...). The source's:
topic, channel, maxMessagesPerTrigger. The sink's: topic, mode, reconnect_timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import signal
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import trio
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from nsqtools import __version__
from nsqtools.config import ClientConfig, ConfigError
from nsqtools.consumer import Consumer, ConsumerOptions, ReceivedBatch, open_consumer
from nsqtools.formats import message_id
from nsqtools.protocol import Message

log = logging.getLogger("nsqtools.spark.streaming")

NAME = "nsq"
SCHEMA = (
    "id string, body binary, timestamp timestamp, attempts int, topic string, nsqd_address string"
)
COLUMNS = ["id", "body", "timestamp", "attempts", "topic", "nsqd_address"]
DEFAULT_MAX_MESSAGES_PER_TRIGGER = 1000
# How long a stopping source may take to requeue what it holds.
STOP_TIMEOUT = 10.0
# How often the source's worker looks whether its parent is still there.
PARENT_CHECK_INTERVAL = 0.5
# What wakes the main thread for a SIGTERM another thread took (default: ignored).
_NUDGE = signal.SIGWINCH
# Options that are ours, not go-nsq's (Spark gives option names in lower case).
_SOURCE_OPTIONS = frozenset(
    {"topic", "channel", "nsqd_tcp_addresses", "lookupd_http_addresses", "maxmessagespertrigger"}
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
    config: ClientConfig

    @classmethod
    def of(cls, options: Mapping[str, str]) -> SourceSettings:
        nsqd = _addresses(options, "nsqd_tcp_addresses")
        lookupd = _addresses(options, "lookupd_http_addresses")
        if bool(nsqd) == bool(lookupd):
            raise OptionError(
                'format("nsq") needs nsqd_tcp_addresses or lookupd_http_addresses, not both'
            )
        limit_text = options.get("maxMessagesPerTrigger", str(DEFAULT_MAX_MESSAGES_PER_TRIGGER))
        if not limit_text.isdigit() or int(limit_text) < 1:
            raise OptionError(f"maxMessagesPerTrigger must be a positive number: {limit_text!r}")
        config = _config(options, _SOURCE_OPTIONS)
        if "max_in_flight" not in {key.lower() for key in options}:
            # Room for the next batch while one waits for its commit.
            config.max_in_flight = 2 * int(limit_text)
        return cls(
            _required(options, "topic"),
            _required(options, "channel"),
            nsqd,
            lookupd,
            int(limit_text),
            config,
        )


@dataclass
class _Taken:
    """Messages of one consumer batch that went into one micro-batch."""

    batch: ReceivedBatch
    messages: list[Message]


@dataclass
class _Held:
    """What the source holds: taken from the consumer, not yet in a batch; and each
    micro-batch's messages until Spark commits it. Shared by Spark's thread and the
    consumer's; guarded by `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    waiting: deque[_Taken] = field(default_factory=deque)
    batches: dict[int, list[_Taken]] = field(default_factory=dict)

    def everything(self) -> list[_Taken]:
        with self.lock:
            return [*self.waiting, *(taken for held in self.batches.values() for taken in held)]


class LiveConsumer:
    """Our consumer, run on trio in a thread of its own, feeding `held.waiting`."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self.held = _Held()
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._consumer: Consumer | None = None
        self._window = 0  # the consumer's in-flight window, as its thread last saw it
        self._thread = threading.Thread(target=self._run, name="nsq-source", daemon=True)
        self._thread.start()
        self._started.wait()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        _leave_sigterm_to_the_main_thread()  # and to no thread trio starts from this one
        try:
            trio.run(self._consume)
        except BaseException as error:  # reported to Spark's thread by take()
            self.error = error
        finally:
            self._started.set()

    async def _consume(self) -> None:
        settings = self.settings
        self._token = trio.lowlevel.current_trio_token()
        async with open_consumer(
            settings.topic,
            settings.channel,
            settings.config,
            ConsumerOptions(
                nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
                lookupd_http_addresses=settings.lookupd_http_addresses,
                stop_timeout=STOP_TIMEOUT,
            ),
        ) as consumer:
            self._consumer = consumer
            self._started.set()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._touch_held)
                nursery.start_soon(_end_with_parent)
                async for batch in consumer:
                    with self.held.lock:
                        self.held.waiting.append(_Taken(batch, batch.messages))
                    self._window = consumer.window
                nursery.cancel_scope.cancel()

    async def _touch_held(self) -> None:
        """TOUCH what is held, so a batch slower than msg_timeout is not redelivered."""
        while True:
            await trio.sleep(self._touch_interval())
            for taken in self.held.everything():
                taken.batch.touch(taken.messages)

    def _touch_interval(self) -> float:
        """A third of the shortest msg_timeout an nsqd granted (60 s: nsqd's default)."""
        granted = None if self._consumer is None else self._consumer.msg_timeout
        return max((granted or self.settings.config.msg_timeout or 60.0) / 3, 0.1)

    def take(self, limit: int | None) -> list[_Taken]:
        """Up to `limit` messages (None: all) waiting, in arrival order, and at most half
        the in-flight window: the next batch's messages arrive while this one waits for
        its commit (else every other batch would be the empty one that commits it)."""
        if self.error is not None:
            raise self.error
        taken: list[_Taken] = []
        room = limit
        window = self._window
        if window > 1:
            room = window // 2 if room is None else min(room, window // 2)
        with self.held.lock:
            waiting = self.held.waiting
            while waiting and (room is None or room > 0):
                first = waiting[0]
                if room is not None and len(first.messages) > room:
                    taken.append(_Taken(first.batch, first.messages[:room]))
                    first.messages = first.messages[room:]
                    break
                taken.append(waiting.popleft())
                if room is not None:
                    room -= len(taken[-1].messages)
        return taken

    def finish(self, taken: list[_Taken]) -> None:
        """FIN these messages (from Spark's thread)."""
        if self._token is None or not taken:
            return

        def fin() -> None:
            for entry in taken:
                entry.batch.finish(entry.messages)

        try:
            trio.from_thread.run_sync(fin, trio_token=self._token)
        except trio.RunFinishedError:
            log.warning("the consumer had stopped: %d messages come back from nsqd", len(taken))

    def close(self) -> None:
        """Stop: RDY 0, then everything not FIN'd is requeued at once. Safe twice, from
        any thread but the consumer's; waits STOP_TIMEOUT at most (the consumer's thread
        may wait for `held.lock`, which the caller's thread may hold)."""
        consumer, token = self._consumer, self._token
        if consumer is not None and token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(consumer.stop)
        self._thread.join(STOP_TIMEOUT)


@dataclass(frozen=True)
class MessagesPartition(InputPartition):
    """One micro-batch's messages, column by column, carried to the task that outputs
    them as one Arrow record batch (Spark takes it as is; tuples it would convert row by
    row: half the time of a large batch)."""

    ids: list[str]
    bodies: list[bytes]
    timestamps: list[int]  # microseconds since the epoch, as Spark keeps them
    attempts: list[int]
    topic: str
    nsqd_addresses: list[str]

    def __init__(self, topic: str, messages: list[tuple[Message, str]]) -> None:
        set_field = functools.partial(object.__setattr__, self)
        set_field("ids", [message_id(message) for message, _ in messages])
        set_field("bodies", [message.body for message, _ in messages])
        set_field("timestamps", [message.timestamp // 1000 for message, _ in messages])
        set_field("attempts", [message.attempts for message, _ in messages])
        set_field("topic", topic)
        set_field("nsqd_addresses", [nsqd for _, nsqd in messages])

    def record_batch(self) -> Any:
        import pyarrow as pa

        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.ids, pa.string()),
                pa.array(self.bodies, pa.binary()),
                pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                pa.array(self.attempts, pa.int32()),
                pa.array([self.topic] * len(self.ids), pa.string()),
                pa.array(self.nsqd_addresses, pa.string()),
            ],
            names=COLUMNS,
        )


class NsqStreamReader(DataSourceStreamReader):
    """Offsets are micro-batch numbers: {"batch": n}. Batch n's messages are held from
    latestOffset() until commit({"batch": n}) or later."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._live: LiveConsumer | None = None

    @property
    def live(self) -> LiveConsumer:
        """The consumer, started on first use: Spark also makes readers only to send
        their read() to the tasks (pickled without it), which must not consume."""
        if self._live is None:
            self._live = LiveConsumer(self.settings)
            _requeue_on_exit(self._live)
        return self._live

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "_live": None}

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.max_messages_per_trigger)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        number = start["batch"]
        rows_limit = None if isinstance(limit, ReadAllAvailable) else _max_rows(limit)
        taken = self.live.take(rows_limit)
        held = self.live.held
        if taken:
            with held.lock:
                held.batches[number + 1] = taken
            return {"batch": number + 1}
        with held.lock:
            last_is_held = number in held.batches
        # Nothing new: an empty batch, once, so that Spark commits the last one.
        return {"batch": number + 1} if last_is_held else start

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        held = self.live.held
        with held.lock:
            batches = [held.batches.get(n, []) for n in range(start["batch"] + 1, end["batch"] + 1)]
        messages = [
            (message, taken.batch.nsqd_address)
            for taken_list in batches
            for taken in taken_list
            for message in taken.messages
        ]
        return [MessagesPartition(self.settings.topic, messages)] if messages else []

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, MessagesPartition)
        return iter([partition.record_batch()])

    def commit(self, end: dict[str, int]) -> None:
        held = self.live.held
        with held.lock:
            done = [n for n in held.batches if n <= end["batch"]]
            taken = [entry for n in done for entry in held.batches.pop(n)]
        self.live.finish(taken)

    def stop(self) -> None:
        if self._live is not None:
            self._live.close()


def _max_rows(limit: ReadLimit) -> int | None:
    return limit.max_rows if isinstance(limit, ReadMaxRows) else None


def _requeue_on_exit(live: LiveConsumer) -> None:
    """Spark may end the reader's worker with SIGTERM and no stop(): requeue first, then
    die of it. The handler only starts the requeue, in a thread: in the main thread,
    which it interrupts, Spark's calls may hold `held.lock`, which the consumer's thread
    may be waiting for; so it returns at once, and a SIGTERM while the requeue goes on
    (STOP_TIMEOUT at most) is the same one again. Once it is done, the process is sent
    SIGTERM anew, which the previous handler (if any) and then the default take."""
    atexit.register(live.close)
    if threading.current_thread() is not threading.main_thread():
        return
    main_thread = threading.get_ident()
    previous = signal.getsignal(signal.SIGTERM)
    requeueing, requeued = threading.Event(), threading.Event()

    def requeue_then_end() -> None:
        _leave_sigterm_to_the_main_thread()
        live.close()
        requeued.set()
        # To the main thread, where Python runs the handler: a signal to the process
        # may go to another thread, and leave the main one asleep in Spark's call.
        signal.pthread_kill(main_thread, signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if requeued.is_set():
            if callable(previous):
                previous(signum, frame)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        elif not requeueing.is_set():
            requeueing.set()
            threading.Thread(target=requeue_then_end, name="nsq-source-stop").start()

    signal.signal(signal.SIGTERM, on_sigterm)
    _relay_sigterm_to(main_thread)


def _relay_sigterm_to(main_thread: int) -> None:
    """Wake the main thread for every SIGTERM the process takes. Our threads block it,
    but a library's thread (Arrow's, Spark's) may not: a SIGTERM it takes trips
    Python's handler without waking the main thread from Spark's read. Python writes
    each signal's number to its wakeup fd whichever thread took it; a thread of ours
    reads them and, for a SIGTERM, sends the main thread a signal whose handler does
    nothing: the read it sleeps in is interrupted, and Python runs the tripped SIGTERM
    handler there."""
    signal.signal(_NUDGE, _nothing)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def relay() -> None:
        _leave_sigterm_to_the_main_thread()
        while taken := os.read(read_end, 64):
            if signal.SIGTERM in taken:
                signal.pthread_kill(main_thread, _NUDGE)

    threading.Thread(target=relay, name="nsq-source-sigterm", daemon=True).start()


def _nothing(signum: int, frame: FrameType | None) -> None:
    """The nudge's handler: interrupting the main thread's call is all it is for."""


def _leave_sigterm_to_the_main_thread() -> None:
    """Block SIGTERM in the calling thread (and so in the threads it starts). The kernel
    gives a process's signal to any thread not blocking it, and Python runs the handler
    only in the main thread: taken by another, a SIGTERM leaves the main thread asleep
    in Spark's read of its next command, and the worker never requeues nor ends (a CI
    run saw a doubled SIGTERM so ignored). Taken by the main thread, it interrupts
    that read."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


async def _end_with_parent() -> None:
    """End the worker, as SIGTERM does, once its parent is gone (it has a new one): no
    stop() and no SIGTERM will come from a JVM that was killed."""
    parent = os.getppid()
    while os.getppid() == parent:
        await trio.sleep(PARENT_CHECK_INTERVAL)
    log.warning("the process that started this worker is gone: requeueing, then exiting")
    os.kill(os.getpid(), signal.SIGTERM)


# -- the data source --------------------------------------------------------------------


class NsqDataSource(DataSource):
    """format("nsq"): readStream (the source) and writeStream (the sink)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        if "startingOffsets" in self.options:  # the Youzan fork's offsets: fork_offsets.py
            from nsqtools.spark.fork_offsets import ForkOffsetReader, ForkSettings

            return ForkOffsetReader(ForkSettings.of(self.options))
        return NsqStreamReader(SourceSettings.of(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from nsqtools.spark.sink import NsqStreamWriter, SinkSettings  # it imports this

        return NsqStreamWriter(SinkSettings.of(self.options))
