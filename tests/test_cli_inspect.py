"""`nsq topics`, `nsq channels`, `nsq nodes`, `nsq topic`, `nsq channel` run as a user
runs them, against two real nsqds behind a lookupd: --json parsed and checked, the
plain table a pipe gets, the rich layout through a recorded console, a node that does
not answer named with exit status 1 while the others are shown.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import trio
from rich.console import Console

from nsqtools.cluster import Cluster as Where
from nsqtools.commands.cluster_cli import print_tables
from nsqtools.commands.inspect.channel import channel_tables, clients_table
from nsqtools.commands.inspect.topic import topic_tables
from nsqtools.httpapi import lookupd as lookupd_api
from nsqtools.httpapi.nsqd import ClientStats
from nsqtools.inspection import ClientRow, gather_channel, gather_topic
from nsqtools.testing import Nsqd, Nsqlookupd, imported_packages, our_tool, running, wait_until
from nsqtools.testing.cluster import ask
from tests.conftest import Cluster, LocalNsq

T = TypeVar("T")

TOPIC = "events"
CHANNELS = ("archive", "live")
WAIT = 15.0


def nsq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Our `nsq` with stdin not a terminal and none of the NSQ_ address variables set
    but those given."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NSQ_")}
    return subprocess.run(
        [*our_tool("nsq"), *args],
        env=environment | (env or {}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def nsq_json(*args: str) -> Any:
    result = nsq(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def lookupd_flag(cluster: Cluster) -> str:
    return f"--lookupd-http-address={cluster.lookupd.http_address}"


def wait_for_channels(lookupd: Nsqlookupd, topic: str, channels: tuple[str, ...]) -> None:
    """nsqd registers a channel with its lookupds in the background, as it does a topic."""

    def registered() -> bool:
        known = ask(lookupd_api.channels(lookupd.http_address, topic))
        return set(channels) <= set(known)

    wait_until(registered, WAIT, f"channels {channels} of {topic} registered")


def wait_for_depth(nsqd: Nsqd, topic: str, channel: str, depth: int) -> None:
    """Wait until nsqd has copied the topic's messages into the channel."""
    wait_until(
        lambda: nsqd.channel_stats(topic, channel).depth == depth,
        WAIT,
        f"{depth} messages in {channel} of {topic} on {nsqd.name}",
    )


def populate(cluster: Cluster) -> tuple[Nsqd, Nsqd]:
    """events with archive and live on both nsqds (3 messages on the first, 2 on the
    second), other with audit on the second only; all registered with the lookupd."""
    first, second = cluster.nsqds
    for nsqd, count in ((first, 3), (second, 2)):
        nsqd.create_channels(TOPIC, *CHANNELS)
        nsqd.publish_many(TOPIC, [b"m"] * count)
        for channel in CHANNELS:
            wait_for_depth(nsqd, TOPIC, channel, count)
    second.create_channels("other", "audit")
    cluster.lookupd.wait_for_topic(TOPIC, [first, second])
    cluster.lookupd.wait_for_topic("other", [second])
    wait_for_channels(cluster.lookupd, TOPIC, CHANNELS)
    wait_for_channels(cluster.lookupd, "other", ("audit",))
    return first, second


