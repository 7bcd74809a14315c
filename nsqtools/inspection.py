"""The cluster as nsqadmin shows it, for the inspection commands (`nsq topics`, `nsq
channels`, `nsq nodes`, `nsq topic`, `nsq channel`): each topic and channel summed over
the nsqds that hold it, every nsqd's own row beside the total, and message rates from
two polls.

The Youzan fork's nsqds answer one /stats entry per partition they hold: a topic's (and
a channel's) partitions are summed like its nodes, and each node row is one partition
of it (`partitions`). Upstream nsqds have none: their rows' `partitions` stay empty.

Gathering asks the lookupds and the nsqds at once (nsqtools.cluster, .discovery); a node
that cannot be asked is kept in the view's `failures` and never hides the others.
Summing is sans-IO: the functions that build rows take /stats answers.

    async with async_client(timeout=5) as client:
        view = await gather_topics(client, Cluster(lookupd_http_addresses=("127.0.0.1:4161",)))
    for row in view.topics:
        print(row.topic, row.depth, row.nodes)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from nsqtools import discovery
from nsqtools.cluster import (
    Cluster,
    NodeStats,
    find_nsqds,
    find_nsqds_plan,
    poll_stats,
    poll_stats_plan,
)
from nsqtools.httpapi import HttpApiError, lookupd
from nsqtools.httpapi.lookupd import RegisteredNsqd
from nsqtools.httpapi.nsqd import ChannelStats, ClientStats, E2eLatency, NsqdStats, TopicStats
from nsqtools.httpapi.plans import Plan
from nsqtools.stats.counters import Counters, merged_latency, rates_between

if TYPE_CHECKING:  # trio and httpx are imported where used: `nsq topics` runs without them
    import httpx

A = TypeVar("A")
B = TypeVar("B")
V = TypeVar("V", bound="View")
R = TypeVar("R", "TopicRow", "ChannelRow")


# -- rows (sans-IO) ----------------------------------------------------------------------


@dataclass(frozen=True)
class TopicRow:
    """A topic on some nsqds (one: a node's row; all that hold it: the total)."""

    topic: str
    nodes: tuple[str, ...]  # HTTP addresses, sorted
    counters: Counters = field(default_factory=Counters)  # depth, backend depth, messages
    channels: tuple[str, ...] = ()  # every channel any of the nodes has, sorted
    paused_nodes: tuple[str, ...] = ()
    e2e_processing_latency: E2eLatency | None = None
    message_rate: float | None = None  # messages/s, when measured over two polls
    partitions: tuple[int, ...] = ()  # the fork's partitions summed here, sorted

    @property
    def key(self) -> tuple[object, ...]:
        """What a row is compared by across two polls."""
        return (self.topic, *self.nodes, self.partitions)


@dataclass(frozen=True)
class ChannelRow:
    """A channel of a topic on some nsqds (one: a node's row; all that hold it: the total)."""

    topic: str
    channel: str
    nodes: tuple[str, ...]
    counters: Counters = field(default_factory=Counters)
    paused_nodes: tuple[str, ...] = ()
    e2e_processing_latency: E2eLatency | None = None
    message_rate: float | None = None
    partitions: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[object, ...]:
        return (self.topic, self.channel, *self.nodes, self.partitions)


@dataclass(frozen=True)
class ClientRow:
    """A consumer connected to a channel on one nsqd (of one partition, on the fork)."""

    node: str
    client: ClientStats
    partition: int | None = None


@dataclass(frozen=True)
class NsqdRow:
    """One nsqd: what the lookupds say of it, and what its /stats says."""

    http_address: str
    tcp_address: str = ""  # known through a lookupd only
    hostname: str = ""
    version: str = ""
    health: str = ""  # nsqd's own ("OK"); "" when it could not be asked
    topics: tuple[str, ...] = ()
    tombstoned_topics: tuple[str, ...] = ()
    channel_count: int = 0
    partition_count: int = 0  # the fork's topic partitions it holds; 0 upstream
    depth: int = 0
    message_count: int = 0
    client_count: int = 0
    error: HttpApiError | None = None


@dataclass(frozen=True)
class LookupdRow:
    address: str
    version: str = ""
    error: HttpApiError | None = None


def topic_row(topic: str, held: Sequence[tuple[str, TopicStats]]) -> TopicRow:
    """The topic summed over the nodes holding it: (HTTP address, its stats of the topic,
    one entry per partition on the fork)."""
    return TopicRow(
        topic=topic,
        nodes=_nodes_of(held),
        partitions=_partitions_of(stats for _, stats in held),
        counters=sum((Counters.of_topic(stats) for _, stats in held), Counters()),
        channels=tuple(sorted({c.channel_name for _, stats in held for c in stats.channels})),
        paused_nodes=tuple(sorted({address for address, stats in held if stats.paused})),
        e2e_processing_latency=merged_latency(stats.e2e_processing_latency for _, stats in held),
    )


def channel_row(topic: str, channel: str, held: Sequence[tuple[str, ChannelStats]]) -> ChannelRow:
    """The channel summed over the nodes (and the fork's partitions) holding it."""
    return ChannelRow(
        topic=topic,
        channel=channel,
        nodes=_nodes_of(held),
        partitions=_partitions_of(stats for _, stats in held),
        counters=sum((Counters.of_channel(stats) for _, stats in held), Counters()),
        paused_nodes=tuple(sorted({address for address, stats in held if stats.paused})),
        e2e_processing_latency=merged_latency(stats.e2e_processing_latency for _, stats in held),
    )


def _nodes_of(held: Iterable[tuple[str, object]]) -> tuple[str, ...]:
    """The HTTP addresses, each once (a fork's nsqd may hold several partitions), sorted."""
    return tuple(sorted({address for address, _ in held}))


def _partitions_of(held: Iterable[TopicStats | ChannelStats]) -> tuple[int, ...]:
    return tuple(sorted({s.partition for s in held if s.partition is not None}))


def with_rates(before: Sequence[R], after: Sequence[R], elapsed: float) -> list[R]:
    """`after`'s rows with their message rate since `before`, `elapsed` seconds earlier;
    None for a row that was not there, or whose count went back (an nsqd restarted)."""
    earlier = {row.key: row.counters for row in before}
    return [replace(row, message_rate=_rate(earlier.get(row.key), row, elapsed)) for row in after]


def _rate(earlier: Counters | None, row: TopicRow | ChannelRow, elapsed: float) -> float | None:
    rates = None if earlier is None else rates_between(earlier, row.counters, elapsed)
    return None if rates is None else rates.ingress


def _answered(polled: Iterable[NodeStats]) -> list[tuple[str, NsqdStats]]:
    """(address, stats) of the nodes that answered, by address."""
    answered = [(node.address, node.stats) for node in polled if node.stats is not None]
    return sorted(answered, key=lambda answer: answer[0])


def _failures(polled: Iterable[NodeStats]) -> list[HttpApiError]:
    return [node.error for node in polled if node.error is not None]


def _topics_held(polled: Iterable[NodeStats], topic: str) -> list[tuple[str, TopicStats]]:
    """The nodes holding `topic`, and their stats of it (one per partition on the
    fork), by address then partition."""
    held = [
        (address, found)
        for address, stats in _answered(polled)
        for found in stats.topics
        if found.topic_name == topic
    ]
    return sorted(held, key=_by_node_and_partition)


def _by_node_and_partition(held: tuple[str, TopicStats | ChannelStats]) -> tuple[str, int]:
    address, stats = held
    return address, -1 if stats.partition is None else stats.partition


def summarize_topics(polled: Sequence[NodeStats], known: Iterable[str] = ()) -> list[TopicRow]:
    """Every topic any node holds, and those `known` (to the lookupds) that none holds,
    each summed over its nodes; by name."""
    held: dict[str, list[tuple[str, TopicStats]]] = {topic: [] for topic in known}
    for address, stats in _answered(polled):
        for topic in stats.topics:
            held.setdefault(topic.topic_name, []).append((address, topic))
    return [topic_row(topic, nodes) for topic, nodes in sorted(held.items())]


def summarize_channels(
    topic: str, polled: Sequence[NodeStats], known: Iterable[str] = ()
) -> list[ChannelRow]:
    """Every channel of `topic` on any node, and those `known` that none has; by name."""
    held: dict[str, list[tuple[str, ChannelStats]]] = {channel: [] for channel in known}
    for address, stats in _topics_held(polled, topic):
        for channel in stats.channels:
            held.setdefault(channel.channel_name, []).append((address, channel))
    return [channel_row(topic, channel, nodes) for channel, nodes in sorted(held.items())]


def channels_held(
    polled: Sequence[NodeStats], topic: str, channel: str
) -> list[tuple[str, ChannelStats]]:
    """The nodes holding the channel, and their stats of it."""
    return [
        (address, found)
        for address, stats in _topics_held(polled, topic)
        for found in stats.channels
        if found.channel_name == channel
    ]


def node_rows(polled: Sequence[NodeStats], registered: Sequence[RegisteredNsqd]) -> list[NsqdRow]:
    """One row per polled nsqd, with what the lookupds said of it; by HTTP address."""
    known = {node.http_address: node for node in registered}
    return [_node_row(node, known.get(node.address)) for node in sorted(polled, key=_by_address)]


def _by_address(node: NodeStats) -> str:
    return node.address


def _node_row(node: NodeStats, registered: RegisteredNsqd | None) -> NsqdRow:
    row = NsqdRow(http_address=node.address, error=node.error)
    if registered is not None:
        row = replace(
            row,
            tcp_address=registered.tcp_address,
            hostname=registered.hostname,
            version=registered.version,
            topics=tuple(sorted(registered.topics)),
            tombstoned_topics=tuple(sorted(registered.tombstoned_topics)),
        )
    if node.stats is None:
        return row
    topics = node.stats.topics
    channels = [channel for topic in topics for channel in topic.channels]
    # A topic (and a channel) on several of the fork's partitions is counted once.
    return replace(
        row,
        version=node.stats.version,
        health=node.stats.health,
        topics=tuple(sorted({topic.topic_name for topic in topics})),
        channel_count=len({(t.topic_name, c.channel_name) for t in topics for c in t.channels}),
        partition_count=sum(topic.partition is not None for topic in topics),
        depth=sum(topic.depth for topic in topics),
        message_count=sum(topic.message_count for topic in topics),
        client_count=sum(channel.client_count for channel in channels),
    )


# -- views -------------------------------------------------------------------------------


class View(Protocol):
    """A view that rates can be added to (all but NodesView)."""

    def measured(self: V, before: V, elapsed: float) -> V:
        """This view with the message rates since `before`, taken `elapsed` s earlier."""
        ...


@dataclass(frozen=True)
class TopicsView:
    topics: tuple[TopicRow, ...]
    failures: tuple[HttpApiError, ...] = ()

    def measured(self, before: TopicsView, elapsed: float) -> TopicsView:
        return replace(self, topics=tuple(with_rates(before.topics, self.topics, elapsed)))


@dataclass(frozen=True)
class ChannelsView:
    topic: str
    channels: tuple[ChannelRow, ...]
    failures: tuple[HttpApiError, ...] = ()
    held: bool = True  # a lookupd or an nsqd knows the topic

    def measured(self, before: ChannelsView, elapsed: float) -> ChannelsView:
        return replace(self, channels=tuple(with_rates(before.channels, self.channels, elapsed)))


@dataclass(frozen=True)
class TopicView:
    """One topic: its total, each nsqd's row, and its channels summed over the nsqds."""

    total: TopicRow
    nodes: tuple[TopicRow, ...]
    channels: tuple[ChannelRow, ...]
    failures: tuple[HttpApiError, ...] = ()

    def measured(self, before: TopicView, elapsed: float) -> TopicView:
        return replace(
            self,
            total=with_rates([before.total], [self.total], elapsed)[0],
            nodes=tuple(with_rates(before.nodes, self.nodes, elapsed)),
            channels=tuple(with_rates(before.channels, self.channels, elapsed)),
        )


@dataclass(frozen=True)
class ChannelView:
    """One channel: its total, each nsqd's row, and every client connected to it."""

    total: ChannelRow
    nodes: tuple[ChannelRow, ...]
    clients: tuple[ClientRow, ...]
    failures: tuple[HttpApiError, ...] = ()

    def measured(self, before: ChannelView, elapsed: float) -> ChannelView:
        return replace(
            self,
            total=with_rates([before.total], [self.total], elapsed)[0],
            nodes=tuple(with_rates(before.nodes, self.nodes, elapsed)),
        )


@dataclass(frozen=True)
class NodesView:
    nodes: tuple[NsqdRow, ...]
    lookupds: tuple[LookupdRow, ...] = ()
    failures: tuple[HttpApiError, ...] = ()


def topic_view(topic: str, polled: Sequence[NodeStats]) -> TopicView:
    held = _topics_held(polled, topic)
    return TopicView(
        total=topic_row(topic, held),
        nodes=tuple(topic_row(topic, [node]) for node in held),
        channels=tuple(summarize_channels(topic, polled)),
        failures=tuple(_failures(polled)),
    )


def channel_view(topic: str, channel: str, polled: Sequence[NodeStats]) -> ChannelView:
    held = channels_held(polled, topic, channel)
    clients = [
        ClientRow(address, client, stats.partition)
        for address, stats in held
        for client in stats.clients
    ]
    return ChannelView(
        total=channel_row(topic, channel, held),
        nodes=tuple(channel_row(topic, channel, [node]) for node in held),
        clients=tuple(sorted(clients, key=_client_order)),
        failures=tuple(_failures(polled)),
    )


def _client_order(row: ClientRow) -> tuple[str, int, str, str]:
    partition = -1 if row.partition is None else row.partition
    return row.node, partition, row.client.remote_address, row.client.client_id


# -- gathering ---------------------------------------------------------------------------


async def gather_topics(client: httpx.AsyncClient, cluster: Cluster) -> TopicsView:
    """Every topic: those the lookupds know and those any nsqd holds."""
    return await discovery.run_plan(client, topics_plan(cluster))


def topics_plan(cluster: Cluster) -> Plan[TopicsView]:
    """gather_topics() as a plan, for any runner (`nsq topics` runs it on threads)."""
    known, lookupd_failures = yield from discovery.topics_all_plan(cluster.lookupd_http_addresses)
    addresses, find_failures = yield from find_nsqds_plan(cluster)
    polled = yield from poll_stats_plan(addresses)
    return TopicsView(
        topics=tuple(summarize_topics(polled, known)),
        failures=(*lookupd_failures, *find_failures, *_failures(polled)),
    )


async def gather_channels(client: httpx.AsyncClient, cluster: Cluster, topic: str) -> ChannelsView:
    """Every channel of a topic: those the lookupds know and those its nsqds have."""
    calls = [lookupd.channels(address, topic) for address in cluster.lookupd_http_addresses]
    answers, (addresses, find_failures) = await _both(
        discovery.send_each(client, calls), find_nsqds(client, cluster, topic)
    )
    known = {channel for answer in answers if isinstance(answer, list) for channel in answer}
    lookupd_failures = [answer for answer in answers if isinstance(answer, HttpApiError)]
    polled = await poll_stats(client, addresses, topic)
    return ChannelsView(
        topic=topic,
        channels=tuple(summarize_channels(topic, polled, known)),
        failures=(*lookupd_failures, *find_failures, *_failures(polled)),
        held=bool(known or _topics_held(polled, topic)),
    )


async def gather_topic(client: httpx.AsyncClient, cluster: Cluster, topic: str) -> TopicView:
    addresses, find_failures = await find_nsqds(client, cluster, topic)
    view = topic_view(topic, await poll_stats(client, addresses, topic))
    return replace(view, failures=(*find_failures, *view.failures))


async def gather_channel(
    client: httpx.AsyncClient, cluster: Cluster, topic: str, channel: str
) -> ChannelView:
    addresses, find_failures = await find_nsqds(client, cluster, topic)
    polled = await poll_stats(client, addresses, topic, channel, include_clients=True)
    view = channel_view(topic, channel, polled)
    return replace(view, failures=(*find_failures, *view.failures))


async def gather_nodes(client: httpx.AsyncClient, cluster: Cluster) -> NodesView:
    """Every nsqd (given, or registered with a lookupd) and every lookupd."""
    lookupds = cluster.lookupd_http_addresses
    (registered, find_failures), infos = await _both(
        discovery.nodes_all(client, lookupds),
        discovery.send_each(client, [lookupd.info(address) for address in lookupds]),
    )
    addresses = list(dict.fromkeys(cluster.nsqd_http_addresses)) or [
        node.http_address for node in registered
    ]
    polled = await poll_stats(client, addresses)
    return NodesView(
        nodes=tuple(node_rows(polled, registered)),
        lookupds=tuple(
            _lookupd_row(address, info) for address, info in zip(lookupds, infos, strict=True)
        ),
        failures=(*find_failures, *_failures(polled)),
    )


def _lookupd_row(address: str, info: lookupd.LookupdInfo | HttpApiError) -> LookupdRow:
    if isinstance(info, HttpApiError):
        return LookupdRow(address, error=info)
    return LookupdRow(address, version=info.version)


async def measured(gather: Callable[[], Awaitable[V]], interval: float) -> V:
    """The view gathered twice, `interval` seconds apart, with the message rates between."""
    import trio

    first_started = trio.current_time()
    before = await gather()
    await trio.sleep(interval)
    second_started = trio.current_time()
    after = await gather()
    # Start to start: both polls take about as long, so nsqd answered them this far apart.
    return after.measured(before, second_started - first_started)


async def _both(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Both awaited at once."""
    import trio

    results: dict[int, Any] = {}

    async def run(index: int, awaitable: Awaitable[Any]) -> None:
        results[index] = await awaitable

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, 0, first)
        nursery.start_soon(run, 1, second)
    return results[0], results[1]
