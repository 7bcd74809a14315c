"""nsq_tail (also `nsq tail`): print the messages of one or more topics to stdout.

Drop-in for Go's nsq_tail: same flags, defaults and raw output. Beyond it: -n counts
across all topics and shows exactly N (anything received past N is requeued at once);
`nsq_tail ... | head` ends quietly with exit 0; --format json|TEMPLATE; JSON bodies
highlighted on a terminal; every message FIN'd only after its line was written;
--exit-at-end (read what the channel holds, then exit 0, as kcat -e); --peek (print -n
messages of a durable channel and give them all back, none FIN'd).
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    OUTPUT,
    GoFlagsCommand,
    fail,
    grouped_option,
    run,
    run_event_loop,
    version_option,
)
from nsqtools.commands.logs import configure_logging
from nsqtools.commands.options import (
    GoInt,
    connection_options,
    consumed_topics,
    consumer_addresses,
    dead_letter_options,
    exit_at_end_option,
    fork_consumer_options,
    logging_options,
    metrics_option,
    nsqd_and_lookupd_addresses,
)

if TYPE_CHECKING:
    from nsqtools.config import ClientConfig
    from nsqtools.protocol.youzan import StartPosition
    from nsqtools.runtime.deadletters import DeadLetterSettings
    from nsqtools.runtime.sinks import Delivery
    from nsqtools.runtime.stdio import StdoutWriter

TOOL = "nsq_tail"


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
    dead_letters: DeadLetterSettings
    partition: int | None = None  # the Youzan fork's
    start_at: StartPosition | None = None
    exit_at_end: bool = False
    peek: bool = False  # print, then give every message back (none FIN'd)
    metrics_address: str | None = None


def _settings(options: dict[str, Any]) -> TailSettings:
    from nsqtools.commands.options import build_config, dead_letter_settings, start_position
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    topics = list(options["topics"])
    if not topics:
        fail("--topic required")
    nsqd, lookupd = consumer_addresses(options)
    channel = options["channel"] or f"tail{random.randrange(999999):06d}#ephemeral"
    try:
        for topic in topics:
            check_topic(topic)
        check_channel(channel)
    except LocalProtocolError as error:
        fail(str(error))
    total = max(options["total"], 0)  # Go's: a negative -n is no limit, as 0 is
    if options["peek"]:
        _check_peek(total, channel)
    max_in_flight = options["max_in_flight"]
    if 0 < total < max_in_flight:
        max_in_flight = total  # don't ask for more messages than we want
    _check_format(options["output_format"])
    # A peek gives nothing up: a message past max_attempts would be FIN'd (kept).
    given_up = {"max_attempts": 0} if options["peek"] else {}
    start_at = start_position(options)
    if start_at is not None and nsqd and options["partition"] is None:
        fail("--start-at with --nsqd-tcp-address needs --partition")
    return TailSettings(
        topics=topics,
        channel=channel,
        total=total,
        print_topic=options["print_topic"],
        output_format=options["output_format"],
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        config=build_config(TOOL, options, max_in_flight=max_in_flight, **given_up),
        # NO_COLOR's convention: any non-empty value turns colors off.
        color=not (options["no_color"] or os.environ.get("NO_COLOR")),
        dead_letters=dead_letter_settings(options),
        partition=options["partition"],
        start_at=start_at,
        exit_at_end=options["exit_at_end"],
        peek=options["peek"],
        metrics_address=options["metrics_address"],
    )


def _check_peek(total: int, channel: str) -> None:
    if total < 1:
        fail("--peek needs -n N (N >= 1): how many messages to print and give back")
    if channel.endswith("#ephemeral"):
        fail(
            "--peek needs a durable --channel: an ephemeral channel is deleted when the "
            "last client leaves, with the messages given back"
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
@consumed_topics
@click.option("--channel", help="NSQ channel  [default: tail<6 random digits>#ephemeral]")
@click.option(
    "-n",
    "total",
    type=GoInt(),
    default=0,
    help="Total messages to show across all topics, then exit; waits if starved "
    "(0 or less: no limit).",
)
@click.option(
    "--max-in-flight",
    type=GoInt(),
    default=200,
    show_default=True,
    help="Max number of messages to allow in flight.",
)
@click.option("--print-topic", is_flag=True, help="Print the topic name before each message.")
@exit_at_end_option
@grouped_option(
    OUTPUT,
    "--peek",
    is_flag=True,
    help="Print -n messages and give them all back at once (REQ 0), none FIN'd: each "
    "one's attempts go up by one. Needs -n and a durable --channel.",
)
@grouped_option(
    OUTPUT,
    "--format",
    "output_format",
    default="raw",
    show_default=True,
    metavar="raw|json|TEMPLATE",
    shell_complete=completers.words("raw", "json"),
    help="raw bodies; json: one JSON envelope per line (id, timestamp, attempts, topic, "
    "channel, nsqd, body, encoding; on the Youzan fork also partition, trace_id, "
    "queue_offset); or a template such as '{ts} {topic} {body}' with fields id, ts, epoch, "
    "timestamp_ns, attempts, topic, channel, nsqd, body, partition, trace_id, queue_offset.",
)
@dead_letter_options()
@nsqd_and_lookupd_addresses(
    "nsqd TCP address (may be given multiple times).",
    "nsqlookupd HTTP address (may be given multiple times).",
)
@fork_consumer_options()
@connection_options("consumer-opt")
@logging_options(TOOL)
@metrics_option
@version_option(TOOL)
def command(**options: Any) -> None:
    """Consume topics and print each message to stdout."""
    settings = _settings(options)
    configure_logging(options["log_level"], options["log_prefix"])
    run_event_loop(tail, settings)


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
        # On a terminal the bodies are shown as text (control characters escaped), and
        # coloured unless colours are off.
        self.terminal = terminal and settings.output_format == "raw"

    def render(self, delivery: Delivery) -> bytes:
        """The lines for the delivery's messages."""
        from nsqtools import formats

        topic = delivery.topic
        if self.template is not None or self.settings.output_format == "json":
            origin = formats.Origin(topic, self.settings.channel, delivery.nsqd_address)
            if self.template is not None:
                return self.template.lines(delivery.messages, origin)
            return formats.json_lines(delivery.messages, origin)
        bodies = delivery.bodies
        prefix = f"{topic} | ".encode() if self.settings.print_topic else b""
        if self.terminal:
            from nsqtools.commands.highlight import highlighted_lines, printable_lines

            if self.settings.color:
                return highlighted_lines(bodies, prefix)
            return printable_lines(bodies, prefix)
        return formats.raw_lines(bodies, prefix)


