"""to_nsq (also `nsq pub`): publish records from stdin (or files) to every nsqd given.

Drop-in for Go's to_nsq: same flags; records split on a one-byte --delimiter, empty
ones skipped, each published to EVERY --nsqd-tcp-address (fan-out). Beyond it:
pipelined MPUB batches instead of one round trip per record; a last record without a
delimiter is kept whole; --defer (DPUB); input files as arguments; a progress line on
a terminal. Nothing read is silently dropped: while an nsqd restarts, reading stops and
its records wait (up to --reconnect-timeout); exit status 1 with a count when any
record was not acknowledged by every nsqd, and --failed-file keeps exactly those
records, so that feeding it back completes the job. A second SIGINT/SIGTERM exits at
once, still with the count (every record without an answer counts as failed).

On the Youzan fork: --partition names the partition of every PUB; through the fork's
nsqlookupd (--lookupd-http-address) records go to each partition's leader, in turn, or
by --shard-key (a record's field, or a template over its fields, hashed to a partition:
the order of one key's records holds); --trace-id publishes traced (PUB_TRACE).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    OUTPUT,
    YOUZAN,
    GoFlagsCommand,
    configure_logging,
    fail,
    grouped_option,
    run,
    run_event_loop,
    version_option,
)
from nsqtools.commands.options import (
    DURATION,
    GoInt,
    check_addresses,
    connection_options,
    logging_options,
    nsqd_addresses,
    partition_option,
)

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable, Sequence

    import trio

    from nsqtools.config import ClientConfig
    from nsqtools.partitions import Partitions
    from nsqtools.producer import Producer, PublishOutcome
    from nsqtools.records import RecordKey

TOOL = "to_nsq"
# Records by the Youzan fork's partition (None: the one nsqd leads), with trace ids.
_ByPartition = dict[int | None, tuple[list[bytes], list[int] | None]]
PROGRESS_INTERVAL = 0.5


@click.command("pub", cls=GoFlagsCommand, go_tool=TOOL, context_settings=CONTEXT_SETTINGS)
@click.argument(
    "files",
    nargs=-1,
    type=click.Path(exists=True, dir_okay=False, readable=True, allow_dash=True, path_type=Path),
)
@click.option("--topic", help="NSQ topic to publish to.")
@nsqd_addresses("Destination nsqd TCP address (may be given multiple times).")
@click.option(
    "--delimiter",
    default="\n",
    show_default=repr("\n"),
    help="Character to split input on: one byte, or an escape such as \\t or \\0.",
)
@click.option(
    "--rate",
    type=GoInt(min=0),
    default=0,
    show_default=True,
    help="Throttle messages to n/second. 0 to disable.",
)
@grouped_option(
    OUTPUT, "--defer", type=DURATION, help="Deliver each message after this delay (DPUB), e.g. 30s."
)
@grouped_option(
    OUTPUT,
    "--failed-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write every record not acknowledged by every nsqd here, delimited as read, so "
    "that `to_nsq ... < FILE` completes the job (emptied at start).",
)
@grouped_option(
    OUTPUT,
    "--reconnect-timeout",
    type=DURATION,
    default="2m",
    show_default=True,
    help="While an nsqd that was reachable is down, stop reading, keep its records and "
    "redial it for this long before counting them failed.",
)
@grouped_option(
    YOUZAN,
    "--lookupd-http-address",
    "lookupd_http_addresses",
    multiple=True,
    metavar="HOST:PORT",
    help="Publish through the Youzan fork's nsqlookupd, to each partition's leader "
    "(instead of --nsqd-tcp-address; may be given multiple times).",
)
@partition_option("Publish to this partition")
@grouped_option(
    YOUZAN,
    "--shard-key",
    metavar="FIELD|TEMPLATE",
    help="Hash each JSON record's FIELD, or a template such as '{user}-{region}', to its "
    "partition (CRC-32 modulo the partition count): one key's records keep their order. "
    "Needs --lookupd-http-address.",
)
@grouped_option(
    YOUZAN,
    "--trace-id",
    metavar="ID|FIELD|TEMPLATE",
    help="Publish traced (PUB_TRACE/MPUB_TRACE) with this trace id, a number or taken "
    "from each JSON record (an unsigned 64-bit number).",
)
@connection_options("producer-opt")
@logging_options(TOOL)
@version_option(TOOL, go_has_it=False)
def command(files: tuple[Path, ...], **options: Any) -> None:
    """Publish records read from stdin, or from FILES ("-" is stdin), to a topic."""
    from nsqtools.commands.options import build_config
    from nsqtools.protocol import LocalProtocolError, check_topic
    from nsqtools.records import DelimiterError, parse_delimiter

    topic = options["topic"]
    if not topic:
        fail("--topic required")
    addresses = list(options["nsqd_tcp_addresses"])
    lookupds = list(options["lookupd_http_addresses"])
    if not addresses and not lookupds:
        fail("--nsqd-tcp-address required")
    if addresses and lookupds:
        fail("use --nsqd-tcp-address or --lookupd-http-address, not both")
    check_addresses(addresses, "--nsqd-tcp-address")
    check_addresses(lookupds, "--lookupd-http-address")
    _check_fork_options(options)
    try:
        check_topic(topic)
        delimiter = parse_delimiter(options["delimiter"])
    except (LocalProtocolError, DelimiterError) as error:
        fail(str(error))
    sources = files or (Path("-"),)
    config = build_config(TOOL, options)
    configure_logging(options["log_level"], options["log_prefix"])
    failed_file = _open_failed_file(options["failed_file"], sources, delimiter)
    run_ = _Run(topic, delimiter, failed_file, options)
    run_event_loop(run_.publish, sources, addresses, config)


def _check_fork_options(options: dict[str, Any]) -> None:
    from nsqtools.records import RecordKey, RecordKeyError

    fork = [name for name in ("partition", "shard_key", "trace_id") if options[name] is not None]
    if fork and options["defer"] is not None:
        fail(f"--{fork[0].replace('_', '-')} cannot be used with --defer")
    if options["shard_key"] is not None:
        if options["partition"] is not None:
            fail("use --shard-key or --partition, not both")
        if not options["lookupd_http_addresses"]:
            fail("--shard-key needs --lookupd-http-address (to know the partitions)")
    for name in ("shard_key", "trace_id"):
        if options[name] is not None:
            try:
                RecordKey(options[name])
            except RecordKeyError as error:
                fail(f"--{name.replace('_', '-')}: {error}")


class _FailedFile:
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
        import os

        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def _open_failed_file(
    path: Path | None, sources: Sequence[Path], delimiter: bytes
) -> _FailedFile | None:
    """The failed file, emptied; never one of the inputs, which emptying would destroy."""
    import os

    if path is None:
        return None
    if path.exists():
        for source in sources:
            status = os.fstat(0) if str(source) == "-" else os.stat(source)
            if os.path.samestat(status, os.stat(path)):
                fail(f"--failed-file {path} is also an input: write it elsewhere")
    try:
        return _FailedFile(path, delimiter)
    except OSError as error:
        fail(f"cannot write --failed-file {path}: {error.strerror}")


class _Run:
    """One to_nsq run: reading, publishing, signals, and what is reported at the end."""

    def __init__(
        self,
        topic: str,
        delimiter: bytes,
        failed_file: _FailedFile | None,
        options: dict[str, Any],
    ) -> None:
        self.topic = topic
        self.delimiter = delimiter
        self.failed_file = failed_file
        self.rate: int = options["rate"]
        self.delay: float | None = options["defer"]
        self.reconnect_timeout: float = options["reconnect_timeout"]
        self.lookupds: list[str] = list(options["lookupd_http_addresses"])
        self.partition: int | None = options["partition"]
        self.shard_key = _record_key(options["shard_key"])
        self.trace_id = _record_key(options["trace_id"])
        self.partitions: Partitions | None = None
        self.unkeyed: Counter[str] = _counter()  # records without a shard key or trace id
        self.held: list[bytes] = []  # read, not yet given to the producer (--rate)
        self.unsent = 0  # held records given up on a second signal
        self.producer: Producer | None = None

    async def publish(
        self, sources: tuple[Path, ...], addresses: list[str], config: ClientConfig
    ) -> None:

        from contextlib import AsyncExitStack

        from nsqtools.partitions import Partitions
        from nsqtools.producer import Producer

        on_outcome = self._record_failures if self.failed_file is not None else None
        async with AsyncExitStack() as stack:
            if self.lookupds:
                self.partitions = await stack.enter_async_context(Partitions(self.lookupds, config))
                await self.partitions.refresh(self.topic)
            producer = Producer(
                addresses,
                config,
                mode="all",
                reconnect_timeout=self.reconnect_timeout,
                on_outcome=on_outcome,
                partitions=self.partitions,
            )
            self.producer = producer
            await stack.enter_async_context(producer)
            await self._publish_all(sources, producer)
        self._finish()

    async def _publish_all(self, sources: tuple[Path, ...], producer: Producer) -> None:
        import sys

        import trio

        from nsqtools.runtime.signals import watch_signals

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
            if sys.stderr.isatty():
                nursery.start_soon(_show_progress, producer)
            with reading:
                for source in sources:
                    await self._publish_source(source)
            await self._give(len(self.held))  # what --rate held back when reading stopped
            await producer.flush()
            nursery.cancel_scope.cancel()

    async def _publish_source(self, source: Path) -> None:
        import os

        import trio

        from nsqtools import flow
        from nsqtools.commands.stdio import read_chunks
        from nsqtools.records import split_records

        fd = 0 if str(source) == "-" else os.open(source, os.O_RDONLY)
        bucket = flow.TokenBucket(self.rate, trio.current_time()) if self.rate else None
        try:
            async for records in split_records(read_chunks(fd), self.delimiter):
                self.held = records
                while bucket is not None and self.held:
                    await self._give(bucket.take(len(self.held), trio.current_time()))
                    if self.held:
                        await trio.sleep(bucket.wait_time(trio.current_time()))
                await self._give(len(self.held))
        finally:
            if fd != 0:
                os.close(fd)

    async def _give(self, count: int) -> None:
        """Queue the first `count` records held. Each leaves `held` as it is queued
        (put_many queues up to PUT_MANY_CHUNK records before it may wait), so that a
        second signal meanwhile counts every record once."""
        from nsqtools.producer import PUT_MANY_CHUNK

        while count > 0:
            piece = min(count, PUT_MANY_CHUNK)
            records, self.held = self.held[:piece], self.held[piece:]
            count -= piece
            await self._put(records)

    async def _put(self, records: list[bytes]) -> None:
        """Queue records read; a signal stops the reading, never the queueing of what was read."""
        import trio

        assert self.producer is not None
        with trio.CancelScope(shield=True):
            if self.shard_key is None and self.trace_id is None:
                await self.producer.put_many(
                    self.topic, records, self.delay, partition=self.partition
                )
                return
            for partition, (bodies, trace_ids) in self._keyed(records).items():
                await self.producer.put_many(
                    self.topic, bodies, partition=partition, trace_ids=trace_ids
                )

    def _keyed(
        self, records: list[bytes]
    ) -> dict[int | None, tuple[list[bytes], list[int] | None]]:
        """The records by partition (in their order within each), with their trace ids.
        A record without its key fails here: written to the failed file, counted."""
        from nsqtools.records import RecordKeyError

        groups: _ByPartition = {}
        unkeyed: list[bytes] = []
        for record in records:
            try:
                partition = self._partition_of(record)
                trace_id = None if self.trace_id is None else _trace_id(self.trace_id.of(record))
            except RecordKeyError as error:
                self.unkeyed[f"no --shard-key or --trace-id: {error}"] += 1
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
        if self.shard_key is None:
            return self.partition
        assert self.partitions is not None  # --shard-key needs --lookupd-http-address
        return self.partitions.for_key(self.topic, self.shard_key.of(record).encode())

    def _record_failures(self, outcome: PublishOutcome) -> None:
        if outcome.error is not None and self.failed_file is not None:
            self.failed_file.write(outcome.bodies)

    def _stop_reading(self, reading: trio.CancelScope) -> Callable[[], None]:
        def stop() -> None:
            reading.cancel()
            self._say_stopping()

        return stop

    def _say_stopping(self) -> None:
        import logging

        assert self.producer is not None
        waiting = self.producer.pending + len(self.held)
        logging.getLogger("nsqtools").info(
            "stopping: reading no more; %s records wait for an answer "
            "(a second signal exits at once, counting them failed)",
            f"{waiting:,}",
        )

    def _abandon(self) -> None:
        """Count (and keep in the failed file) every record without an answer yet."""
        import sys

        assert self.producer is not None
        self.producer.abandon("interrupted before every nsqd acknowledged")
        if self.held:
            self.unsent = len(self.held)
            if self.failed_file is not None:
                self.failed_file.write(self.held)
        if self.failed_file is not None:
            self.failed_file.close()
        problem = self._problem()
        if problem is not None:
            sys.stderr.write(f"{TOOL}: error: {problem}\n")
            sys.stderr.flush()

    def _finish(self) -> None:
        """Make the failed file durable; exit 1 with a count if any record failed."""
        if self.failed_file is not None:
            self.failed_file.close()
        problem = self._problem()
        if problem is not None:
            fail(problem)

    def _problem(self) -> str | None:
        """How many records failed and the commonest reason; None when none did."""
        from collections import Counter

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


def _record_key(spec: str | None) -> RecordKey | None:
    from nsqtools.records import RecordKey

    return None if spec is None else RecordKey(spec)


def _trace_id(text: str) -> int:
    from nsqtools.records import RecordKeyError

    if not text.isdigit() or int(text) >= 2**64:
        raise RecordKeyError(f"trace id {text[:40]!r} is not an unsigned 64-bit number")
    return int(text)


def _counter() -> Counter[str]:
    from collections import Counter

    return Counter()


def unpublished(failed: int, total: int, reasons: Counter[str], what: str = "records") -> str:
    """'N of M records were not published to every nsqd' and the commonest reason (to_nsq's
    error line, and nsq archive replay's)."""
    reason, count = reasons.most_common(1)[0]
    more = f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else ""
    return (
        f"{failed:,} of {total:,} {what} were not published to every nsqd: "
        f"{reason} ({count:,}){more}"
    )


async def _show_progress(producer: Producer) -> None:
    """A progress line on stderr (a terminal): published, rate, failed."""
    import sys

    import trio

    last_count, last_time = 0, trio.current_time()
    try:
        while True:
            await trio.sleep(PROGRESS_INTERVAL)
            now, count = trio.current_time(), producer.acknowledged
            rate = (count - last_count) / (now - last_time)
            sys.stderr.write(
                f"\r\x1b[K{count:,} published, {rate:,.0f}/s, {producer.failed:,} failed"
            )
            sys.stderr.flush()
            last_count, last_time = count, now
    finally:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def main() -> None:
    run(command, TOOL)
