"""`nsq channels TOPIC`: every channel of a topic, summed over its nsqds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.cluster_cli import (
    check_names,
    cluster_options,
    fail_on,
    json_option,
    print_json,
    print_tables,
)
from nsqtools.commands.front import CONTEXT_SETTINGS
from nsqtools.commands.inspect.shared import (
    channels_table,
    fail_not_found,
    failures_json,
    gather_view,
    interval_option,
    row_json,
)

if TYPE_CHECKING:
    from nsqtools.inspection import ChannelsView


@click.command("channels", context_settings=CONTEXT_SETTINGS)
@click.argument("topic", shell_complete=completers.topics)
@json_option
@interval_option
@cluster_options
def command(topic: str, **options: Any) -> None:
    """Every channel of TOPIC, summed over its nsqds.

    Per channel: depth (in memory and on disk), in flight, deferred, requeued, timed
    out, messages, clients, paused, the nsqds holding it. The channels are those the
    lookupds know and those any of the topic's nsqds has.
    """
    from nsqtools.inspection import gather_channels

    check_names(topic)
    view = gather_view(options, lambda client, cluster: gather_channels(client, cluster, topic))
    if not view.held:
        fail_not_found(f"no nsqd has topic {topic}", view.failures)
    if options["as_json"]:
        print_json(channels_json(view))
    else:
        rates = options["interval"] is not None
        print_tables([channels_table(view.channels, rates)])
    fail_on(view.failures)


def channels_json(view: ChannelsView) -> dict[str, Any]:
    channels = [row_json(row) for row in view.channels]
    return {"topic": view.topic, "channels": channels, **failures_json(view)}
