"""nsq_stat and `nsq topics/topic/channels/channel/nodes` against the scripted Youzan
fork's /stats (one entry per partition, `client_num`, no `message_bytes` or topic
`paused`), run as a user runs them: through --lookupd-http-address and
--nsqd-http-address. Partitions are summed per topic; where a view shows nodes, each
partition is a row of its own with a partition column.

Topic t has three partitions on two nsqds: nsqd 0 leads partitions 0 and 2, nsqd 1
partition 1. Each partition holds messages of its own number plus one, so that every
sum tells which partitions went into it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from nsqtools.testing import our_tool, wait_until
from nsqtools.testing.youzan import ForkTopic, YouzanCluster
from tests.test_youzan_fork_http import Consumer

TOPIC = "t"
CHANNEL = "ch"
WAIT = 15.0


@pytest.fixture(scope="module")
def fork() -> Iterator[YouzanCluster]:
    with YouzanCluster([ForkTopic(TOPIC, partitions=3, channels=(CHANNEL,))]) as cluster:
        for partition in range(3):
            for index in range(partition + 1):
                cluster.inject(TOPIC, partition, b"p%d-m%d" % (partition, index))
        yield cluster


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NSQ_")}
    return subprocess.run(
        [*our_tool(tool), *args],
        env=environment | {"COLUMNS": "200"},  # rich's tables: room for every column
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def lookupd(fork: YouzanCluster) -> str:
    return f"--lookupd-http-address={fork.lookupd_http_address}"


def nsq_json(*args: str) -> Any:
    result = run("nsq", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def topic_bytes(fork: YouzanCluster, *partitions: int) -> int:
    """The fork's topic depth: the bytes written to these partitions."""
    return sum(m.raw_size for p in partitions for m in fork.stored(TOPIC, p))


def stat_record(*args: str) -> dict[str, Any]:
    result = run("nsq_stat", f"--topic={TOPIC}", "--format=json", "--count=1", *args)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    record: dict[str, Any] = records[-1]
    return record


def test_nsq_stat_sums_the_partitions_through_the_lookupd(fork: YouzanCluster) -> None:
    record = stat_record(lookupd(fork), "--interval=10ms")
    topic, channel = record["rows"]
    assert record["failures"] == []
    assert (topic["channel"], channel["channel"]) == (None, CHANNEL)
    assert topic["message_count"] == 1 + 2 + 3
    assert topic["depth"] == topic_bytes(fork, 0, 1, 2)
    assert channel["depth"] == 6
    assert channel["client_count"] == 0
    nodes = [(node["address"], node["partition"], node["depth"]) for node in channel["nodes"]]
    first, second = fork.nsqd_http_addresses
    assert sorted(nodes) == sorted([(first, 0, 1), (first, 2, 3), (second, 1, 2)])


def test_nsq_stat_through_one_nsqd_sums_its_partitions(fork: YouzanCluster) -> None:
    address = fork.nsqd_http_addresses[0]
    record = stat_record(f"--nsqd-http-address={address}", f"--channel={CHANNEL}")
    (channel,) = record["rows"]
    assert channel["message_count"] == 1 + 3
    assert sorted(node["partition"] for node in channel["nodes"]) == [0, 2]


def test_nsq_stat_plain_report_sums_the_partitions(fork: YouzanCluster) -> None:
    result = run("nsq_stat", f"--topic={TOPIC}", lookupd(fork), "--count=1", "--interval=10ms")
    assert result.returncode == 0, result.stderr
    *_, topic_line, channel_line = result.stdout.splitlines()
    assert topic_line.split()[-3:] == ["6", "-", "t"]  # messages summed, no clients, name
    assert channel_line.split()[-3:] == ["6", "0", "t/ch"]  # messages, clients, name


def test_nsq_stat_table_has_a_row_per_partition(fork: YouzanCluster) -> None:
    args = [f"--topic={TOPIC}", f"--channel={CHANNEL}", lookupd(fork), "--format=table"]
    result = run("nsq_stat", *args, "--count=1", "--interval=10ms")
    assert result.returncode == 0, result.stderr
    first, second = fork.nsqd_http_addresses
    for node in (f"{first} p0", f"{first} p2", f"{second} p1"):
        assert node in result.stdout, result.stdout


def test_nsq_topics_sums_partitions_and_names_each_nsqd_once(fork: YouzanCluster) -> None:
    (row,) = nsq_json("topics", lookupd(fork))["topics"]
    assert row["topic"] == TOPIC
    assert row["nodes"] == sorted(fork.nsqd_http_addresses)
    assert row["partitions"] == [0, 1, 2]
    assert row["message_count"] == 6
    assert row["depth"] == topic_bytes(fork, 0, 1, 2)
    assert row["channels"] == [CHANNEL]