def gathered(job: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with httpx.AsyncClient(timeout=5) as client:
            return await job(client)

    return trio.run(main)


def recorded(tables: Any) -> list[str]:
    """The tables as a terminal shows them, as text lines."""
    console = Console(record=True, width=200, force_terminal=True)
    print_tables(tables, console)
    return console.export_text().splitlines()


# -- nsq topics ------------------------------------------------------------------------


def test_topics_are_every_topic_summed_over_its_nsqds(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    ask(lookupd_api.create_topic(cluster2.lookupd.http_address, "planned"))
    document = nsq_json("topics", lookupd_flag(cluster2))
    topics = {row["topic"]: row for row in document["topics"]}
    assert list(topics) == ["events", "other", "planned"]
    events = topics["events"]
    assert events["nodes"] == sorted([first.http_address, second.http_address])
    assert (events["message_count"], events["depth"], events["memory_depth"]) == (5, 0, 0)
    assert (events["channels"], events["paused"], events["message_rate"]) == (
        list(CHANNELS),
        False,
        None,
    )
    assert (topics["other"]["nodes"], topics["other"]["channels"]) == (
        [second.http_address],
        ["audit"],
    )
    assert (topics["planned"]["nodes"], topics["planned"]["message_count"]) == ([], 0)
    assert document["failures"] == []


def test_topics_piped_are_one_aligned_line_per_topic(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    result = nsq("topics", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "topic",
        "depth",
        "memory",
        "disk",
        "messages",
        "channels",
        "paused",
        "nsqds",
    ]
    both = sorted([first.http_address, second.http_address])
    assert [row.split() for row in rows] == [
        ["events", "0", "0", "0", "5", "2", *both],
        ["other", "0", "0", "0", "0", "1", second.http_address],
    ]
    # numbers right-aligned under their headers
    assert all(row[header.index("messages") + len("messages") - 1] != " " for row in rows)


def test_topics_piped_imports_neither_rich_nor_an_async_http_client(cluster2: Cluster) -> None:
    """rich, httpx, trio and h11 cost a piped `nsq topics` some 100 ms of its start-up
    and give it nothing: nsqd's answers are plain, the table is lines."""
    populate(cluster2)
    python, *code = our_tool("nsq")
    argv = [python, "-X", "importtime", *code, "topics", lookupd_flag(cluster2)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert "events" in result.stdout
    assert imported_packages(result.stderr).isdisjoint({"rich", "httpx", "trio", "h11"})


def test_topics_with_an_interval_have_rates(cluster2: Cluster) -> None:
    populate(cluster2)
    document = nsq_json("topics", lookupd_flag(cluster2), "--interval=0.2s")
    assert {row["topic"]: row["message_rate"] for row in document["topics"]} == {
        "events": 0.0,
        "other": 0.0,
    }
    piped = nsq("topics", lookupd_flag(cluster2), "--interval=0.2s").stdout.splitlines()
    assert "rate/s" in piped[0].split()
    assert piped[1].split()[5] == "0.0"


def test_the_addresses_come_from_the_environment_too(cluster2: Cluster) -> None:
    populate(cluster2)
    lookupd = nsq(
        "topics", "--json", env={"NSQ_LOOKUPD_HTTP_ADDRESS": cluster2.lookupd.http_address}
    )
    nsqd = nsq("topics", "--json", env={"NSQ_NSQD_HTTP_ADDRESS": cluster2.nsqds[1].http_address})
    assert [row["topic"] for row in json.loads(lookupd.stdout)["topics"]] == ["events", "other"]
    assert [row["topic"] for row in json.loads(nsqd.stdout)["topics"]] == ["events", "other"]


def test_without_an_address_it_says_which_to_give() -> None:
    result = nsq("topics")
    assert result.returncode == 1
    assert result.stderr == (
        "nsq: error: --nsqd-http-address or --lookupd-http-address is required "
        "(or set NSQ_NSQD_HTTP_ADDRESS or NSQ_LOOKUPD_HTTP_ADDRESS)\n"
    )


def test_a_frozen_nsqd_is_named_and_the_others_are_shown(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    with second.frozen():
        result = nsq("topics", lookupd_flag(cluster2), "--json", "--http-timeout=0.3s")
    assert result.returncode == 1
    assert result.stderr == f"nsq: error: nsqd {second.http_address}: GET /stats: timed out\n"
    document = json.loads(result.stdout)
    events = next(row for row in document["topics"] if row["topic"] == TOPIC)
    assert (events["nodes"], events["message_count"]) == ([first.http_address], 3)
    assert document["failures"] == [
        {"server": "nsqd", "address": second.http_address, "error": "GET /stats: timed out"}
    ]


def test_a_stopped_nsqd_given_by_address_is_named(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    second.kill()
    result = nsq(
        "topics", f"--nsqd-http-address={first.http_address}",
        f"--nsqd-http-address={second.http_address}",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        f"nsq: error: nsqd {second.http_address}: GET /stats: connection refused\n"
    )
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["topic", "events"]


def test_with_no_node_answering_only_the_error_is_said(cluster2: Cluster) -> None:
    """No header on stdout before the error: nothing was learnt, and `nsq topics | ...`
    should read nothing."""
    lookupd = lookupd_flag(cluster2)
    cluster2.lookupd.stop()
    result = nsq("topics", lookupd)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"nsq: error: nsqlookupd {cluster2.lookupd.http_address}: GET /topics, GET /nodes: "
        "connection refused\n"
    )


# -- nsq channels ----------------------------------------------------------------------


def test_channels_of_a_topic_summed_over_its_nsqds(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    ask(lookupd_api.create_channel(cluster2.lookupd.http_address, TOPIC, "planned"))
    document = nsq_json("channels", TOPIC, lookupd_flag(cluster2))
    assert document["topic"] == TOPIC
    channels = {row["channel"]: row for row in document["channels"]}
    assert list(channels) == ["archive", "live", "planned"]
    archive = channels["archive"]
    assert archive["nodes"] == sorted([first.http_address, second.http_address])
    counts = ("depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count")
    assert [archive[count] for count in counts] == [5, 0, 0, 0, 0]
    assert (archive["message_count"], archive["client_count"], archive["paused"]) == (5, 0, False)
    assert channels["planned"]["nodes"] == []


# -- nsq nodes -------------------------------------------------------------------------


def test_nodes_are_every_nsqd_and_lookupd_with_the_tombstones(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    producer = next(
        node
        for node in ask(lookupd_api.nodes(cluster2.lookupd.http_address))
        if node.http_address == second.http_address
    )
    ask(lookupd_api.tombstone_topic_producer(cluster2.lookupd.http_address, "other", producer))
    document = nsq_json("nodes", lookupd_flag(cluster2))
    nodes = {node["http_address"]: node for node in document["nodes"]}
    assert list(nodes) == sorted([first.http_address, second.http_address])
    one, two = nodes[first.http_address], nodes[second.http_address]
    assert (one["tcp_address"], one["version"], one["health"]) == (first.tcp_address, "1.3.0", "OK")
    assert (one["topics"], one["channel_count"], one["message_count"]) == ([TOPIC], 2, 3)
    assert (two["topics"], two["tombstoned_topics"]) == ([TOPIC, "other"], ["other"])
    assert one["tombstoned_topics"] == []
    assert document["lookupds"] == [
        {"address": cluster2.lookupd.http_address, "version": "1.3.0", "error": None}
    ]
    piped = nsq("nodes", lookupd_flag(cluster2)).stdout.splitlines()
    second_row = next(line for line in piped if line.startswith(second.http_address))
    assert second_row.split()[-1] == "other"


# -- nsq topic -------------------------------------------------------------------------


def test_a_topic_in_detail_has_each_nsqd_and_the_total(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    document = nsq_json("topic", TOPIC, lookupd_flag(cluster2))
    assert [row["nodes"] for row in document["nodes"]] == sorted(
        [[first.http_address], [second.http_address]]
    )
    by_node = {row["nodes"][0]: row["message_count"] for row in document["nodes"]}
    assert by_node == {first.http_address: 3, second.http_address: 2}
    assert document["total"]["message_count"] == 5
    assert [row["channel"] for row in document["channels"]] == list(CHANNELS)


def test_a_topic_in_detail_on_a_terminal(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    where = Where(lookupd_http_addresses=(cluster2.lookupd.http_address,))
    view = gathered(lambda client: gather_topic(client, where, TOPIC))
    lines = recorded(topic_tables(view, rates=False))
    assert lines[0].strip() == "topic events"
    assert lines[2].split() == ["nsqd", "depth", "memory", "disk", "messages", "channels", "paused"]
    rows = [line.split() for line in lines[4:7]]
    assert rows == [
        [address, "0", "0", "0", str(count), "2"]
        for address, count in sorted([(first.http_address, 3), (second.http_address, 2)])
    ] + [["total", "0", "0", "0", "5", "2"]]
    channels_title = lines.index(next(line for line in lines if line.strip() == "channels"))
    assert lines[channels_title + 2].split()[:2] == ["channel", "depth"]


def test_an_unknown_topic_is_an_error(cluster2: Cluster) -> None:
    populate(cluster2)
    result = nsq("topic", "nosuch", lookupd_flag(cluster2))
    assert (result.returncode, result.stderr) == (1, "nsq: error: no nsqd has topic nosuch\n")


def test_the_channels_of_an_unknown_topic_are_an_error(cluster2: Cluster) -> None:
    """Main printed an empty table and exited 0."""
    populate(cluster2)
    result = nsq("channels", "nosuch", lookupd_flag(cluster2))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "nsq: error: no nsqd has topic nosuch\n"


def test_an_invalid_name_is_an_error(cluster2: Cluster) -> None:
    result = nsq("channel", TOPIC, "bad name", lookupd_flag(cluster2))
    assert result.returncode == 1
    assert result.stderr.startswith("nsq: error: ") and result.stderr.count("\n") == 1


# -- nsq channel -----------------------------------------------------------------------


def test_a_channel_in_detail_lists_its_clients(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    tail = [
        *our_tool("nsq_tail"), f"--nsqd-tcp-address={first.tcp_address}",
        f"--topic={TOPIC}", "--channel=archive", "--snappy", "--max-in-flight=7",
    ]  # fmt: skip
    with running(tail):
        wait_until(
            lambda: [c.ready_count for c in first.channel_stats(TOPIC, "archive").clients] == [7],
            WAIT,
            "nsq_tail connected with RDY 7",
        )
        document = nsq_json("channel", TOPIC, "archive", lookupd_flag(cluster2))
    [client] = document["clients"]
    assert client["node"] == first.http_address
    assert client["user_agent"].startswith("nsq_tail/")
    assert (client["snappy"], client["deflate"], client["tls"], client["ready_count"]) == (
        True,
        False,
        False,
        7,
    )
    assert (document["total"]["client_count"], document["total"]["message_count"]) == (1, 5)
    assert [row["client_count"] for row in document["nodes"]] == [
        1 if address == first.http_address else 0
        for address in sorted([first.http_address, second.http_address])
    ]


def test_cluster_text_is_never_read_as_markup() -> None:
    """A client's user agent is the client's to choose: `[/]` in it, which rich would
    read as a closing tag (and fail), shows as it is on a terminal."""
    client = ClientStats(
        client_id="c", hostname="h[bold]", version="V2", remote_address="127.0.0.1:1",
        user_agent="evil/[/] [red]x[/red]", state=3, ready_count=1, in_flight_count=0,
        message_count=0, finish_count=0, requeue_count=0, connect_ts=0, sample_rate=0,
        tls=False, snappy=False, deflate=False, authed=False, auth_identity="", pub_counts={},
    )  # fmt: skip
    lines = recorded([clients_table([ClientRow("127.0.0.1:4151", client)], now=0)])
    [row] = [line for line in lines if "127.0.0.1:4151" in line]
    assert "evil/[/] [red]x[/red]" in row
    assert "h[bold]" in row


def test_a_channel_shows_the_e2e_latency_nsqd_measures(local_nsq: LocalNsq) -> None:
    nsqd = local_nsq.nsqd("e2e", extra_args=["--e2e-processing-latency-percentile=0.5,0.99"])
    nsqd.create_channels(TOPIC, "archive")
    nsqd.publish_many(TOPIC, [b"m"] * 10)
    nsqd.read(TOPIC, 10, channel="archive")
    wait_until(lambda: _latency_count(nsqd) == 10, WAIT, "nsqd to measure the 10 messages' latency")
    where = Where(nsqd_http_addresses=(nsqd.http_address,))
    view = gathered(lambda client: gather_channel(client, where, TOPIC, "archive"))
    lines = recorded(channel_tables(view, rates=False, now=0))
    header = lines[2].split()
    assert header[-2:] == ["p50", "p99"]
    total = next(line.split() for line in lines if line.split()[:1] == ["total"])
    assert all(cell.endswith(("ns", "µs", "ms", "s")) for cell in total[-2:])
    document = nsq_json("channel", TOPIC, "archive", f"--nsqd-http-address={nsqd.http_address}")
    latency = document["total"]["e2e_processing_latency"]
    assert latency["count"] == 10
    assert [p["quantile"] for p in latency["percentiles"]] == [0.5, 0.99]
    assert all(p["value"] > 0 for p in latency["percentiles"])


def _latency_count(nsqd: Nsqd) -> int:
    latency = nsqd.channel_stats(TOPIC, "archive").e2e_processing_latency
    return 0 if latency is None else latency.count
