"""nsq_to_http (also `nsq to-http`): send a topic's messages to HTTP endpoints, FIN'd only
once an endpoint accepted them.

Drop-in for Go's nsq_to_http v1.3.0: the same flags, defaults, modes, request bytes
(User-Agent aside), success rules (GET: 200; POST: any 2xx) and status lines. Beyond it:
kept-alive connections without a thread per request; an unknown --mode is an error (Go
quietly sends every message to every address: ask for that by name, `all`); a 429 or
503 with Retry-After requeues the message for that long; a summary at exit; and
--batch-size for POSTing many messages as one newline-separated body.
"""

from __future__ import annotations

import functools
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
    check_relay_options,
    connection_options,
    consumer_addresses,
    dead_letter_options,
    dead_letter_settings,
    http_client_timeouts,
    logging_options,
    metrics_option,
    nsqd_and_lookupd_addresses,
    passthrough_config,
    relay_options,
)

if TYPE_CHECKING:
    from nsqtools.config import ClientConfig
    from nsqtools.relays.http import HttpCounts, HttpRelaySettings, Target
    from nsqtools.runtime.deadletters import DeadLetterSettings

TOOL = "nsq_to_http"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# nsqd's default --max-msg-timeout: however often TOUCHed, a message whose request runs
# longer is taken back by nsqd and delivered again (nsqtools.runtime.consuming).
NSQD_MAX_MSG_TIMEOUT = 900.0


@dataclass
class ToHttpSettings:
    topic: str
    channel: str
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    config: ClientConfig
    relay: HttpRelaySettings
    status_every: int
    dead_letters: DeadLetterSettings
    metrics_address: str | None = None


@click.command("to-http", cls=GoFlagsCommand, go_tool=TOOL, context_settings=CONTEXT_SETTINGS)
@click.option("--topic", default="", shell_complete=completers.topics, help="NSQ topic.")
@click.option("--channel", default="nsq_to_http", show_default=True, help="NSQ channel.")
@click.option(
    "--post",
    "post_addresses",
    multiple=True,
    metavar="URL",
    help="HTTP address to make a POST request to; data will be in the body (may be given "
    "multiple times).",
)
@click.option(
    "--get",
    "get_addresses",
    multiple=True,
    metavar="URL",
    help="HTTP address to make a GET request to; '%s' will be replaced with the data, "
    "query-escaped (may be given multiple times).",
)
@click.option(
    "--content-type",
    default=DEFAULT_CONTENT_TYPE,
    show_default=True,
    help="The Content-Type used for POST requests.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'KEY: VALUE'",
    help="Custom header for HTTP requests (may be given multiple times).",
)
@click.option(
    "-n",
    "senders",
    type=GoInt(),
    default=100,
    show_default=True,
    help="Number of concurrent publishers (requests at once).",
)
@click.option(
    "--sample",
    type=float,
    default=1.0,
    show_default=True,
    help="Fraction of messages to publish (0.0 to 1.0); the others are FIN'd unsent.",
)
@http_client_timeouts("20s")
@grouped_option(
    OUTPUT,
    "--batch-size",
    type=GoInt(min=1),
    default=1,
    show_default=True,
    help="With --post: up to this many messages in one request, each body followed by a "
    "newline (NDJSON when they are JSON), FIN'd together on success.",
)
@dead_letter_options()
@nsqd_and_lookupd_addresses(
    "nsqd TCP address (may be given multiple times).",
    "lookupd HTTP address (may be given multiple times).",
)
@relay_options("address")
@connection_options("consumer-opt")
@logging_options(TOOL)
@metrics_option
@version_option(TOOL)
def command(**options: Any) -> None:
    """Send the messages of a topic to HTTP endpoints (GET or POST)."""
    settings = _settings(options)
    configure_logging(options["log_level"], options["log_prefix"])
    _warn_past_max_msg_timeout(settings.relay.request_timeout)
    run_event_loop(to_http, settings)