def test_nsq_topics_through_one_nsqd_sums_its_partitions(fork: YouzanCluster) -> None:
    address = fork.nsqd_http_addresses[0]
    (row,) = nsq_json("topics", f"--nsqd-http-address={address}")["topics"]
    assert (row["nodes"], row["partitions"]) == ([address], [0, 2])
    assert row["message_count"] == 1 + 3
    assert row["depth"] == topic_bytes(fork, 0, 2)


def test_nsq_topic_has_a_row_per_partition(fork: YouzanCluster) -> None:
    view = nsq_json("topic", TOPIC, lookupd(fork))
    rows = [(row["nodes"], row["partitions"], row["message_count"]) for row in view["nodes"]]
    first, second = sorted(fork.nsqd_http_addresses)
    by_partition = {0: 1, 1: 2, 2: 3}
    holder = dict(zip(range(3), fork.nsqd_http_addresses[:1] * 3, strict=True))
    holder[1] = fork.nsqd_http_addresses[1]
    expected = [([holder[p]], [p], by_partition[p]) for p in range(3)]
    assert sorted(rows) == sorted(expected)
    assert view["total"]["message_count"] == 6
    assert view["total"]["partitions"] == [0, 1, 2]
    assert view["total"]["nodes"] == [first, second]
    (channel,) = view["channels"]
    assert (channel["channel"], channel["depth"]) == (CHANNEL, 6)


def test_nsq_topic_table_has_a_partition_column(fork: YouzanCluster) -> None:
    result = run("nsq", "topic", TOPIC, lookupd(fork))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("nsqd"))
    assert header.split()[:3] == ["nsqd", "partition", "depth"]
    rows = [line.split()[:2] for line in lines if line.startswith("127.0.0.1:")]
    assert sorted(partition for _, partition in rows) == ["0", "1", "2"]
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[1:4] == ["0", "1", "2"]


def test_nsq_channel_reads_client_num_and_lists_clients_by_partition(
    fork: YouzanCluster,
) -> None:
    consumer = Consumer(fork.nsqd_tcp_addresses[1], TOPIC, CHANNEL, 1)
    try:
        view: dict[str, Any] = {}

        def one_client() -> bool:
            view.update(nsq_json("channel", TOPIC, CHANNEL, lookupd(fork)))
            return bool(view["total"]["client_count"] == 1)

        wait_until(one_client, WAIT, "the consumer listed")
        (client,) = view["clients"]
        assert (client["node"], client["partition"]) == (fork.nsqd_http_addresses[1], 1)
        assert client["client_id"] == "reader"
        counts = {tuple(row["partitions"]): row["client_count"] for row in view["nodes"]}
        assert counts == {(0,): 0, (1,): 1, (2,): 0}
        assert view["total"]["depth"] == 6
    finally:
        consumer.sock.close()
        # The other tests share the cluster and count no client.
        wait_until(lambda: fork.connections() == 0, WAIT, "the consumer gone")


def test_nsq_channels_sums_the_partitions(fork: YouzanCluster) -> None:
    (row,) = nsq_json("channels", TOPIC, lookupd(fork))["channels"]
    assert (row["channel"], row["depth"], row["message_count"]) == (CHANNEL, 6, 6)
    assert row["partitions"] == [0, 1, 2]


def test_nsq_nodes_counts_topics_once_and_their_partitions(fork: YouzanCluster) -> None:
    nodes = {node["http_address"]: node for node in nsq_json("nodes", lookupd(fork))["nodes"]}
    first = nodes[fork.nsqd_http_addresses[0]]
    second = nodes[fork.nsqd_http_addresses[1]]
    assert (first["topics"], first["partition_count"], first["channel_count"]) == ([TOPIC], 2, 1)
    assert (second["topics"], second["partition_count"], second["channel_count"]) == ([TOPIC], 1, 1)
    assert first["message_count"] == 1 + 3
    assert first["health"] == "OK"


def test_nsq_nodes_through_the_nsqd_address(fork: YouzanCluster) -> None:
    address = fork.nsqd_http_addresses[0]
    result = run("nsq", "nodes", f"--nsqd-http-address={address}")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()[1:3]
    assert header.split()[5:7] == ["topics", "partitions"]
    assert row.split()[3:5] == ["1", "2"]  # after address, version and health
