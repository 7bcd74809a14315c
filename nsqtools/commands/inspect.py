"""`nsq topics`, `nsq channels TOPIC`, `nsq nodes`, `nsq topic TOPIC` and `nsq channel
TOPIC CHANNEL`: the cluster as nsqadmin shows it, in a terminal (no Go tool has these).

Each asks every node at once (nsqtools.inspection gathers and sums) and prints tables
(rich on a terminal, aligned plain text otherwise) or, with --json, one JSON document.
One poll by default; --interval polls twice and adds message rates. A node that cannot
be asked is left out of the tables and named on stderr, and the exit status is 1.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from nsqtools.commands.cluster_cli import (
    Column,
    Table,
    check_names,
    cluster_from,
    cluster_options,
    fail_on,
    failure_json,
    flag_cell,
    json_option,
    nanoseconds_cell,
    new_console,
    percentile_header,
    print_json,
    print_tables,
    rate_cell,
    with_client,
)
from nsqtools.commands.front import CONTEXT_SETTINGS, fail
from nsqtools.commands.options import DURATION

if TYPE_CHECKING:
    import httpx

    from nsqtools.cluster import Cluster
    from nsqtools.httpapi import HttpApiError
    from nsqtools.httpapi.nsqd import E2eLatency
    from nsqtools.inspection import (
        ChannelRow,
        ChannelsView,
        ChannelView,
        ClientRow,
        NodesView,
        TopicRow,
        TopicsView,
        TopicView,
        View,
    )

F = TypeVar("F", bound=Callable[..., Any])
V = TypeVar("V", bound="View")

TOTAL = "total"


def interval_option(function: F) -> F:
    return click.option(
        "--interval",
        type=DURATION,
        metavar="DURATION",
        help="Poll twice this far apart (e.g. 1s) and show message rates (messages/s); "
        "without it, one poll and no rates.",
    )(function)


def _gather(
    options: dict[str, Any], gather: Callable[[httpx.AsyncClient, Cluster], Awaitable[V]]
) -> V:
    """The view, gathered once, or twice --interval apart with its rates."""
    from nsqtools.inspection import measured

    cluster = cluster_from(options)
    interval = options.get("interval")

    async def job(client: httpx.AsyncClient) -> V:
        if interval is None:
            return await gather(client, cluster)
        return await measured(lambda: gather(client, cluster), interval)

    return with_client(options, job)


# -- nsq topics ------------------------------------------------------------------------


@click.command("topics", context_settings=CONTEXT_SETTINGS)
@json_option
@interval_option
@cluster_options
def topics_command(**options: Any) -> None:
    """Every topic in the cluster, summed over its nsqds.

    Per topic: depth (in memory and on disk), messages, channels, paused, the nsqds
    holding it. The topics are those the lookupds know and those any nsqd holds.
    """
    from nsqtools.inspection import gather_topics

    view = _gather(options, gather_topics)
    if options["as_json"]:
        print_json(topics_json(view))
    else:
        print_tables(new_console(), topics_tables(view, rates=options["interval"] is not None))
    fail_on(view.failures)


def topics_tables(view: TopicsView, rates: bool) -> list[Table]:
    columns = [
        Column("topic"),
        *_depth_columns(),
        Column("messages", numeric=True),
        *_rate_columns(rates),
        Column("channels", numeric=True),
        Column("paused"),
        Column("nsqds"),
    ]
    table = Table(columns)
    for row in view.topics:
        cells = [row.topic, *_depth_cells(row), str(row.counters.message_count)]
        cells += [*_rate_cells(row, rates), str(len(row.channels)), _paused_cell(row)]
        table.add([*cells, " ".join(row.nodes)], _row_style(row))
    return [table]


def topics_json(view: TopicsView) -> dict[str, Any]:
    return {"topics": [_row_json(row) for row in view.topics], **_failures_json(view)}


# -- nsq channels ----------------------------------------------------------------------


@click.command("channels", context_settings=CONTEXT_SETTINGS)
@click.argument("topic")
@json_option
@interval_option
@cluster_options
def channels_command(topic: str, **options: Any) -> None:
    """Every channel of TOPIC, summed over its nsqds.

    Per channel: depth (in memory and on disk), in flight, deferred, requeued, timed
    out, messages, clients, paused, the nsqds holding it. The channels are those the
    lookupds know and those any of the topic's nsqds has.
    """
    from nsqtools.inspection import gather_channels

    check_names(topic)
    view = _gather(options, lambda client, cluster: gather_channels(client, cluster, topic))
    if options["as_json"]:
        print_json(channels_json(view))
    else:
        rates = options["interval"] is not None
        print_tables(new_console(), [channels_table(view.channels, rates)])
    fail_on(view.failures)


def channels_table(channels: Sequence[ChannelRow], rates: bool, title: str = "") -> Table:
    table = Table([Column("channel"), *_channel_columns(rates), Column("nsqds")], title)
    for row in channels:
        table.add([row.channel, *_channel_cells(row, rates), " ".join(row.nodes)], _row_style(row))
    return table


def channels_json(view: ChannelsView) -> dict[str, Any]:
    channels = [_row_json(row) for row in view.channels]
    return {"topic": view.topic, "channels": channels, **_failures_json(view)}


# -- nsq nodes -------------------------------------------------------------------------


@click.command("nodes", context_settings=CONTEXT_SETTINGS)
@json_option
@cluster_options
def nodes_command(**options: Any) -> None:
    """Every nsqd and nsqlookupd of the cluster.

    Per nsqd (given, or registered with the lookupds): HTTP and TCP address, hostname,
    version, health, topics, channels, depth, messages, clients, and the topics the
    lookupds tombstoned for it. Per lookupd: its version, or why it did not answer.
    """
    from nsqtools.inspection import gather_nodes

    cluster = cluster_from(options)
    view = with_client(options, lambda client: gather_nodes(client, cluster))
    if options["as_json"]:
        print_json(nodes_json(view))
    else:
        print_tables(new_console(), nodes_tables(view))
    fail_on(view.failures)


def nodes_tables(view: NodesView) -> list[Table]:
    nsqds = Table(
        [
            Column("address"),
            Column("tcp"),
            Column("hostname"),
            Column("version"),
            Column("health"),
            Column("topics", numeric=True),
            Column("channels", numeric=True),
            Column("depth", numeric=True),
            Column("messages", numeric=True),
            Column("clients", numeric=True),
            Column("tombstoned"),
        ],
        title="nsqd",
    )
    for node in view.nodes:
        cells = [node.http_address, node.tcp_address, node.hostname, node.version]
        if node.error is None:
            numbers = (len(node.topics), node.channel_count, node.depth, node.message_count)
            cells += [node.health, *map(str, (*numbers, node.client_count))]
        else:
            cells += [f"no answer: {_reason(node.error)}", "", "", "", "", ""]
        healthy = node.error is None and node.health == "OK"
        nsqds.add([*cells, " ".join(node.tombstoned_topics)], "" if healthy else "red")
    tables = [nsqds]
    if view.lookupds:
        lookupds = Table([Column("address"), Column("version"), Column("health")], "nsqlookupd")
        for lookupd in view.lookupds:
            if lookupd.error is None:
                lookupds.add([lookupd.address, lookupd.version, "OK"])
            else:
                lookupds.add([lookupd.address, "", f"no answer: {_reason(lookupd.error)}"], "red")
        tables.append(lookupds)
    return tables


def nodes_json(view: NodesView) -> dict[str, Any]:
    nodes = [
        {
            "http_address": node.http_address,
            "tcp_address": node.tcp_address,
            "hostname": node.hostname,
            "version": node.version,
            "health": node.health,
            "topics": list(node.topics),
            "tombstoned_topics": list(node.tombstoned_topics),
            "channel_count": node.channel_count,
            "depth": node.depth,
            "message_count": node.message_count,
            "client_count": node.client_count,
            "error": None if node.error is None else node.error.reason,
        }
        for node in view.nodes
    ]
    lookupds = [
        {
            "address": lookupd.address,
            "version": lookupd.version,
            "error": None if lookupd.error is None else lookupd.error.reason,
        }
        for lookupd in view.lookupds
    ]
    return {"nodes": nodes, "lookupds": lookupds, **_failures_json(view)}


# -- nsq topic -------------------------------------------------------------------------


@click.command("topic", context_settings=CONTEXT_SETTINGS)
@click.argument("topic")
@json_option
@interval_option
@cluster_options
def topic_command(topic: str, **options: Any) -> None:
    """TOPIC in detail, per nsqd, with its channels.

    Per nsqd and in total: depth (in memory and on disk), messages, channels, paused,
    and the e2e latency percentiles when nsqd measures them (the total's are the
    highest any nsqd reports). Then every channel, as `nsq channels` shows them.
    """
    from nsqtools.inspection import gather_topic

    check_names(topic)
    view = _gather(options, lambda client, cluster: gather_topic(client, cluster, topic))
    if not view.nodes:
        _not_found(f"no nsqd has topic {topic}", view.failures)
    if options["as_json"]:
        print_json(topic_json(view))
    else:
        print_tables(new_console(), topic_tables(view, options["interval"] is not None))
    fail_on(view.failures)


def topic_tables(view: TopicView, rates: bool) -> list[Table]:
    rows = [*view.nodes, view.total]
    quantiles = _quantiles(rows)
    columns = [
        Column("nsqd"),
        *_depth_columns(),
        Column("messages", numeric=True),
        *_rate_columns(rates),
        Column("channels", numeric=True),
        Column("paused"),
        *_latency_columns(quantiles),
    ]
    nodes = Table(columns, f"topic {view.total.topic}")
    for row in rows:
        name = TOTAL if row is view.total else row.nodes[0]
        cells = [
            name,
            *_depth_cells(row),
            str(row.counters.message_count),
            *_rate_cells(row, rates),
        ]
        cells += [str(len(row.channels)), _paused_cell(row)]
        cells += _latency_cells(row.e2e_processing_latency, quantiles)
        nodes.add(cells, "bold" if row is view.total else _row_style(row))
    return [nodes, channels_table(view.channels, rates, "channels")]


def topic_json(view: TopicView) -> dict[str, Any]:
    return {
        "topic": view.total.topic,
        "total": _row_json(view.total),
        "nodes": [_row_json(row) for row in view.nodes],
        "channels": [_row_json(row) for row in view.channels],
        **_failures_json(view),
    }


# -- nsq channel -----------------------------------------------------------------------


@click.command("channel", context_settings=CONTEXT_SETTINGS)
@click.argument("topic")
@click.argument("channel")
@json_option
@interval_option
@cluster_options
def channel_command(topic: str, channel: str, **options: Any) -> None:
    """CHANNEL of TOPIC in detail, per nsqd, with its clients.

    Per nsqd and in total: depth (in memory and on disk), in flight, deferred,
    requeued, timed out, messages, clients, paused, and the e2e latency percentiles
    when nsqd measures them (the total's are the highest any nsqd reports). Then every
    client: nsqd, hostname, address, user agent, TLS, compression, RDY, in flight,
    messages, finished, requeued, connected since.
    """
    from nsqtools.inspection import gather_channel

    check_names(topic, channel)
    view = _gather(options, lambda client, cluster: gather_channel(client, cluster, topic, channel))
    if not view.nodes:
        _not_found(f"no nsqd has channel {channel} of topic {topic}", view.failures)
    if options["as_json"]:
        print_json(channel_json(view))
    else:
        rates = options["interval"] is not None
        print_tables(new_console(), channel_tables(view, rates, now=time.time()))
    fail_on(view.failures)


def channel_tables(view: ChannelView, rates: bool, now: float) -> list[Table]:
    rows = [*view.nodes, view.total]
    quantiles = _quantiles(rows)
    columns = [Column("nsqd"), *_channel_columns(rates), *_latency_columns(quantiles)]
    nodes = Table(columns, f"channel {view.total.channel} of topic {view.total.topic}")
    for row in rows:
        name = TOTAL if row is view.total else row.nodes[0]
        cells = [name, *_channel_cells(row, rates)]
        cells += _latency_cells(row.e2e_processing_latency, quantiles)
        nodes.add(cells, "bold" if row is view.total else _row_style(row))
    return [nodes, clients_table(view.clients, now)]


def clients_table(clients: Iterable[ClientRow], now: float) -> Table:
    table = Table(
        [
            Column("nsqd"),
            Column("client"),
            Column("address"),
            Column("user agent"),
            Column("tls"),
            Column("compression"),
            Column("rdy", numeric=True),
            Column("in-flight", numeric=True),
            Column("messages", numeric=True),
            Column("finished", numeric=True),
            Column("requeued", numeric=True),
            Column("connected", numeric=True),
        ],
        title="clients",
    )
    for row in clients:
        client = row.client
        compression = "snappy" if client.snappy else "deflate" if client.deflate else ""
        counts = (client.ready_count, client.in_flight_count, client.message_count)
        cells = [row.node, client.hostname or client.client_id, client.remote_address]
        cells += [client.user_agent, flag_cell(client.tls), compression, *map(str, counts)]
        cells += [str(client.finish_count), str(client.requeue_count)]
        table.add([*cells, age_cell(now - client.connect_ts)])
    return table


def channel_json(view: ChannelView) -> dict[str, Any]:
    return {
        "topic": view.total.topic,
        "channel": view.total.channel,
        "total": _row_json(view.total),
        "nodes": [_row_json(row) for row in view.nodes],
        "clients": [{"node": row.node, **asdict(row.client)} for row in view.clients],
        **_failures_json(view),
    }


# -- shared pieces ---------------------------------------------------------------------


def _not_found(message: str, failures: Sequence[Any]) -> NoReturn:
    if failures:
        message += " that answered; " + "; ".join(str(failure) for failure in failures)
    fail(message)


def _reason(error: HttpApiError) -> str:
    """Why a node did not answer, without the request (the same for every node)."""
    return error.reason.partition(": ")[2] or error.reason


def _depth_columns() -> list[Column]:
    return [
        Column("depth", numeric=True),
        Column("memory", numeric=True),
        Column("disk", numeric=True),
    ]


def _depth_cells(row: TopicRow | ChannelRow) -> list[str]:
    counters = row.counters
    return [str(counters.depth), str(counters.memory_depth), str(counters.backend_depth)]


def _rate_columns(rates: bool) -> list[Column]:
    return [Column("rate/s", numeric=True)] if rates else []


def _rate_cells(row: TopicRow | ChannelRow, rates: bool) -> list[str]:
    return [rate_cell(row.message_rate)] if rates else []


def _channel_columns(rates: bool) -> list[Column]:
    counts = ("in-flight", "deferred", "requeued", "timed-out", "messages")
    return [
        *_depth_columns(),
        *(Column(name, numeric=True) for name in counts),
        *_rate_columns(rates),
        Column("clients", numeric=True),
        Column("paused"),
    ]


def _channel_cells(row: ChannelRow, rates: bool) -> list[str]:
    counters = row.counters
    counts = (
        counters.in_flight_count,
        counters.deferred_count,
        counters.requeue_count,
        counters.timeout_count,
        counters.message_count,
    )
    return [
        *_depth_cells(row),
        *map(str, counts),
        *_rate_cells(row, rates),
        str(counters.client_count),
        _paused_cell(row),
    ]


def _paused_cell(row: TopicRow | ChannelRow) -> str:
    """yes on every nsqd, or how many of them (after a pause that failed on some)."""
    paused = len(row.paused_nodes)
    if not paused:
        return ""
    return "yes" if paused == len(row.nodes) else f"{paused}/{len(row.nodes)}"


def _row_style(row: TopicRow | ChannelRow) -> str:
    return "yellow" if row.paused_nodes else ""


def _quantiles(rows: Iterable[TopicRow | ChannelRow]) -> list[float]:
    """Every quantile any row reports, ascending."""
    latencies = [row.e2e_processing_latency for row in rows if row.e2e_processing_latency]
    return sorted({p.quantile for latency in latencies for p in latency.percentiles})


def _latency_columns(quantiles: Sequence[float]) -> list[Column]:
    return [Column(percentile_header(quantile), numeric=True) for quantile in quantiles]


def _latency_cells(latency: E2eLatency | None, quantiles: Sequence[float]) -> list[str]:
    values = {} if latency is None else {p.quantile: p.value for p in latency.percentiles}
    return [
        nanoseconds_cell(values[quantile]) if quantile in values else "-" for quantile in quantiles
    ]


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


# The counts of a row, by JSON key: a topic has no channel counts.
_TOPIC_COUNTS = ("depth", "backend_depth", "message_count")
_CHANNEL_COUNTS = (
    *_TOPIC_COUNTS,
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "client_count",
)


def _row_json(row: TopicRow | ChannelRow) -> dict[str, Any]:
    document = asdict(row)
    counts = document.pop("counters")
    names = _CHANNEL_COUNTS if "channel" in document else _TOPIC_COUNTS
    document |= {name: counts[name] for name in names}
    document["memory_depth"] = row.counters.memory_depth
    document["paused"] = bool(row.paused_nodes)
    return document


def _failures_json(view: Any) -> dict[str, Any]:
    return {"failures": [failure_json(failure) for failure in view.failures]}
