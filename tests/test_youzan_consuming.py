"""Consuming from the Youzan fork as it really behaves (issue 26, items 4 to 6), through
the tools (nsq_tail, nsq_to_file as subprocesses) and the Python API (open_consumer),
against the scripted fork (nsqtools.testing.youzan):

- a start position reads the partition asked for, although the fork's SUB_ADVANCED
  ignores its partition when it carries one; a message from another partition than the
  one asked for is an error, never a wrong label;
- the first message, sent twice by the first SUB_ORDERED on a channel created over
  HTTP, is handed out once, counted once for -n, and FIN'd once;
- a start position on an ordered topic is applied, or refused in one line.

Messages are stored after the channels that are to get them exist (created with the
topic, over HTTP, or by the consumer's own start position), so these hold whether a new
channel starts at the beginning of its partition or at its end.
"""

from __future__ import annotations

import http.client
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqtools.consumer import ConsumerOptions, open_consumer
from nsqtools.errors import NsqError
from nsqtools.protocol import youzan
from nsqtools.testing import wait_until
from nsqtools.testing.youzan import ForkTopic, StoredMessage, YouzanCluster
from tests.test_youzan import BIN, config, run, take, until

TOPICS = (
    # Four partitions on two nsqds: nsqd 0 leads partitions 0 and 2, nsqd 1 1 and 3.
    ForkTopic("multi", partitions=4, channels=("ch",)),
    ForkTopic("ordered", partitions=2, ordered=True, channels=("ch",)),
)


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    with YouzanCluster(TOPICS) as cluster:
        yield cluster


