"""to_nsq (also `nsq pub`): publish records from stdin (or files) to every nsqd given.

Drop-in for Go's to_nsq: same flags; records split on a one-byte --delimiter, empty
ones skipped, each published to EVERY --nsqd-tcp-address (fan-out). Beyond it:
pipelined MPUB batches instead of one round trip per record; a last record without a
delimiter is kept whole; --defer (DPUB); input files as arguments; a progress line on
a terminal; exit status 1 with a count when any record was not acknowledged by every
nsqd, so nothing read is silently dropped.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    GoFlagsCommand,
    configure_logging,
    fail,
    run,
    tune_gc_for_throughput,
    version_option,
)
from nsqtools.commands.options import (
    DURATION,
    check_addresses,
    connection_options,
    logging_options,
    nsqd_addresses,
)

if TYPE_CHECKING:
    from nsqtools.config import ClientConfig
    from nsqtools.producer import Producer

TOOL = "to_nsq"
PROGRESS_INTERVAL = 0.5


@click.command("pub", cls=GoFlagsCommand, context_settings=CONTEXT_SETTINGS)
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
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Throttle messages to n/second. 0 to disable.",
)
@click.option(
    "--defer", type=DURATION, help="Deliver each message after this delay (DPUB), e.g. 30s."
)
@connection_options("producer-opt")
@logging_options(TOOL)
@version_option(TOOL)
def command(files: tuple[Path, ...], **options: Any) -> None:
    """Publish records read from stdin, or from FILES ("-" is stdin), to a topic."""
    from nsqtools.commands.options import build_config
    from nsqtools.protocol import LocalProtocolError, check_topic
    from nsqtools.records import DelimiterError, parse_delimiter

    topic = options["topic"]
    if not topic:
        raise click.UsageError("--topic required")
    addresses = list(options["nsqd_tcp_addresses"])
    if not addresses:
        raise click.UsageError("--nsqd-tcp-address required")
    check_addresses(addresses, "--nsqd-tcp-address")
    try:
        check_topic(topic)
        delimiter = parse_delimiter(options["delimiter"])
    except (LocalProtocolError, DelimiterError) as error:
        raise click.UsageError(str(error)) from None
    config = build_config(TOOL, options)
    configure_logging(options["log_level"], options["log_prefix"])
    import trio

    tune_gc_for_throughput()
    trio.run(publish, files or (Path("-"),), topic, addresses, config, delimiter, options)


async def publish(
    sources: tuple[Path, ...],
    topic: str,
    addresses: list[str],
    config: ClientConfig,
    delimiter: bytes,
    options: dict[str, Any],
) -> None:
    import sys

    import trio

    from nsqtools.producer import Producer

    async with Producer(addresses, config, mode="all") as producer, trio.open_nursery() as nursery:
        reading = trio.CancelScope()
        nursery.start_soon(_stop_reading_on_signals, reading)
        if sys.stderr.isatty():
            nursery.start_soon(_show_progress, producer)
        with reading:
            for source in sources:
                await _publish_source(producer, source, topic, delimiter, options)
        await producer.flush()
        nursery.cancel_scope.cancel()
    _report(producer)


async def _publish_source(
    producer: Producer, source: Path, topic: str, delimiter: bytes, options: dict[str, Any]
) -> None:
    import os

    import trio

    from nsqtools import flow
    from nsqtools.commands.stdio import read_chunks
    from nsqtools.records import split_records

    fd = 0 if str(source) == "-" else os.open(source, os.O_RDONLY)
    delay = options["defer"]
    bucket = flow.TokenBucket(options["rate"], trio.current_time()) if options["rate"] else None
    try:
        async for records in split_records(read_chunks(fd), delimiter):
            while bucket is not None and records:
                granted = bucket.take(len(records), trio.current_time())
                await _put(producer, topic, records[:granted], delay)
                records = records[granted:]
                if records:
                    await trio.sleep(bucket.wait_time(trio.current_time()))
            await _put(producer, topic, records, delay)
    finally:
        if fd != 0:
            os.close(fd)


async def _put(producer: Producer, topic: str, records: list[bytes], delay: float | None) -> None:
    """Queue records read; a signal stops the reading, never the queueing of what was read."""
    import trio

    with trio.CancelScope(shield=True):
        await producer.put_many(topic, records, delay)


async def _stop_reading_on_signals(reading: Any) -> None:
    """First SIGINT/SIGTERM: read no more, publish what was read, exit. Second: at once."""
    import os

    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if reading.cancel_called:
                os._exit(128 + signum)
            reading.cancel()


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


def _report(producer: Producer) -> None:
    """Exit 1 with a count when any record was not acknowledged by every nsqd."""
    if not producer.failed:
        return
    total = producer.acknowledged + producer.failed
    reason, count = max(producer.failure_reasons.items(), key=lambda item: item[1])
    others = len(producer.failure_reasons) - 1
    more = f" (and {others} other reasons)" if others else ""
    fail(
        f"{producer.failed:,} of {total:,} records were not published to every nsqd: "
        f"{reason} ({count:,}){more}"
    )


def main() -> None:
    run(command, TOOL)
