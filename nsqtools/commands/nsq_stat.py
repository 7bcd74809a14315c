"""nsq_stat (also `nsq stat`): a topic's channel, or the topic and all its channels,
polled across the cluster every interval.

Drop-in for Go's nsq_stat: same flags, checks and, piped or with --format plain, the
same output byte for byte (nsqtools.stats.text). Beyond it: without --channel, the
topic and every channel; a missing topic or channel is polled again, not fatal (with
--count, until it has been missing from as many polls as the run takes: exit 1); an
nsqd that fails is said on stderr and polled again; rates over the measured interval;
--format json (one object per poll); --format prometheus (each poll's counters per
nsqd, topic and channel in Prometheus's text format, stats.prometheus: of every topic
when no --topic is given, as a scrape wants them all); on a terminal, a live table
(statview.py) with each nsqd's rows, the rates' history, paused state and e2e latency.

Blocking, for a start within Go's: the polls run on threads (httpapi.blocking), the
beat on the monotonic clock, signals end the run (runtime.signals.run_until_stopped);
neither trio nor httpx is imported.
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import click

from nsqtools import __version__
from nsqtools.commands import completers
from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    OUTPUT,
    GoFlagsCommand,
    fail,
    grouped_option,
    run,
    version_option,
)
from nsqtools.commands.logs import configure_logging
from nsqtools.commands.options import (
    DURATION,
    check_addresses,
    http_client_timeouts,
    logging_options,
    nsqd_http_and_lookupd_addresses,
)

if TYPE_CHECKING:
    from nsqtools.cluster import Cluster
    from nsqtools.httpapi.blocking import BlockingClient
    from nsqtools.stats.polling import Poller
    from nsqtools.stats.tracking import Report

TOOL = "nsq_stat"
FORMATS = ("auto", "table", "plain", "json", "prometheus")

log = logging.getLogger("nsqtools.stat")

_GO_INT32 = range(-(2**31), 2**31)


class GoCount(click.ParamType[int]):
    """-count as Go's nsq_stat reads it: strconv.ParseInt(s, 10, 32)."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        if not re.fullmatch(r"[+-]?[0-9]+", value) or int(value) not in _GO_INT32:
            self.fail(f"{value!r} is not a 32-bit decimal integer", param, ctx)
        return int(value)


@dataclass(frozen=True)
class StatSettings:
    topic: str  # "": every topic (--format prometheus only)
    channel: str | None  # None: the topic and every channel
    interval: float
    count: int | None  # polls with rows to print; None: until a signal
    cluster: Cluster
    connect_timeout: float
    request_timeout: float
    output_format: str  # "table", "plain" or "json"
    color: bool


@click.command("stat", cls=GoFlagsCommand, go_tool=TOOL, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--topic",
    shell_complete=completers.topics,
    help="NSQ topic  [with --format prometheus, default: every topic]",
)
@click.option("--channel", help="NSQ channel  [default: the topic and every channel]")
@click.option(
    "--interval",
    type=DURATION,
    default="2s",
    show_default=True,
    help="Duration of time between polling/printing output.",
)
@click.option("--count", type=GoCount(), help="Number of reports  [default: until stopped]")
@nsqd_http_and_lookupd_addresses(
    "nsqd HTTP address (may be given multiple times).",
    "lookupd HTTP address (may be given multiple times).",
)
@http_client_timeouts("5s")
@grouped_option(
    OUTPUT,
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="table: a live table, each nsqd's rows, the rates' history; plain: Go's rows; "
    "json: one JSON object per poll; prometheus: each poll's counters per nsqd, topic and "
    "channel in Prometheus's text format (--count 1: one, for a scrape) (auto: table on a "
    "terminal, else plain).",
)
@logging_options(TOOL)
@version_option(TOOL)
def command(**options: Any) -> None:
    """Poll a topic's channel (or all its channels) across the cluster and print its
    depths and rates every interval."""
    settings = _settings(options)
    configure_logging(options["log_level"], options["log_prefix"])
    stat(settings)


def _settings(options: dict[str, Any]) -> StatSettings:
    """Go's checks, in Go's order, with Go's messages; then ours (names, addresses)."""
    from nsqtools.cluster import Cluster
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    if not options["topic"] and options["output_format"] != "prometheus":
        fail("--topic is required")
    if options["interval"] <= 0:
        fail("--interval should be positive")
    if options["http_client_connect_timeout"] <= 0:
        fail("--http-client-connect-timeout should be positive")
    if options["http_client_request_timeout"] <= 0:
        fail("--http-client-request-timeout should be positive")
    if options["count"] is not None and options["count"] <= 0:
        fail("--count should be positive")
    nsqd, lookupd = options["nsqd_http_addresses"], options["lookupd_http_addresses"]
    _check_addresses(nsqd, lookupd)
    try:
        if options["topic"]:
            check_topic(options["topic"])
        if options["channel"]:
            check_channel(options["channel"])
    except LocalProtocolError as error:
        fail(str(error))
    output_format = options["output_format"]
    if output_format == "auto":
        output_format = "table" if os.isatty(1) else "plain"
    return StatSettings(
        topic=options["topic"] or "",
        channel=options["channel"] or None,
        interval=options["interval"],
        count=options["count"],
        cluster=Cluster(tuple(nsqd), tuple(lookupd)),
        connect_timeout=options["http_client_connect_timeout"],
        request_timeout=options["http_client_request_timeout"],
        output_format=output_format,
        color=not (options["no_color"] or os.environ.get("NO_COLOR")),
    )


