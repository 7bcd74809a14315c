"""Summing nsqds' /stats into the inspection views (nsqtools.inspection, sans-IO): topics
and channels over the nodes holding them, each node's row beside the total, paused on
some nodes only, e2e latency, rates between two polls, nodes merged with what the
lookupds say."""

from __future__ import annotations

from dataclasses import replace

from nsqtools.cluster import NodeStats
from nsqtools.httpapi import HttpApiError
from nsqtools.httpapi.lookupd import RegisteredNsqd
from nsqtools.httpapi.nsqd import (
    ChannelStats,
    ClientStats,
    E2eLatency,
    NsqdStats,
    Percentile,
    TopicStats,
)
from nsqtools.inspection import (
    channel_view,
    node_rows,
    summarize_channels,
    summarize_topics,
    topic_view,
    with_rates,
)
from nsqtools.stats.counters import Counters, merged_latency

FIRST, SECOND, DOWN = "127.0.0.1:4151", "127.0.0.1:4251", "127.0.0.1:4351"
REFUSED = HttpApiError("nsqd", DOWN, "GET /stats: connection refused")


def client(address: str) -> ClientStats:
    return ClientStats(
        client_id="c", hostname="box", version="V2", remote_address=address,
        user_agent="nsq_tail/1.0", state=3, ready_count=10, in_flight_count=2,
        message_count=5, finish_count=3, requeue_count=0, connect_ts=0, sample_rate=0,
        tls=False, snappy=True, deflate=False, authed=False, auth_identity="", pub_counts={},
    )  # fmt: skip


def channel(
    name: str, depth: int = 0, messages: int = 0, paused: bool = False, **counts: int
) -> ChannelStats:
    return ChannelStats(
        channel_name=name, depth=depth, backend_depth=counts.get("backend_depth", 0),
        in_flight_count=counts.get("in_flight", 0), deferred_count=counts.get("deferred", 0),
        message_count=messages, requeue_count=counts.get("requeued", 0),
        timeout_count=counts.get("timed_out", 0), client_count=counts.get("clients", 0),
        clients=(), paused=paused, e2e_processing_latency=None,
    )  # fmt: skip


def topic(name: str, *channels: ChannelStats, depth: int = 0, messages: int = 0) -> TopicStats:
    return TopicStats(
        topic_name=name, depth=depth, backend_depth=0, message_count=messages,
        message_bytes=0, paused=False, channels=channels, e2e_processing_latency=None,
    )  # fmt: skip


def node(address: str, *topics: TopicStats) -> NodeStats:
    stats = NsqdStats(version="1.3.0", health="OK", start_time=0, topics=topics, producers=())
    return NodeStats(address, stats, None)


def latency(count: int, **values: float) -> E2eLatency:
    """values: p50=..., p99=... in nanoseconds."""
    percentiles = tuple(Percentile(float(q[1:]) / 100, v) for q, v in values.items())
    return E2eLatency(count, percentiles)


def cluster() -> list[NodeStats]:
    """events on both nsqds (archive on both, live on the first), other on the second."""
    return [
        node(
            SECOND,
            topic("events", channel("archive", 3, 30, paused=True), depth=1, messages=30),
            topic("other", channel("c")),
        ),
        node(
            FIRST,
            topic("events", channel("archive", 5, 50), channel("live", 7, 50), messages=50),
        ),
        NodeStats(DOWN, None, REFUSED),
    ]


def test_topics_are_summed_over_the_nsqds_holding_them_by_name() -> None:
    events, other, unheld = summarize_topics(cluster(), known=["unheld", "events"])
    assert (events.topic, events.nodes) == ("events", (FIRST, SECOND))
    assert (events.counters.depth, events.counters.message_count) == (1, 80)
    assert events.channels == ("archive", "live")
    assert (other.topic, other.nodes, other.channels) == ("other", (SECOND,), ("c",))
    assert (unheld.topic, unheld.nodes, unheld.counters.message_count) == ("unheld", (), 0)