def tail(fork: YouzanCluster, topic: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """nsq_tail on the topic through the fork's lookupd, channel "tail" unless args
    name another."""
    channel = [] if any(arg.startswith("--channel=") for arg in args) else ["--channel=tail"]
    lookupd = f"--lookupd-http-address={fork.lookupd_http_address}"
    return run("nsq_tail", lookupd, f"--topic={topic}", *channel, *args)


def fill(fork: YouzanCluster, topic: str, partitions: range, count: int) -> None:
    """Bodies "p<partition>-<n>", n from 1."""
    for partition in partitions:
        for n in range(1, count + 1):
            fork.inject(topic, partition, f"p{partition}-{n}".encode())


def create_channel(fork: YouzanCluster, topic: str, partition: int, channel: str) -> None:
    """POST /channel/create to the partition's leader (partition p is led by nsqd p % 2)."""
    address = fork.nsqd_http_addresses[partition % 2]
    connection = http.client.HTTPConnection(address, timeout=5)
    try:
        query = f"topic={topic}&partition={partition}&channel={channel}"
        connection.request("POST", f"/channel/create?{query}")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def run_until_finished(
    fork: YouzanCluster, topic: str, channel: str, count: int, tool: str, *args: str
) -> subprocess.CompletedProcess[bytes]:
    """Run a consuming tool through the fork's nsqlookupd until `count` messages of the
    channel were FIN'd, then stop it (SIGTERM)."""
    process = subprocess.Popen(
        [
            str(BIN / tool),
            f"--lookupd-http-address={fork.lookupd_http_address}",
            f"--topic={topic}",
            f"--channel={channel}",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: len(fork.finished(topic, channel)) >= count, 20, "the FINs")
    finally:
        process.terminate()
        stdout, stderr = process.communicate(timeout=20)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    """The one error line a tool ended with (the lines before it are its log)."""
    lines = result.stderr.decode().splitlines()
    errors = [line for line in lines if line.startswith("nsq_tail: error: ")]
    assert errors == lines[-1:], result.stderr
    return errors[0]


def fins(fork: YouzanCluster, message: StoredMessage) -> int:
    return fork.commands().count(b"FIN " + message.id + b"\n")


# -- item 4: the partition asked for, and only it --------------------------------------


def test_nsq_tail_reads_the_partition_asked_for_from_a_start_position(
    fork: YouzanCluster,
) -> None:
    """nsqd 0 leads partitions 0 and 2: asked for 2 with SUB_ADVANCED's position, the
    fork would serve 0."""
    fill(fork, "multi", range(4), 2)
    result = tail(
        fork,
        "multi",
        "--partition=2",
        "--start-at=count:2",
        "--format={partition} {body}",
        "-n",
        "1",
    )
    assert (result.returncode, result.stdout) == (0, b"2 p2-2\n"), result.stderr


def test_nsq_tail_starts_every_partition_at_the_position(fork: YouzanCluster) -> None:
    fill(fork, "multi", range(4), 2)
    result = tail(
        fork,
        "multi",
        "--start-at=count:2",
        "--format={partition} {body}",
        "-n",
        "4",
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"{p} p{p}-2".encode() for p in range(4)]


async def test_a_start_position_is_set_on_the_partition_then_subscribed(
    fork: YouzanCluster,
) -> None:
    fill(fork, "multi", range(4), 3)
    options = ConsumerOptions(
        lookupd_http_addresses=[fork.lookupd_http_address],
        partition=2,
        start_at=youzan.parse_start_position("count:2"),
    )
    async with open_consumer("multi", "api", config(), options) as consumer:
        seen = await take(consumer, 2)
    stored = fork.stored("multi", 2)
    assert [(m.partition, m.body, m.queue_offset) for m in seen] == [
        (2, message.body, message.offset) for message in stored[1:]
    ]
    subscriptions = [c for c in fork.commands() if c.startswith(b"SUB")]
    assert subscriptions == [b"SUB_ADVANCED multi api 2\n"]


def test_a_start_position_the_fork_refuses_ends_nsq_tail_in_one_line(
    fork: YouzanCluster,
) -> None:
    """count: on an empty partition: the fork's commit log search fails."""
    result = tail(
        fork,
        "multi",
        "--partition=1",
        "--start-at=count:1",
    )
    assert (result.returncode, result.stdout) == (1, b"")
    line = error_line(result)
    assert "cannot start multi/tail partition 1 at msgcount:1" in line
    assert "commit log end of file" in line


async def test_a_start_position_is_set_once_not_again_on_a_new_leader(
    fork: YouzanCluster,
) -> None:
    first = [fork.inject("multi", 0, body) for body in (b"m1", b"m2")]
    options = ConsumerOptions(
        lookupd_http_addresses=[fork.lookupd_http_address],
        partition=0,
        start_at=youzan.parse_start_position("count:1"),
    )
    polling = config(lookupd_poll_interval=0.05)
    async with open_consumer("multi", "api", polling, options) as consumer:
        assert [m.body for m in await take(consumer, 2)] == [b"m1", b"m2"]
        await until(lambda: fork.finished("multi", "api") == [m.id for m in first], "FINs")
        fork.move_partition("multi", 0, 1)  # its consumer is disconnected
        fork.inject("multi", 0, b"m3")
        (after,) = await take(consumer, 1)
    assert after.body == b"m3"  # not m1 again: the channel was not moved back


def test_a_message_from_another_partition_is_an_error_not_a_wrong_label(
    fork: YouzanCluster,
) -> None:
    """Straight to nsqd 0 there is no HTTP API to set the position on: SUB_ADVANCED
    carries it, and the fork serves partition 0. The message is given back, not shown."""
    fill(fork, "multi", range(4), 1)
    to_nsqd_0 = [f"--nsqd-tcp-address={fork.nsqd_tcp_addresses[0]}", "--topic=multi"]
    result = run("nsq_tail", *to_nsqd_0, "--channel=tail", "--partition=2", "--start-at=count:1")
    assert (result.returncode, result.stdout) == (1, b"")
    line = error_line(result)
    assert "partition 2, was sent a message of partition 0" in line
    again = run("nsq_tail", *to_nsqd_0, "--channel=tail", "--partition=0", "-n", "1")
    assert (again.returncode, again.stdout) == (0, b"p0-1\n"), again.stderr


async def test_without_a_partition_each_message_is_labelled_by_its_id(
    fork: YouzanCluster,
) -> None:
    """A SUB naming no partition is served the one nsqd 1 leads first: partition 1."""
    stored = fork.inject("multi", 1, b"p1-1")
    options = ConsumerOptions(nsqd_tcp_addresses=[fork.nsqd_tcp_addresses[1]])
    async with open_consumer("multi", "ch", config(), options) as consumer:
        (message,) = await take(consumer, 1)
    assert (message.body, message.partition) == (stored.body, 1)


async def test_the_consumer_fails_on_a_message_of_another_partition(
    fork: YouzanCluster,
) -> None:
    fill(fork, "multi", range(4), 1)
    options = ConsumerOptions(
        nsqd_tcp_addresses=[fork.nsqd_tcp_addresses[1]],
        partition=3,
        start_at=youzan.parse_start_position("count:1"),
    )
    with pytest.raises(NsqError, match="partition 3, was sent a message of partition 1"):
        async with open_consumer("multi", "api", config(), options) as consumer:
            await take(consumer, 1)
    assert fork.finished("multi", "api") == []


# -- item 5: the duplicate first delivery ------------------------------------------------


async def test_the_duplicate_first_delivery_is_handed_out_and_finished_once(
    fork: YouzanCluster,
) -> None:
    create_channel(fork, "ordered", 1, "made")
    first, second = (fork.inject("ordered", 1, body) for body in (b"first", b"second"))
    options = ConsumerOptions(lookupd_http_addresses=[fork.lookupd_http_address], partition=1)
    async with open_consumer("ordered", "made", config(), options) as consumer:
        seen = await take(consumer, 2)
    assert [m.body for m in seen] == [b"first", b"second"]
    assert consumer.received == 2
    assert (fins(fork, first), fins(fork, second)) == (1, 1)  # no FIN for the copy


def test_nsq_tail_counts_the_duplicate_once(fork: YouzanCluster) -> None:
    create_channel(fork, "ordered", 0, "made")
    fork.inject("ordered", 0, b"first")
    fork.inject("ordered", 0, b"second")
    result = tail(
        fork,
        "ordered",
        "--channel=made",
        "--partition=0",
        "-n",
        "2",
    )
    assert (result.returncode, result.stdout) == (0, b"first\nsecond\n"), result.stderr
    assert b"E_FIN_FAILED" not in result.stderr


def test_nsq_to_file_writes_the_duplicate_once(fork: YouzanCluster, tmp_path: Path) -> None:
    create_channel(fork, "ordered", 1, "made")
    stored = [fork.inject("ordered", 1, body) for body in (b"first", b"second")]
    process = run_until_finished(
        fork, "ordered", "made", len(stored), "nsq_to_file", f"--output-dir={tmp_path}"
    )
    assert process.returncode == 0, process.stderr
    assert b"E_FIN_FAILED" not in process.stderr
    (archive,) = tmp_path.glob("ordered.*.log")
    assert archive.read_bytes() == b"first\nsecond\n"


# -- item 6: a start position on an ordered topic ----------------------------------------


def test_nsq_tail_applies_a_start_position_on_an_ordered_topic(fork: YouzanCluster) -> None:
    fill(fork, "ordered", range(2), 3)
    result = tail(
        fork,
        "ordered",
        "--partition=1",
        "--start-at=count:2",
        "-n",
        "2",
    )
    assert (result.returncode, result.stdout) == (0, b"p1-2\np1-3\n"), result.stderr
    assert b"E_FIN_FAILED" not in result.stderr


def test_nsq_tail_refuses_a_start_position_it_cannot_apply_on_an_ordered_topic(
    fork: YouzanCluster,
) -> None:
    """Straight to nsqd there is no HTTP API to set it on, and SUB_ORDERED takes none."""
    fill(fork, "ordered", range(2), 1)
    result = run(
        "nsq_tail",
        f"--nsqd-tcp-address={fork.nsqd_tcp_addresses[1]}",
        "--topic=ordered",
        "--channel=tail",
        "--partition=1",
        "--start-at=count:1",
    )
    assert (result.returncode, result.stdout) == (1, b"")
    line = error_line(result)
    assert "ordered topic ordered" in line and "start position" in line