async def tail(settings: TailSettings) -> None:
    import os

    from nsqtools.runtime.consuming import ConsumeSettings, RunCounters, run_consumers
    from nsqtools.runtime.metrics import run_families, serving_metrics
    from nsqtools.runtime.stdio import StdoutWriter, silence_stdout
    from nsqtools.runtime.stdout import StdoutSink

    renderer = _Renderer(settings, terminal=os.isatty(1))
    write = functools.partial(_write, StdoutWriter())
    sink = StdoutSink(renderer.render, write, hold=settings.peek)
    consume = ConsumeSettings(
        topics=settings.topics,
        channel=settings.channel,
        config=settings.config,
        nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
        lookupd_http_addresses=settings.lookupd_http_addresses,
        total=settings.total,
        partition=settings.partition,
        start_at=settings.start_at,
        dead_letters=settings.dead_letters,
        exit_at_end=settings.exit_at_end,
    )
    counters = RunCounters()
    metrics = functools.partial(run_families, counters, settings.channel, "written")
    summary = None
    async with serving_metrics(settings.metrics_address, metrics):
        try:
            summary = await run_consumers(consume, lambda topic: sink, counters=counters)
        finally:
            if settings.peek and (sink.held or summary is not None):  # before any error line
                _say_given_back(sink.held)
    if summary.sink_closed:
        silence_stdout()


def _say_given_back(count: int) -> None:
    """A peek's last word on stderr: what it gave back, and what that did."""
    import sys

    sys.stderr.write(
        f"{TOOL}: gave back {count} messages unfinished (requeued, none FIN'd); "
        "the attempts count of each went up by one\n"
    )


async def _write(writer: StdoutWriter, lines: bytes) -> None:
    """Write to stdout; a closed pipe closes the sink."""
    from nsqtools.runtime.sinks import SinkClosed
    from nsqtools.runtime.stdio import PipeClosed

    try:
        await writer.write(lines)
    except PipeClosed:
        raise SinkClosed from None


def main() -> None:
    run(command, TOOL)
