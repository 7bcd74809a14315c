"""`nsq topic TOPIC`: a topic in detail, per nsqd and in total, with its channels."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.cluster_cli import (
    Column,
    Table,
    check_names,
    cluster_options,
    fail_on,
    json_option,
    print_json,
    print_tables,
)
from nsqtools.commands.front import CONTEXT_SETTINGS
from nsqtools.commands.inspect.shared import (
    TOTAL,
    channels_table,
    depth_cells,
    depth_columns,
    fail_not_found,
    failures_json,
    gather_view,
    has_partitions,
    interval_option,
    latency_cells,
    latency_columns,
    partition_cells,
    partition_columns,
    paused_cell,
    quantiles_of,
    rate_cells,
    rate_columns,
    row_json,
    row_style,
)

if TYPE_CHECKING:
    from nsqtools.inspection import TopicView


@click.command("topic", context_settings=CONTEXT_SETTINGS)
@click.argument("topic", shell_complete=completers.topics)
@json_option
@interval_option
@cluster_options
def command(topic: str, **options: Any) -> None:
    """TOPIC in detail, per nsqd, with its channels.

    Per nsqd (per partition, on the Youzan fork) and in total: depth (in memory and on
    disk), messages, channels, paused, and the e2e latency percentiles when nsqd
    measures them (the total's are the highest any nsqd reports). Then every channel,
    as `nsq channels` shows them.
    """
    from nsqtools.inspection import gather_topic

    check_names(topic)
    view = gather_view(options, lambda client, cluster: gather_topic(client, cluster, topic))
    if not view.nodes:
        fail_not_found(f"no nsqd has topic {topic}", view.failures)
    if options["as_json"]:
        print_json(topic_json(view))
    else:
        print_tables(topic_tables(view, options["interval"] is not None))
    fail_on(view.failures)


def topic_tables(view: TopicView, rates: bool) -> list[Table]:
    rows = [*view.nodes, view.total]
    quantiles = quantiles_of(rows)
    partitioned = has_partitions(rows)
    columns = [
        Column("nsqd"),
        *partition_columns(partitioned),
        *depth_columns(),
        Column("messages", numeric=True),
        *rate_columns(rates),
        Column("channels", numeric=True),
        Column("paused"),
        *latency_columns(quantiles),
    ]
    nodes = Table(columns, f"topic {view.total.topic}")
    for row in rows:
        name = TOTAL if row is view.total else row.nodes[0]
        cells = [
            name,
            *partition_cells(row, partitioned),
            *depth_cells(row),
            str(row.counters.message_count),
            *rate_cells(row, rates),
        ]
        cells += [str(len(row.channels)), paused_cell(row)]
        cells += latency_cells(row.e2e_processing_latency, quantiles)
        nodes.add(cells, "bold" if row is view.total else row_style(row))
    return [nodes, channels_table(view.channels, rates, "channels")]


def topic_json(view: TopicView) -> dict[str, Any]:
    return {
        "topic": view.total.topic,
        "total": row_json(view.total),
        "nodes": [row_json(row) for row in view.nodes],
        "channels": [row_json(row) for row in view.channels],
        **failures_json(view),
    }
