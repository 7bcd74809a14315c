"""`nsq channel TOPIC CHANNEL`: a channel in detail, per nsqd and in total, with its
clients."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.cluster_cli import (
    Column,
    Table,
    check_names,
    cluster_options,
    fail_on,
    flag_cell,
    json_option,
    print_json,
    print_tables,
)
from nsqtools.commands.front import CONTEXT_SETTINGS
from nsqtools.commands.inspect.shared import (
    TOTAL,
    channel_cells,
    channel_columns,
    fail_not_found,
    failures_json,
    gather_view,
    has_partitions,
    interval_option,
    latency_cells,
    latency_columns,
    partition_cells,
    partition_columns,
    quantiles_of,
    row_json,
    row_style,
)

if TYPE_CHECKING:
    from nsqtools.inspection import ChannelView, ClientRow


@click.command("channel", context_settings=CONTEXT_SETTINGS)
@click.argument("topic", shell_complete=completers.topics)
@click.argument("channel")
@json_option
@interval_option
@cluster_options
def command(topic: str, channel: str, **options: Any) -> None:
    """CHANNEL of TOPIC in detail, per nsqd, with its clients.

    Per nsqd (per partition, on the Youzan fork) and in total: depth (in memory and on
    disk), in flight, deferred, requeued, timed out, messages, clients, paused, and the
    e2e latency percentiles when nsqd measures them (the total's are the highest any
    nsqd reports). Then every client: nsqd, hostname, address, user agent, TLS,
    compression, RDY, in flight, messages, finished, requeued, connected since.
    """
    from nsqtools.inspection import gather_channel

    check_names(topic, channel)
    view = gather_view(
        options, lambda client, cluster: gather_channel(client, cluster, topic, channel)
    )
    if not view.nodes:
        fail_not_found(f"no nsqd has channel {channel} of topic {topic}", view.failures)
    if options["as_json"]:
        print_json(channel_json(view))
    else:
        rates = options["interval"] is not None
        print_tables(channel_tables(view, rates, now=time.time()))
    fail_on(view.failures)


def channel_tables(view: ChannelView, rates: bool, now: float) -> list[Table]:
    rows = [*view.nodes, view.total]
    quantiles = quantiles_of(rows)
    partitioned = has_partitions(rows)
    columns = [Column("nsqd"), *partition_columns(partitioned), *channel_columns(rates)]
    columns += latency_columns(quantiles)
    nodes = Table(columns, f"channel {view.total.channel} of topic {view.total.topic}")
    for row in rows:
        name = TOTAL if row is view.total else row.nodes[0]
        cells = [name, *partition_cells(row, partitioned), *channel_cells(row, rates)]
        cells += latency_cells(row.e2e_processing_latency, quantiles)
        nodes.add(cells, "bold" if row is view.total else row_style(row))
    return [nodes, clients_table(view.clients, now, partitioned)]


def clients_table(clients: Iterable[ClientRow], now: float, partitioned: bool = False) -> Table:
    table = Table(
        [
            Column("nsqd"),
            *partition_columns(partitioned),
            Column("client"),
            Column("address", gives_way=2),
            Column("user agent", gives_way=3),
            Column("tls", gives_way=8),
            Column("compression", gives_way=7),
            Column("rdy", numeric=True),
            Column("in-flight", numeric=True),
            Column("messages", numeric=True),
            Column("finished", numeric=True, gives_way=5),
            Column("requeued", numeric=True, gives_way=4),
            Column("connected", numeric=True, gives_way=6),
        ],
        title="clients",
    )
    for row in clients:
        client = row.client
        compression = "snappy" if client.snappy else "deflate" if client.deflate else ""
        counts = (client.ready_count, client.in_flight_count, client.message_count)
        cells = [row.node, *([str(row.partition)] if partitioned else [])]
        cells += [client.hostname or client.client_id, client.remote_address]
        cells += [client.user_agent, flag_cell(client.tls), compression, *map(str, counts)]
        cells += [str(client.finish_count), str(client.requeue_count)]
        table.add([*cells, age_cell(now - client.connect_ts)])
    return table


def channel_json(view: ChannelView) -> dict[str, Any]:
    return {
        "topic": view.total.topic,
        "channel": view.total.channel,
        "total": row_json(view.total),
        "nodes": [row_json(row) for row in view.nodes],
        "clients": [_client_json(row) for row in view.clients],
        **failures_json(view),
    }


def _client_json(row: ClientRow) -> dict[str, Any]:
    partition = {} if row.partition is None else {"partition": row.partition}
    return {"node": row.node, **partition, **asdict(row.client)}


def age_cell(seconds: float) -> str:
    """How long ago: 45s, 12m3s, 5h7m, 3d4h."""
    whole = max(int(seconds), 0)
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
