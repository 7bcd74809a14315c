"""nsq_to_nsq (also `nsq to-nsq`): relay topics to other nsqds, FIN'd only once accepted.

Drop-in for Go's nsq_to_nsq v1.3.0: the same flags, defaults, modes, JSON filters (Go's
exact semantics, nsqtools.jsonfilter) and status lines. Beyond it: MPUB batches with
many in flight instead of one PUB per message; an unknown --mode is an error (Go quietly
uses round-robin), and `all` publishes every message to every destination; a bad
--consumer-opt or --producer-opt is one clear line; status lines end with a rate.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    GoFlagsCommand,
    fail,
    run,
    run_event_loop,
    version_option,
)
from nsqtools.commands.logs import configure_logging
from nsqtools.commands.options import (
    check_addresses,
    check_relay_options,
    connection_options,
    consumed_topics,
    consumer_addresses,
    dead_letter_options,
    dead_letter_settings,
    logging_options,
    metrics_option,
    nsqd_and_lookupd_addresses,
    passthrough_config,
    relay_options,
)

if TYPE_CHECKING:
    from nsqtools.config import ClientConfig
    from nsqtools.jsonfilter import JsonFilter
    from nsqtools.runtime.deadletters import DeadLetterSettings

TOOL = "nsq_to_nsq"


@dataclass
class RelaySettings:
    topics: list[str]
    channel: str
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    consumer_config: ClientConfig
    destinations: list[str]
    destination_topic: str | None  # None: each message's own topic
    producer_config: ClientConfig
    mode: str
    json_filter: JsonFilter
    status_every: int
    dead_letters: DeadLetterSettings
    metrics_address: str | None = None


@click.command("to-nsq", cls=GoFlagsCommand, go_tool=TOOL, context_settings=CONTEXT_SETTINGS)
@consumed_topics
@click.option("--channel", default="nsq_to_nsq", show_default=True, help="NSQ channel.")
@click.option(
    "--destination-nsqd-tcp-address",
    "destinations",
    multiple=True,
    metavar="HOST:PORT",
    help="Destination nsqd TCP address (may be given multiple times).",
)
@click.option(
    "--destination-topic",
    default="",
    help="Use this destination topic for all consumed topics (default: the consumed topic).",
)
@click.option(
    "--require-json-field",
    default="",
    help="For JSON messages: only pass messages that contain this field.",
)
@click.option(
    "--require-json-value",
    default="",
    help="For JSON messages: only pass messages in which the required field has this value.",
)
@click.option(
    "--whitelist-json-field",
    "whitelist_json_fields",
    multiple=True,
    help="For JSON messages: pass this field (may be given multiple times).",
)
@dead_letter_options()
@nsqd_and_lookupd_addresses(
    "nsqd TCP address (may be given multiple times).",
    "lookupd HTTP address (may be given multiple times).",
)
@click.option(
    "--producer-opt",
    "producer_options",
    multiple=True,
    metavar="KEY,VALUE",
    help="go-nsq option for the destination connections (may be given multiple times).",
)
@relay_options("destination")
@connection_options("consumer-opt")
@logging_options(TOOL)
@metrics_option
@version_option(TOOL)
def command(**options: Any) -> None:
    """Relay topics to other nsqds; FIN each message once a destination accepted it."""
    settings = _settings(options)
    configure_logging(options["log_level"], options["log_prefix"])
    run_event_loop(relay, settings)


def _settings(options: dict[str, Any]) -> RelaySettings:
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    # The go-nsq options first: Go refuses a bad one while parsing flags (exit 2).
    max_in_flight = options["max_in_flight"]
    consumer_config = passthrough_config(TOOL, options, "consumer-opt", max_in_flight=max_in_flight)
    producer_options = {"client_options": options["producer_options"]}
    producer_config = passthrough_config(TOOL, producer_options, "producer-opt")
    topics = list(options["topics"])
    if not topics or not options["channel"]:
        fail("--topic and --channel are required")
    destination_topic = options["destination_topic"] or None
    try:
        for topic in topics:
            check_topic(topic)
        if destination_topic is not None:
            check_topic(destination_topic)
        check_channel(options["channel"])
    except LocalProtocolError as error:
        fail(str(error))
    nsqd, lookupd = consumer_addresses(options)
    destinations = list(options["destinations"])
    if not destinations:
        fail("--destination-nsqd-tcp-address required")
    check_addresses(destinations, "--destination-nsqd-tcp-address")
    check_relay_options(options)
    return RelaySettings(
        topics=topics,
        channel=options["channel"],
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        consumer_config=consumer_config,
        destinations=destinations,
        destination_topic=destination_topic,
        producer_config=producer_config,
        mode=options["mode"],
        json_filter=_json_filter(options),
        status_every=options["status_every"],
        dead_letters=dead_letter_settings(options),
        metrics_address=options["metrics_address"],
    )


def _json_filter(options: dict[str, Any]) -> JsonFilter:
    from nsqtools.jsonfilter import JsonFilter

    return JsonFilter(
        require_field=options["require_json_field"],
        require_value=options["require_json_value"],
        whitelist=tuple(options["whitelist_json_fields"]),
    )


async def relay(settings: RelaySettings) -> None:
    from nsqtools.commands.consoles import go_log
    from nsqtools.relays.nsq import Relay
    from nsqtools.relays.status import RelayStatus, sent_families
    from nsqtools.runtime.consuming import ConsumeSettings, RunCounters, run_consumers
    from nsqtools.runtime.metrics import run_families, serving_metrics

    consume = ConsumeSettings(
        topics=settings.topics,
        channel=settings.channel,
        config=settings.consumer_config,
        nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
        lookupd_http_addresses=settings.lookupd_http_addresses,
        dead_letters=settings.dead_letters,
    )
    status = RelayStatus(settings.status_every, settings.destinations, go_log)
    counters = RunCounters()
    metrics = (
        functools.partial(run_families, counters, settings.channel),
        functools.partial(sent_families, status, settings.channel),
    )
    async with (
        serving_metrics(settings.metrics_address, *metrics),
        Relay(
            settings.destinations,
            settings.destination_topic,
            settings.producer_config,
            settings.mode,
            json_filter=settings.json_filter,
            status=status,
            report=go_log,
        ) as relaying,
    ):
        await run_consumers(consume, relaying.sink, counters=counters)


def main() -> None:
    run(command, TOOL)
