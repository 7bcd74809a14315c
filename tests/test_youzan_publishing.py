"""Publishing to the Youzan fork through its partitions (nsqtools.producer with
nsqtools.partitions, and to_nsq), against the scripted fork: topics looked up as they
are first published to, a leader move waited through, back pressure retried, the
round robin's start, and the error lines.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.partitions import PartitionError, Partitions
from nsqtools.producer import PublishOutcome, open_producer
from nsqtools.testing import wait_until
from nsqtools.testing.youzan import ForkTopic, YouzanCluster
from tests.test_youzan import run

BIN = Path(sys.executable).parent
CHANNEL = "ch"
# Bounds a test's whole run: a publish that hangs fails the test instead.
DEADLINE = 30


def config(**settings: Any) -> ClientConfig:
    return dataclasses.replace(ClientConfig(), **settings)


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    topics = [
        ForkTopic("yz", partitions=2, channels=(CHANNEL,)),
        ForkTopic("other", partitions=2, channels=(CHANNEL,)),
        ForkTopic("solo", partitions=1, channels=(CHANNEL,)),
    ]
    with YouzanCluster(topics) as cluster:
        yield cluster


def bodies(fork: YouzanCluster, topic: str) -> list[bytes]:
    return sorted(message.body for message in fork.stored(topic))


# -- item 2: a topic not looked up, and leaving the block --------------------------------


async def test_a_topic_not_looked_up_is_looked_up_when_first_published(
    fork: YouzanCluster,
) -> None:
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer([], config(), partitions=partitions) as producer,
        ):
            await producer.publish("yz", b"awaited")
            await producer.put_many("other", [b"put-1", b"put-2"])
    assert bodies(fork, "yz") == [b"awaited"]
    assert bodies(fork, "other") == [b"put-1", b"put-2"]


async def test_an_unknown_topic_fails_its_own_publishes_and_the_block_returns(
    fork: YouzanCluster,
) -> None:
    outcomes: list[PublishOutcome] = []
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer(
                [], config(), partitions=partitions, on_outcome=outcomes.append
            ) as producer,
        ):
            with pytest.raises(PartitionError, match="nope"):
                await producer.publish("nope", b"awaited")
            await producer.put_many("nope", [b"put"], tokens=["t"])
            await producer.publish("yz", b"fine")
    awaited, put = [outcome for outcome in outcomes if outcome.error is not None]
    assert (awaited.tokens, put.tokens) == (None, ["t"])
    assert "cannot look up topic nope" in str(put.error)
    assert producer.failed == 2 and producer.acknowledged == 1
    assert bodies(fork, "yz") == [b"fine"]


# -- item 3: a leader move loses nothing ---------------------------------------------------

MOVE_WINDOW = 1.0  # within what a running fork took ("0.5-1.4 s")
SPARK_WAIT = 90.0  # for Spark's micro-batches on two busy cores


async def test_a_producer_holds_its_batches_through_a_leader_move(fork: YouzanCluster) -> None:
    """The move starts before anything is sent: every PUB meets it, and waits it out."""
    outcomes: list[PublishOutcome] = []
    records = [f"r{n:03d}".encode() for n in range(100)]
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer([], config(), partitions=partitions, on_outcome=outcomes.append) as pub,
        ):
            await partitions.refresh("solo")
            fork.move_partition("solo", 0, 1, window=MOVE_WINDOW)
            await pub.put_many("solo", records[:50])
            await pub.flush()  # sent, refused, held
            await pub.put_many("solo", records[50:])
    assert not [outcome for outcome in outcomes if outcome.error is not None]
    assert [message.body for message in fork.stored("solo")] == records  # in order too
    assert not fork.moving("solo", 0)


async def test_a_partition_left_out_by_a_lookup_during_a_move_gets_its_turns_again(
    fork: YouzanCluster,
) -> None:
    """Looked up while partition 1 moved (access=w lists partition 0 alone), the round
    robin is not left without partition 1 for good once the move is over."""
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer([], config(), partitions=partitions) as producer,
        ):
            fork.move_partition("yz", 1, 0, window=0.2)
            await partitions.refresh("yz")
            assert sorted(partitions.lookup("yz").partitions) == [0]
            while fork.moving("yz", 1):
                await trio.sleep(0.01)
            sent = 0
            while not fork.stored("yz", 1):
                await producer.publish("yz", b"m%d" % sent)
                sent += 1
                await trio.sleep(0.01)
    assert len(fork.stored("yz")) == sent


async def test_a_partition_without_a_leader_fails_after_partition_wait(
    fork: YouzanCluster,
) -> None:
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config(partition_wait=0.3)) as partitions,
            open_producer([], config(partition_wait=0.3), partitions=partitions) as producer,
        ):
            await partitions.refresh("solo")
            fork.move_partition("solo", 0, 1, window=600)
            with pytest.raises(PartitionError, match="waited 300ms"):
                await producer.publish("solo", b"never")
            await producer.publish("yz", b"fine")  # other topics go on
    assert fork.stored("solo") == []


def test_to_nsq_publishes_every_record_through_a_leader_move(fork: YouzanCluster) -> None:
    records = [f"r{n:03d}".encode() for n in range(500)]
    process = subprocess.Popen(
        [
            str(BIN / "to_nsq"),
            f"--lookupd-http-address={fork.lookupd_http_address}",
            "--topic=solo",
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    try:
        process.stdin.write(b"".join(record + b"\n" for record in records[:250]))
        process.stdin.flush()
        wait_until(lambda: len(fork.stored("solo")) == 250, DEADLINE, "the first half")
        fork.move_partition("solo", 0, 1, window=MOVE_WINDOW)
        _, stderr = process.communicate(
            b"".join(record + b"\n" for record in records[250:]), timeout=DEADLINE
        )
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert [message.body for message in fork.stored("solo")] == records


def test_to_nsq_started_during_a_leader_move_waits_for_it(fork: YouzanCluster) -> None:
    """nsqlookupd lists no writable partition meanwhile: "again", not a failure."""
    fork.move_partition("solo", 0, 1, window=2 * MOVE_WINDOW)
    result = run(
        "to_nsq",
        f"--lookupd-http-address={fork.lookupd_http_address}",
        "--topic=solo",
        stdin=b"a\nb\n",
    )
    assert result.returncode == 0, result.stderr
    assert [message.body for message in fork.stored("solo")] == [b"a", b"b"]


@pytest.mark.slow  # a Spark job
def test_the_spark_sink_publishes_every_row_through_a_leader_move(
    spark: Any, fork: YouzanCluster, tmp_path: Path
) -> None:
    """Text files in, one per micro-batch; the partition's leader moves after the first."""
    from nsqtools.spark import register

    register(spark)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    sent = [f"row{n:03d}".encode() for n in range(400)]
    for part in range(4):
        (incoming / f"part{part}.txt").write_bytes(b"\n".join(sent[part * 100 : part * 100 + 100]))
    stream = (
        spark.readStream.option("maxFilesPerTrigger", "1")
        .text(str(incoming))
        .withColumnRenamed("value", "body")
    )
    query = (
        stream.writeStream.format("nsq")
        .option("lookupd_http_addresses", fork.lookupd_http_address)
        .option("topic", "solo")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        wait_until(lambda: len(fork.stored("solo")) > 0, SPARK_WAIT, "the first batch")
        fork.move_partition("solo", 0, 1, window=MOVE_WINDOW)
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert {message.body for message in fork.stored("solo")} == set(sent)
    assert fork.commands(1)  # the new leader took some


# -- item 8: the round robin's start, back pressure, the error lines ----------------------


async def test_two_producers_do_not_both_start_at_partition_0(fork: YouzanCluster) -> None:
    """Each Partitions starts its turns one partition after the last one made."""
    for body in (b"first", b"second"):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer([], config(), partitions=partitions) as producer,
        ):
            await producer.publish("yz", body)
    assert sorted(len(fork.stored("yz", partition)) for partition in (0, 1)) == [1, 1]


