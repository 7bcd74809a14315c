"""nsq_tail (also `nsq tail`): print the messages of one or more topics to stdout.

Drop-in for Go's nsq_tail: same flags, defaults and raw output. Beyond it: -n counts
across all topics and shows exactly N (anything received past N is requeued at once);
`nsq_tail ... | head` ends quietly with exit 0; --format json|TEMPLATE; JSON bodies
highlighted on a terminal; every message FIN'd only after its line was written.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    OUTPUT,
    GoFlagsCommand,
    configure_logging,
    fail,
    grouped_option,
    run,
    stop_signals,
    tune_gc_for_throughput,
    version_option,
)
from nsqtools.commands.options import (
    GoInt,
    check_addresses,
    check_one_address_kind,
    connection_options,
    logging_options,
    nsqd_and_lookupd_addresses,
)

if TYPE_CHECKING:
    import trio

    from nsqtools.config import ClientConfig
    from nsqtools.consumer import Batch, Consumer

TOOL = "nsq_tail"
# After the first SIGINT/SIGTERM, how long a write to stdout may still take before it
# is abandoned and its messages requeued. Long enough for a reader that is merely slow
# to take the lines already received; short enough that `nsq_tail | sleep 30` stops
# when asked, before a user reaches for the second signal.
STOP_GRACE = 1.5


@dataclass
class TailSettings:
    topics: list[str]
    channel: str
    total: int  # 0: no limit
    print_topic: bool
    output_format: str  # "raw", "json", or a template
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    config: ClientConfig
    color: bool


def _settings(options: dict[str, Any]) -> TailSettings:
    from nsqtools.commands.options import build_config
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    topics = list(options["topics"])
    if not topics:
        fail("--topic required")
    nsqd, lookupd = list(options["nsqd_tcp_addresses"]), list(options["lookupd_http_addresses"])
    check_one_address_kind(nsqd, lookupd)
    check_addresses(nsqd, "--nsqd-tcp-address")
    check_addresses(lookupd, "--lookupd-http-address")
    channel = options["channel"] or f"tail{random.randrange(999999):06d}#ephemeral"
    try:
        for topic in topics:
            check_topic(topic)
        check_channel(channel)
    except LocalProtocolError as error:
        fail(str(error))
    total = options["total"]
    max_in_flight = options["max_in_flight"]
    if 0 < total < max_in_flight:
        max_in_flight = total  # don't ask for more messages than we want
    _check_format(options["output_format"])
    return TailSettings(
        topics=topics,
        channel=channel,
        total=total,
        print_topic=options["print_topic"],
        output_format=options["output_format"],
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        config=build_config(TOOL, options, max_in_flight=max_in_flight),
        # NO_COLOR's convention: any non-empty value turns colors off.
        color=not (options["no_color"] or os.environ.get("NO_COLOR")),
    )


def _check_format(output_format: str) -> None:
    if output_format in ("raw", "json"):
        return
    from nsqtools.formats import FormatError, Template

    try:
        Template(output_format)
    except FormatError as error:
        fail(f"--format: {error}")


@click.command("tail", cls=GoFlagsCommand, go_tool=TOOL, context_settings=CONTEXT_SETTINGS)
@click.option("--topic", "topics", multiple=True, help="NSQ topic (may be given multiple times).")
@click.option("--channel", help="NSQ channel  [default: tail<6 random digits>#ephemeral]")
@click.option(
    "-n",
    "total",
    type=GoInt(min=0),
    default=0,
    help="Total messages to show across all topics, then exit; waits if starved (0: no limit).",
)
@click.option(
    "--max-in-flight",
    type=GoInt(min=0),
    default=200,
    show_default=True,
    help="Max number of messages to allow in flight.",
)
@click.option("--print-topic", is_flag=True, help="Print the topic name before each message.")
@grouped_option(
    OUTPUT,
    "--format",
    "output_format",
    default="raw",
    show_default=True,
    metavar="raw|json|TEMPLATE",
    help="raw bodies; json: one JSON envelope per line (id, timestamp, attempts, topic, "
    "channel, nsqd, body, encoding); or a template such as '{ts} {topic} {body}' with "
    "fields id, ts, epoch, timestamp_ns, attempts, topic, channel, nsqd, body.",
)
@nsqd_and_lookupd_addresses(
    "nsqd TCP address (may be given multiple times).",
    "nsqlookupd HTTP address (may be given multiple times).",
)
@connection_options("consumer-opt")
@logging_options(TOOL)
@version_option(TOOL)
def command(**options: Any) -> None:
    """Consume topics and print each message to stdout."""
    settings = _settings(options)
    configure_logging(options["log_level"], options["log_prefix"])
    import trio

    tune_gc_for_throughput()
    trio.run(tail, settings)


class _Renderer:
    """Turns a batch into the bytes to write, in the chosen format."""

    def __init__(self, settings: TailSettings, terminal: bool) -> None:
        from nsqtools.formats import Template

        self.settings = settings
        self.template = (
            Template(settings.output_format)
            if settings.output_format not in ("raw", "json")
            else None
        )
        self.highlight = terminal and settings.color and settings.output_format == "raw"

    def render(self, batch: Batch, count: int, topic: str) -> bytes:
        """The lines for the first `count` messages of the batch."""
        from nsqtools import formats

        if self.template is not None or self.settings.output_format == "json":
            origin = formats.Origin(topic, self.settings.channel, batch.nsqd_address)
            messages = batch.messages[:count]
            if self.template is not None:
                return self.template.lines(messages, origin)
            return formats.json_lines(messages, origin)
        bodies = batch.bodies if count == len(batch) else batch.bodies[:count]
        prefix = f"{topic} | ".encode() if self.settings.print_topic else b""
        if self.highlight:
            from nsqtools.commands.highlight import highlighted_lines

            return highlighted_lines(bodies, prefix)
        return formats.raw_lines(bodies, prefix)


class _Budget:
    """-n across all topics: how many more messages may be shown."""

    def __init__(self, total: int) -> None:
        self.left = total if total > 0 else None

    def take(self, wanted: int) -> int:
        if self.left is None:
            return wanted
        granted = min(wanted, self.left)
        self.left -= granted
        return granted

    @property
    def spent(self) -> bool:
        return self.left == 0


async def tail(settings: TailSettings) -> None:
    import os

    import trio

    from nsqtools.commands.stdio import PipeClosed, StdoutWriter, silence_stdout
    from nsqtools.consumer import open_consumer

    writer = StdoutWriter()
    renderer = _Renderer(settings, terminal=os.isatty(1))
    budget = _Budget(settings.total)
    pipe_closed = False

    async def show(consumer: Consumer, consumers: list[Consumer]) -> None:
        nonlocal pipe_closed
        async for batch in consumer:
            shown = _within_budget(batch, budget)
            try:
                if shown:
                    await writer.write(renderer.render(batch, shown, consumer.topic))
            except PipeClosed:
                pipe_closed = True
                batch.requeue(delay=0, backoff=False)
                _stop_all(consumers)
                return
            batch.finish()  # the ones shown: any past -n went back already
            if budget.spent:
                _stop_all(consumers)

    async with AsyncExitStack() as stack:
        consumers = [
            await stack.enter_async_context(
                open_consumer(
                    topic,
                    settings.channel,
                    settings.config,
                    nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
                    lookupd_http_addresses=settings.lookupd_http_addresses,
                    limit=settings.total or None,
                )
            )
            for topic in settings.topics
        ]
        # Consumers close after this nursery, outside its cancelled scope, so their
        # connections are still alive to requeue what is left, including the batch
        # whose write a stop abandoned.
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as readers_scope:
                nursery.start_soon(_stop_on_signals, consumers, readers_scope)
                async with trio.open_nursery() as readers:
                    for consumer in consumers:
                        readers.start_soon(show, consumer, consumers)
            nursery.cancel_scope.cancel()
    if pipe_closed:
        silence_stdout()


def _within_budget(batch: Batch, budget: _Budget) -> int:
    """How many of the batch's messages are still within -n; the rest go back at once."""
    granted = budget.take(len(batch))
    if granted < len(batch):
        batch.requeue(batch.messages[granted:], delay=0, backoff=False)
    return granted


def _stop_all(consumers: Sequence[Consumer]) -> None:
    for consumer in consumers:
        consumer.stop()


async def _stop_on_signals(consumers: Sequence[Consumer], readers: trio.CancelScope) -> None:
    """First SIGINT/SIGTERM: stop cleanly (requeue, flush, exit 0), giving the readers
    STOP_GRACE to write what they hold before they are cancelled. Second: exit at once."""
    import os

    import trio

    with stop_signals() as signals:
        stopping = False
        async for signum in signals:
            if stopping:
                os._exit(128 + signum)
            stopping = True
            _stop_all(consumers)
            readers.deadline = trio.current_time() + STOP_GRACE


def main() -> None:
    run(command, TOOL)