def _settings(options: dict[str, Any]) -> ToHttpSettings:
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic
    from nsqtools.relays.http import HttpRelaySettings

    # First: Go refuses a bad --consumer-opt while parsing flags.
    max_in_flight = options["max_in_flight"]
    config = passthrough_config(TOOL, options, "consumer-opt", max_in_flight=max_in_flight)
    if not options["topic"] or not options["channel"]:
        fail("--topic and --channel are required")
    try:
        check_topic(options["topic"])
        check_channel(options["channel"])
    except LocalProtocolError as error:
        fail(str(error))
    _check_content_type(options)
    nsqd, lookupd = consumer_addresses(options)
    check_relay_options(options)
    if not 0.0 <= options["sample"] <= 1.0:
        fail("--sample must be between 0.0 and 1.0")
    if options["senders"] < 1:
        fail("-n must be at least 1")
    if options["batch_size"] > 1 and not options["post_addresses"]:
        fail("--batch-size is only used with --post")
    if options["http_client_connect_timeout"] <= 0 or options["http_client_request_timeout"] <= 0:
        fail("--http-client-connect-timeout and --http-client-request-timeout must be positive")
    relay = HttpRelaySettings(
        targets=_targets(options),
        mode=options["mode"],
        senders=options["senders"],
        sample=options["sample"],
        connect_timeout=options["http_client_connect_timeout"],
        request_timeout=options["http_client_request_timeout"],
        max_requeue_delay=config.max_requeue_delay,
        max_in_flight=options["max_in_flight"],
        batch_size=options["batch_size"],
    )
    return ToHttpSettings(
        topic=options["topic"],
        channel=options["channel"],
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        config=config,
        relay=relay,
        status_every=options["status_every"],
        dead_letters=dead_letter_settings(options),
        metrics_address=options["metrics_address"],
    )


def _warn_past_max_msg_timeout(request_timeout: float) -> None:
    """The messages of a running request are TOUCHed, up to nsqd's max_msg_timeout: a
    request allowed longer may see its message delivered again (a warning, not an error:
    an nsqd may allow more, and the run says so if it happens)."""
    if request_timeout > NSQD_MAX_MSG_TIMEOUT:
        import logging

        from nsqtools.durations import format_duration

        logging.getLogger("nsqtools.http").warning(
            "--http-client-request-timeout=%s is longer than nsqd's default "
            "--max-msg-timeout (%s): nsqd delivers again a message whose request runs longer",
            format_duration(request_timeout),
            format_duration(NSQD_MAX_MSG_TIMEOUT),
        )


def _check_content_type(options: dict[str, Any]) -> None:
    """Go's checks: a Content-Type other than the default needs --post and a value."""
    if options["content_type"] != DEFAULT_CONTENT_TYPE:
        if not options["post_addresses"]:
            fail("--content-type only used with --post")
        if not options["content_type"]:
            fail("--content-type requires a value when used")


def _targets(options: dict[str, Any]) -> list[Target]:
    from nsqtools.httpclient.requests import GetTarget, HttpOptionError, PostTarget, parse_headers

    posts, gets = options["post_addresses"], options["get_addresses"]
    if not posts and not gets:
        fail("--get or --post required")
    if posts and gets:
        fail("use --get or --post not both")
    try:
        headers = parse_headers(options["headers"])
        if posts:
            return [PostTarget(url, options["content_type"], headers) for url in posts]
        return [GetTarget(template, headers) for template in gets]
    except HttpOptionError as error:
        fail(str(error))


async def to_http(settings: ToHttpSettings) -> None:
    from nsqtools.commands.consoles import go_log
    from nsqtools.relays.http import HttpCounts, HttpRelay
    from nsqtools.relays.status import RelayStatus, sent_families
    from nsqtools.runtime.consuming import ConsumeSettings, RunCounters, run_consumers
    from nsqtools.runtime.metrics import run_families, serving_metrics

    consume = ConsumeSettings(
        topics=[settings.topic],
        channel=settings.channel,
        config=settings.config,
        nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
        lookupd_http_addresses=settings.lookupd_http_addresses,
        dead_letters=settings.dead_letters,
    )
    addresses = [target.address for target in settings.relay.targets]
    status = RelayStatus(settings.status_every, addresses, go_log)
    counts = HttpCounts()
    run = RunCounters()
    metrics = (
        functools.partial(run_families, run, settings.channel),
        functools.partial(sent_families, status, settings.channel),
    )
    async with serving_metrics(settings.metrics_address, *metrics):
        try:
            async with HttpRelay(settings.relay, status, counts) as relay:
                await run_consumers(consume, lambda topic: relay, counters=run)
        finally:
            go_log(summary(counts, sum(run.given_up.values())))


def summary(counts: HttpCounts, given_up: int) -> str:
    """The line at exit: what was sent, requeued, sampled out, given up (past
    max_attempts), and how long it took."""
    from nsqtools.relays.status import percentile

    ordered = sorted(counts.latencies)
    average = sum(ordered) / len(ordered) if ordered else 0.0
    times = " - ".join(
        f"{label}: {value * 1e3:.2f}ms"
        for label, value in (
            ("50th", percentile(50, ordered)),
            ("95th", percentile(95, ordered)),
            ("99th", percentile(99, ordered)),
            ("avg", average),
        )
    )
    return (
        f"[summary]: {counts.sent} sent, {counts.failed} requeued after a failed request, "
        f"{counts.sampled_out} sampled out, {given_up} given up - {times}"
    )


def main() -> None:
    run(command, TOOL)