def _check_addresses(nsqd: tuple[str, ...], lookupd: tuple[str, ...]) -> None:
    if not nsqd and not lookupd:
        fail("--nsqd-http-address or --lookupd-http-address required")
    if nsqd and lookupd:
        fail("use --nsqd-http-address or --lookupd-http-address not both")
    for option, addresses in (("--nsqd-http-address", nsqd), ("--lookupd-http-address", lookupd)):
        if any(address.startswith("http") for address in addresses):
            fail(f"{option} error - address should not contain scheme")
        check_addresses(addresses, option)


class Output(Protocol):
    """Where each poll's report goes; False from show() ends the run (a closed pipe)."""

    def show(self, report: Report) -> bool: ...


class TextOutput:
    """Go's layout or JSON lines on stdout, each poll in one write; on stderr, a line
    for what the rows cannot say (a failed nsqd, a missing channel), when it changes."""

    def __init__(self, settings: StatSettings) -> None:
        self.json = settings.output_format == "json"
        self.previous: Report | None = None

    def show(self, report: Report) -> bool:
        from nsqtools.runtime.stdio import PipeClosed, write_all
        from nsqtools.stats import text

        for notice in text.notices(self.previous, report):
            log.warning("%s", notice)
        self.previous = report
        if self.json:  # the first poll only sets the baseline: no rates yet, no line
            lines = text.json_line(report) if report.poll > 0 else ""
        else:
            lines = text.plain_lines(report)
        try:
            if lines:
                write_all(1, lines.encode())
        except PipeClosed:
            return False
        return True


def stat(settings: StatSettings) -> None:
    from nsqtools.httpapi.blocking import BlockingClient
    from nsqtools.runtime.signals import run_until_stopped
    from nsqtools.runtime.stdio import silence_stdout
    from nsqtools.stats.polling import Poller, RowCount, beats
    from nsqtools.stats.tracking import Tracker

    agent = {"User-Agent": f"{TOOL}/{__version__} nsqtools/{__version__}"}
    client = BlockingClient(settings.connect_timeout, settings.request_timeout, agent)
    poller = Poller(settings.cluster, settings.topic, settings.channel)
    if settings.output_format == "prometheus":
        run_until_stopped(lambda: _print_expositions(settings, client, poller), hangup_stops=True)
        return
    tracker = Tracker(settings.topic, settings.channel)
    rows = RowCount(settings.count) if settings.count is not None else None

    def poll_and_show() -> None:
        with _output(settings) as output:
            for _ in beats(settings.interval):
                poll = client.run(poller.poll())
                report = tracker.update(
                    poll.nodes, poll.asked_at, poll.wall_time, poll.lookupd_failures
                )
                if not output.show(report):
                    silence_stdout()
                    break
                if rows is not None and rows.counted(report):
                    break

    run_until_stopped(poll_and_show, hangup_stops=True)  # Go: SIGHUP stops too


def _print_expositions(settings: StatSettings, client: BlockingClient, poller: Poller) -> None:
    """--format prometheus: each poll's counters as one exposition on stdout, --count of
    them (each poll counts: nothing is a baseline); what failed on stderr, when it
    changes."""
    from nsqtools.runtime.stdio import PipeClosed, silence_stdout, write_all
    from nsqtools.stats.polling import beats
    from nsqtools.stats.prometheus import poll_exposition

    told: set[str] = set()
    for polled in beats(settings.interval):
        poll = client.run(poller.poll())
        failures = [
            f"{failure.server} {failure.address}: {failure.reason}"
            for failure in poll.lookupd_failures
        ]
        failures += [
            f"nsqd {node.address}: {node.error.reason}"
            for node in poll.nodes
            if node.error is not None
        ]
        for line in set(failures) - told:
            log.warning("%s", line)
        told = set(failures)
        try:
            write_all(1, poll_exposition(poll, settings.topic, settings.channel).encode())
        except PipeClosed:
            silence_stdout()
            return
        if settings.count is not None and polled + 1 >= settings.count:
            return


def _output(settings: StatSettings) -> AbstractContextManager[Output]:
    """The Output for the settings' format, for the run."""
    if settings.output_format == "table":
        from nsqtools.commands.statview import live_table

        return live_table(settings.topic, settings.interval, settings.color)
    return nullcontext(TextOutput(settings))


def main() -> None:
    run(command, TOOL)
