"""`nsq topics`: every topic in the cluster, summed over its nsqds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands.cluster_cli import (
    Column,
    Table,
    cluster_options,
    fail_on,
    json_option,
    print_json,
    print_tables,
)
from nsqtools.commands.front import CONTEXT_SETTINGS
from nsqtools.commands.inspect.shared import (
    depth_cells,
    depth_columns,
    failures_json,
    gather_view_fast,
    has_partitions,
    interval_option,
    partition_cells,
    partition_columns,
    paused_cell,
    rate_cells,
    rate_columns,
    row_json,
    row_style,
)

if TYPE_CHECKING:
    from nsqtools.inspection import TopicsView


@click.command("topics", context_settings=CONTEXT_SETTINGS)
@json_option
@interval_option
@cluster_options
def command(**options: Any) -> None:
    """Every topic in the cluster, summed over its nsqds.

    Per topic: depth (in memory and on disk), messages, channels, paused, the nsqds
    holding it. The topics are those the lookupds know and those any nsqd holds.
    """
    from nsqtools.inspection import gather_topics, topics_plan

    view = gather_view_fast(options, gather_topics, topics_plan)
    if not view.topics:
        fail_on(view.failures)  # nothing learnt: the error alone, no empty table
    if options["as_json"]:
        print_json(topics_json(view))
    else:
        print_tables(topics_tables(view, rates=options["interval"] is not None))
    fail_on(view.failures)


def topics_tables(view: TopicsView, rates: bool) -> list[Table]:
    partitioned = has_partitions(view.topics)
    columns = [
        Column("topic"),
        *depth_columns(),
        Column("messages", numeric=True),
        *rate_columns(rates),
        Column("channels", numeric=True),
        Column("paused"),
        Column("nsqds"),
        *partition_columns(partitioned),
    ]
    table = Table(columns)
    for row in view.topics:
        cells = [row.topic, *depth_cells(row), str(row.counters.message_count)]
        cells += [*rate_cells(row, rates), str(len(row.channels)), paused_cell(row)]
        cells += [" ".join(row.nodes), *partition_cells(row, partitioned)]
        table.add(cells, row_style(row))
    return [table]


def topics_json(view: TopicsView) -> dict[str, Any]:
    return {"topics": [row_json(row) for row in view.topics], **failures_json(view)}