async def test_too_much_waiting_is_retried_with_backoff(fork: YouzanCluster) -> None:
    fork.refuse_next("yz", 0, "E_PUB_TOO_MUCH_WAITING", times=3)
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer([], config(), partitions=partitions) as producer,
        ):
            await producer.publish("yz", b"patient", partition=0)
    assert [message.body for message in fork.stored("yz", 0)] == [b"patient"]
    assert [c for c in fork.commands() if c.startswith(b"PUB yz 0")] == [
        b"PUB yz 0\n\x00\x00\x00\x07patient"
    ] * 4


def test_to_nsq_to_one_nsqd_retries_too_much_waiting(fork: YouzanCluster) -> None:
    """Without the fork's lookupd too: back pressure is retried, not fatal."""
    fork.refuse_next("yz", 0, "E_PUB_TOO_MUCH_WAITING", times=3)
    result = run(
        "to_nsq",
        f"--nsqd-tcp-address={fork.nsqd_tcp_addresses[0]}",
        "--topic=yz",
        "--partition=0",
        stdin=b"a\nb\n",
    )
    assert result.returncode == 0, result.stderr
    assert [message.body for message in fork.stored("yz", 0)] == [b"a", b"b"]


async def test_a_refusal_names_the_partition_not_led(fork: YouzanCluster) -> None:
    fork.refuse_next("yz", 1, "E_FAILED_ON_NOT_LEADER", times=1000)
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config(partition_wait=0.3)) as partitions,
            open_producer([], config(partition_wait=0.3), partitions=partitions) as producer,
        ):
            with pytest.raises(PartitionError) as refused:
                await producer.publish("yz", b"x", partition=1)
    assert "this nsqd does not lead partition 1" in str(refused.value)
    assert "no longer" not in str(refused.value)


def test_to_nsq_says_a_bad_trace_id_is_a_bad_trace_id(fork: YouzanCluster) -> None:
    result = run(
        "to_nsq",
        f"--nsqd-tcp-address={fork.nsqd_tcp_addresses[1]}",
        "--topic=yz",
        "--partition=1",
        "--trace-id={tid}",
        stdin=b'{"tid": "soon"}\n{"tid": 12}\n',
    )
    assert result.returncode == 1
    assert b"--trace-id: trace id 'soon' is not an unsigned 64-bit number" in result.stderr
    assert b"shard-key" not in result.stderr
    assert [message.trace_id for message in fork.stored("yz", 1)] == [12]
