"""What the five inspection commands share: --interval and the gathering it drives
(one poll, or two and the rates), the columns and cells of topic and channel rows (with
a partition column when the rows come from the Youzan fork), the channels table, the
rows' JSON, and the end of a command when nothing was found."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from nsqtools.commands.cluster_cli import (
    Column,
    Table,
    cluster_from,
    failure_json,
    nanoseconds_cell,
    percentile_header,
    rate_cell,
    with_client,
)
from nsqtools.commands.front import fail
from nsqtools.commands.options import DURATION

if TYPE_CHECKING:
    import httpx

    from nsqtools.cluster import Cluster
    from nsqtools.httpapi.nsqd import E2eLatency
    from nsqtools.httpapi.plans import Plan
    from nsqtools.inspection import ChannelRow, TopicRow, View

F = TypeVar("F", bound=Callable[..., Any])
V = TypeVar("V", bound="View")

TOTAL = "total"

# On a narrow terminal, the columns of topic and channel rows that give way, the highest
# first: the depth, in flight, messages, the rate and the clients never do.
_GIVES_WAY = {
    "latency": 6,
    "memory": 5,
    "disk": 4,
    "deferred": 3,
    "timed-out": 3,
    "requeued": 2,
}


def interval_option(function: F) -> F:
    return click.option(
        "--interval",
        type=DURATION,
        metavar="DURATION",
        help="Poll twice this far apart (e.g. 1s) and show message rates (messages/s); "
        "without it, one poll and no rates.",
    )(function)


def gather_view(
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


def gather_view_fast(
    options: dict[str, Any],
    gather: Callable[[httpx.AsyncClient, Cluster], Awaitable[V]],
    plan_of: Callable[[Cluster], Plan[V]],
) -> V:
    """gather_view(), on threads (httpapi.blocking: neither trio nor httpx to import,
    a start-up several times shorter) when every address given is plain HTTP; an
    https:// one needs httpx's TLS."""
    import time

    from nsqtools.httpapi.blocking import BlockingClient

    cluster = cluster_from(options)
    addresses = (*cluster.nsqd_http_addresses, *cluster.lookupd_http_addresses)
    if any(address.startswith("https://") for address in addresses):
        return gather_view(options, gather)
    client = BlockingClient(options["http_timeout"], options["http_timeout"])
    interval = options.get("interval")
    if interval is None:
        return client.run(plan_of(cluster))
    first_started = time.monotonic()
    before = client.run(plan_of(cluster))
    time.sleep(interval)
    second_started = time.monotonic()
    after = client.run(plan_of(cluster))
    return after.measured(before, second_started - first_started)


def channels_table(channels: Sequence[ChannelRow], rates: bool, title: str = "") -> Table:
    partitioned = has_partitions(channels)
    columns = [Column("channel"), *channel_columns(rates), Column("nsqds")]
    table = Table([*columns, *partition_columns(partitioned)], title)
    for row in channels:
        cells = [row.channel, *channel_cells(row, rates), " ".join(row.nodes)]
        table.add([*cells, *partition_cells(row, partitioned)], row_style(row))
    return table


def has_partitions(rows: Iterable[TopicRow | ChannelRow]) -> bool:
    """Whether the rows come from the Youzan fork's nsqds, which have partitions."""
    return any(row.partitions for row in rows)


def partition_columns(partitioned: bool) -> list[Column]:
    return [Column("partition")] if partitioned else []


def partition_cells(row: TopicRow | ChannelRow, partitioned: bool) -> list[str]:
    """The fork's partitions the row sums, or the one a node's row is."""
    return [" ".join(map(str, row.partitions))] if partitioned else []


def fail_not_found(message: str, failures: Sequence[Any]) -> NoReturn:
    if failures:
        message += " that answered; " + "; ".join(str(failure) for failure in failures)
    fail(message)


def depth_columns() -> list[Column]:
    return [
        Column("depth", numeric=True),
        Column("memory", numeric=True, gives_way=_GIVES_WAY["memory"]),
        Column("disk", numeric=True, gives_way=_GIVES_WAY["disk"]),
    ]


def depth_cells(row: TopicRow | ChannelRow) -> list[str]:
    counters = row.counters
    return [str(counters.depth), str(counters.memory_depth), str(counters.backend_depth)]


def rate_columns(rates: bool) -> list[Column]:
    return [Column("rate/s", numeric=True)] if rates else []


def rate_cells(row: TopicRow | ChannelRow, rates: bool) -> list[str]:
    return [rate_cell(row.message_rate)] if rates else []


def channel_columns(rates: bool) -> list[Column]:
    counts = ("in-flight", "deferred", "requeued", "timed-out", "messages")
    return [
        *depth_columns(),
        *(Column(name, numeric=True, gives_way=_GIVES_WAY.get(name, 0)) for name in counts),
        *rate_columns(rates),
        Column("clients", numeric=True),
        Column("paused"),
    ]


def channel_cells(row: ChannelRow, rates: bool) -> list[str]:
    counters = row.counters
    counts = (
        counters.in_flight_count,
        counters.deferred_count,
        counters.requeue_count,
        counters.timeout_count,
        counters.message_count,
    )
    return [
        *depth_cells(row),
        *map(str, counts),
        *rate_cells(row, rates),
        str(counters.client_count),
        paused_cell(row),
    ]


def paused_cell(row: TopicRow | ChannelRow) -> str:
    """yes on every nsqd, or how many of them (after a pause that failed on some)."""
    paused = len(row.paused_nodes)
    if not paused:
        return ""
    return "yes" if paused == len(row.nodes) else f"{paused}/{len(row.nodes)}"


def row_style(row: TopicRow | ChannelRow) -> str:
    return "yellow" if row.paused_nodes else ""


def quantiles_of(rows: Iterable[TopicRow | ChannelRow]) -> list[float]:
    """Every quantile any row reports, ascending."""
    latencies = [row.e2e_processing_latency for row in rows if row.e2e_processing_latency]
    return sorted({p.quantile for latency in latencies for p in latency.percentiles})


def latency_columns(quantiles: Sequence[float]) -> list[Column]:
    return [
        Column(percentile_header(quantile), numeric=True, gives_way=_GIVES_WAY["latency"])
        for quantile in quantiles
    ]


def latency_cells(latency: E2eLatency | None, quantiles: Sequence[float]) -> list[str]:
    values = {} if latency is None else {p.quantile: p.value for p in latency.percentiles}
    return [
        nanoseconds_cell(values[quantile]) if quantile in values else "-" for quantile in quantiles
    ]


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


def row_json(row: TopicRow | ChannelRow) -> dict[str, Any]:
    document = asdict(row)
    if not row.partitions:  # upstream's rows, as they were before the fork's
        del document["partitions"]
    counts = document.pop("counters")
    names = _CHANNEL_COUNTS if "channel" in document else _TOPIC_COUNTS
    document |= {name: counts[name] for name in names}
    document["memory_depth"] = row.counters.memory_depth
    document["paused"] = bool(row.paused_nodes)
    return document


def failures_json(view: Any) -> dict[str, Any]:
    return {"failures": [failure_json(failure) for failure in view.failures]}