def test_channels_are_summed_with_every_count_and_where_they_are_paused() -> None:
    polled = [
        node(FIRST, topic("events", channel("archive", 5, 50, in_flight=2, deferred=1))),
        node(
            SECOND,
            topic(
                "events",
                channel("archive", 3, 30, paused=True, backend_depth=2, requeued=4, timed_out=1,
                        clients=2),
            ),
        ),
    ]  # fmt: skip
    [archive, known] = summarize_channels("events", polled, known=["known-to-lookupd"])
    assert archive.counters == Counters(
        depth=8, backend_depth=2, in_flight_count=2, deferred_count=1, message_count=80,
        requeue_count=4, timeout_count=1, client_count=2, paused=True,
    )  # fmt: skip
    assert (archive.counters.memory_depth, archive.paused_nodes) == (6, (SECOND,))
    assert (known.channel, known.nodes) == ("known-to-lookupd", ())


def test_a_topic_in_detail_has_each_nodes_row_and_the_total_and_a_node_down_apart() -> None:
    view = topic_view("events", cluster())
    assert [row.nodes for row in view.nodes] == [(FIRST,), (SECOND,)]
    assert [row.counters.message_count for row in view.nodes] == [50, 30]
    assert (view.total.nodes, view.total.counters.message_count) == ((FIRST, SECOND), 80)
    assert [row.channel for row in view.channels] == ["archive", "live"]
    assert view.failures == (REFUSED,)


def test_a_channel_in_detail_skips_the_nodes_without_it_and_lists_their_clients() -> None:
    with_clients = replace(
        channel("archive", 5), clients=(client("10.0.0.2:1"), client("10.0.0.1:1"))
    )
    polled = [
        node(SECOND, topic("events", channel("live"))),
        node(FIRST, topic("events", with_clients)),
    ]  # fmt: skip
    view = channel_view("events", "archive", polled)
    assert [row.nodes for row in view.nodes] == [(FIRST,)]
    assert view.total.counters.depth == 5
    assert [row.client.remote_address for row in view.clients] == ["10.0.0.1:1", "10.0.0.2:1"]
    assert {row.node for row in view.clients} == {FIRST}


def test_latency_over_nodes_adds_counts_and_keeps_each_quantiles_highest() -> None:
    merged = merged_latency([latency(10, p50=100, p99=900), None, latency(5, p50=300, p99=400)])
    assert merged == E2eLatency(15, (Percentile(0.5, 300), Percentile(0.99, 900)))


def test_latency_of_nodes_that_measured_nothing_yet_has_no_percentiles() -> None:
    assert merged_latency([latency(0, p50=0)]) == E2eLatency(0, ())
    assert merged_latency([None, None]) is None


def test_rates_are_the_message_counts_difference_over_the_time_between_polls() -> None:
    before = summarize_topics([node(FIRST, topic("events", messages=100), topic("gone"))])
    after = summarize_topics(
        [node(FIRST, topic("events", messages=300)), node(SECOND, topic("new", messages=5))]
    )
    rates = {row.topic: row.message_rate for row in with_rates(before, after, elapsed=2.0)}
    assert rates == {"events": 100.0, "new": None}


def test_no_rate_when_the_count_went_back_or_the_nodes_changed() -> None:
    before = summarize_topics([node(FIRST, topic("events", messages=100))])
    restarted = summarize_topics([node(FIRST, topic("events", messages=10))])
    spread = summarize_topics(
        [node(FIRST, topic("events", messages=200)), node(SECOND, topic("events"))]
    )
    assert with_rates(before, restarted, 1.0)[0].message_rate is None
    assert with_rates(before, spread, 1.0)[0].message_rate is None


def test_nodes_merge_the_lookupds_record_with_the_nodes_stats() -> None:
    registered = [
        RegisteredNsqd("127.0.0.1", "box", 4150, 4151, "1.3.0", ("events",), ("events",)),
        RegisteredNsqd("127.0.0.1", "down", 4350, 4351, "1.2.1", ("old",), ()),
    ]
    up, down = node_rows(cluster()[1:], registered)
    assert (up.http_address, up.tcp_address, up.hostname) == (FIRST, "127.0.0.1:4150", "box")
    assert (up.health, up.topics, up.tombstoned_topics) == ("OK", ("events",), ("events",))
    assert (up.channel_count, up.message_count, up.error) == (2, 50, None)
    assert (down.version, down.topics, down.health, down.error) == ("1.2.1", ("old",), "", REFUSED)
