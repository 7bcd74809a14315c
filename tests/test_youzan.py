"""Our consumer, producer and tools against the Youzan fork.

The fork cannot be built here (the Go module proxy does not serve it), so these run
against nsqtools.testing.youzan.YouzanCluster, a scripted server that follows
../shared/spec/youzan.md exactly. What upstream NSQ must see unchanged is checked
against the real nsqd v1.3.0.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nsqtools import discovery
from nsqtools.config import ClientConfig
from nsqtools.consumer import Consumer, ConsumerOptions, open_consumer
from nsqtools.errors import NsqError
from nsqtools.partitions import PartitionError, Partitions, shard_partition
from nsqtools.producer import PublishOutcome, open_producer
from nsqtools.protocol import youzan
from nsqtools.protocol.youzan import ForkMessage
from nsqtools.testing import Nsqd, wait_until
from nsqtools.testing.webserver import Answer, WebServer
from nsqtools.testing.youzan import ForkTopic, YouzanCluster
from tests.conftest import Cluster

BIN = Path(sys.executable).parent
CHANNEL = "ch"
NEWLINES = 0x0A0A_0A0A_0A0A_0A0A  # a trace id whose bytes are all "\n"


def config(**settings: Any) -> ClientConfig:
    return dataclasses.replace(ClientConfig(), max_in_flight=10, **settings)


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    # A new channel starts at the end of its partition, as on the fork: the channels the
    # tests read what was injected beforehand from are created with their topic.
    topics = [
        ForkTopic("yz", partitions=2, channels=(CHANNEL, "one")),
        ForkTopic(
            "ordered", partitions=2, ordered=True, channels=(CHANNEL, "tail", "archive", "relay")
        ),
        ForkTopic("tagged", partitions=1, extend=True, channels=(CHANNEL,)),
    ]
    with YouzanCluster(topics) as cluster:
        yield cluster


async def until(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)
    assert condition(), what


async def take(consumer: Consumer, count: int) -> list[ForkMessage]:
    """FIN `count` messages, in the order received."""
    seen: list[ForkMessage] = []
    with trio.fail_after(10):
        async for batch in consumer:
            for message in batch.messages:
                assert isinstance(message, ForkMessage)
                seen.append(message)
            batch.finish()
            if len(seen) >= count:
                return seen
    raise AssertionError(f"the consumer ended after {len(seen)} of {count}")


def lines(fork: YouzanCluster, prefix: bytes) -> list[bytes]:
    return [command for command in fork.commands() if command.startswith(prefix)]


# -- consuming ----------------------------------------------------------------------------


async def test_each_partition_is_subscribed_and_binary_ids_are_fined_raw(
    fork: YouzanCluster,
) -> None:
    stored = [
        fork.inject("yz", partition, f"m{partition}{n}".encode())
        for partition in (0, 1)
        for n in range(3)
    ]
    stored.append(fork.inject("yz", 1, b"newlines", trace_id=NEWLINES))
    async with open_consumer(
        "yz", CHANNEL, config(), ConsumerOptions(lookupd_http_addresses=[fork.lookupd_http_address])
    ) as consumer:
        seen = await take(consumer, len(stored))
        await until(lambda: len(fork.finished("yz", CHANNEL)) == len(stored), "every FIN")
    assert sorted(lines(fork, b"SUB ")) == [b"SUB yz ch 0\n", b"SUB yz ch 1\n"]
    assert {(m.partition, m.body) for m in seen} == {(s.partition, s.body) for s in stored}
    assert set(fork.finished("yz", CHANNEL)) == {message.id for message in stored}
    traced = next(message for message in seen if message.body == b"newlines")
    assert traced.trace_id == NEWLINES and b"\n" in traced.id
    assert b"FIN " + traced.id + b"\n" in fork.commands()


async def test_an_ordered_topic_has_one_in_flight_and_a_requeue_comes_back_first(
    fork: YouzanCluster,
) -> None:
    for partition in (0, 1):
        for n in range(4):
            fork.inject("ordered", partition, f"p{partition}-{n}".encode())
    seen: list[ForkMessage] = []
    requeued = False
    async with open_consumer(
        "ordered",
        CHANNEL,
        config(),
        ConsumerOptions(lookupd_http_addresses=[fork.lookupd_http_address]),
    ) as consumer:
        with trio.fail_after(10):
            async for batch in consumer:
                assert len(batch) == 1  # one in flight per partition
                (message,) = batch.messages
                assert isinstance(message, ForkMessage)
                seen.append(message)
                if message.body == b"p0-1" and not requeued:
                    requeued = True
                    batch.requeue(delay=0, backoff=False)
                else:
                    batch.finish()
                if len(seen) == 9:
                    break
    assert sorted(lines(fork, b"SUB_ORDERED")) == [
        b"SUB_ORDERED ordered ch 0\n",
        b"SUB_ORDERED ordered ch 1\n",
    ]
    zero = [(m.body, m.attempts) for m in seen if m.partition == 0]
    assert zero == [(b"p0-0", 1), (b"p0-1", 1), (b"p0-1", 2), (b"p0-2", 1), (b"p0-3", 1)]
    for partition in (0, 1):
        offsets = [m.queue_offset or 0 for m in seen if m.partition == partition]
        assert offsets == sorted(offsets) and all(m.queue_offset is not None for m in seen)


async def test_a_start_position_skips_what_came_before(fork: YouzanCluster) -> None:
    fork.inject("yz", 0, b"old")
    async with open_consumer(
        "yz",
        "fresh",
        config(),
        ConsumerOptions(
            lookupd_http_addresses=[fork.lookupd_http_address], partition=0, start_at=youzan.END
        ),
    ) as consumer:
        await until(lambda: lines(fork, b"SUB_ADVANCED") != [], "SUB_ADVANCED")
        new = fork.inject("yz", 0, b"new")
        (message,) = await take(consumer, 1)
    # The position went over HTTP (/channel/setoffset): the fork serves another
    # partition than the one named when SUB_ADVANCED carries a position.
    assert lines(fork, b"SUB_ADVANCED") == [b"SUB_ADVANCED yz fresh 0\n"]
    assert (message.body, message.queue_offset) == (b"new", new.offset)


@pytest.mark.parametrize(
    ("start", "wanted"),
    [
        ("offset", [b"second", b"third"]),
        ("count:2", [b"second", b"third"]),
        ("timestamp:2000", [b"third"]),
    ],
)
async def test_start_positions_from_an_offset_a_count_and_a_time(
    fork: YouzanCluster, start: str, wanted: list[bytes]
) -> None:
    fork.inject("yz", 1, b"first", timestamp=1000 * 10**9)
    second = fork.inject("yz", 1, b"second", timestamp=1500 * 10**9)
    fork.inject("yz", 1, b"third", timestamp=2500 * 10**9)
    if start == "offset":
        start = f"offset:{second.offset}"
    async with open_consumer(
        "yz",
        "from",
        config(),
        ConsumerOptions(
            nsqd_tcp_addresses=[fork.nsqd_tcp_addresses[1]],
            partition=1,
            start_at=youzan.parse_start_position(start),
        ),
    ) as consumer:
        seen = await take(consumer, len(wanted))
    assert [message.body for message in seen] == wanted
    assert all(message.queue_offset is not None for message in seen)


async def test_an_extend_topic_is_identified_and_its_tags_read(fork: YouzanCluster) -> None:
    """Through lookupd, meta says extend; to an nsqd directly, its refusal says so."""
    ext = b'{"##client_dispatch_tag":"red"}'
    fork.inject("tagged", 0, b"tagged", tag="red", ext=ext)
    fork.inject("tagged", 0, b"plain")
    async with open_consumer(
        "tagged",
        CHANNEL,
        config(),
        ConsumerOptions(nsqd_tcp_addresses=[fork.nsqd_tcp_addresses[0]], partition=0),
    ) as consumer:
        seen = await take(consumer, 2)
    assert [(m.body, m.tag) for m in seen] == [(b"tagged", "red"), (b"plain", "")]
    identifies = [c for c in fork.commands() if c.startswith(b"IDENTIFY")]
    assert b"extend_support" not in identifies[0] and b'"extend_support":true' in identifies[1]


async def test_a_desired_tag_gets_only_its_messages(fork: YouzanCluster) -> None:
    """On the fork a tagged message goes to the consumers of its tag, the others to the
    untagged consumers of the channel (with none, the channel would wait for one)."""
    options = ConsumerOptions(lookupd_http_addresses=[fork.lookupd_http_address])
    async with (
        open_consumer("tagged", CHANNEL, config(desired_tag="red"), options) as reds,
        open_consumer("tagged", CHANNEL, config(), options) as others,
    ):
        # RDY follows SUB's OK: both are consumers of the channel before anything is stored.
        await until(lambda: len(lines(fork, b"RDY ")) >= 2, "both subscribed")
        for tag in ("red", "blue", "red"):
            ext = json.dumps({youzan.TAG_KEY: tag}).encode()
            fork.inject("tagged", 0, tag.encode(), tag=tag, ext=ext)
        red = await take(reds, 2)
        (other,) = await take(others, 1)
    assert [m.body for m in red] == [b"red", b"red"]
    assert (other.body, other.tag) == (b"blue", "blue")
    identifies = [c for c in fork.commands() if c.startswith(b"IDENTIFY")]
    assert sum(b'"desired_tag":"red"' in identify for identify in identifies) == 1


async def test_upstream_nsqd_refuses_the_forks_options_in_one_line(nsqd: Nsqd) -> None:
    with pytest.raises(NsqError, match="not the Youzan fork: partitions and start positions"):
        async with open_consumer(
            "t",
            CHANNEL,
            config(),
            ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address], partition=1),
        ):
            pass


async def test_the_other_lookupds_of_the_cluster_are_found() -> None:
    listed = {
        "lookupdleader": {"ID": "1", "NodeIP": "127.0.0.1", "TcpPort": "1", "HttpPort": "4161"},
        "lookupdnodes": [{"ID": "2", "NodeIP": "127.0.0.1", "TcpPort": "2", "HttpPort": "5161"}],
    }
    with WebServer(Answer(body=json.dumps(listed).encode())) as lookupd:
        async with httpx.AsyncClient() as client:
            more = await discovery.more_lookupds(client, [lookupd.address, "127.0.0.1:4161"])
    assert more == ["127.0.0.1:5161"]


async def test_a_plain_sub_on_an_ordered_topic_becomes_ordered_with_a_partition(
    fork: YouzanCluster,
) -> None:
    fork.inject("ordered", 1, b"one")
    async with open_consumer(
        "ordered",
        CHANNEL,
        config(),
        ConsumerOptions(nsqd_tcp_addresses=[fork.nsqd_tcp_addresses[1]], partition=1),
    ) as consumer:
        (message,) = await take(consumer, 1)
    assert lines(fork, b"SUB") == [b"SUB ordered ch 1\n", b"SUB_ORDERED ordered ch 1\n"]
    assert message.queue_offset == 0


# -- publishing ---------------------------------------------------------------------------


async def test_batches_go_round_robin_over_partitions_each_naming_its_own(
    fork: YouzanCluster,
) -> None:
    async with Partitions([fork.lookupd_http_address], config()) as partitions:
        await partitions.refresh("yz")
        async with open_producer([], config(), partitions=partitions) as producer:
            for n in range(4):
                await producer.publish("yz", f"rr{n}".encode())
    # The first partition is either (a producer does not always start at 0); then
    # they alternate.
    first = 0 if [m.body for m in fork.stored("yz", 0)][:1] == [b"rr0"] else 1
    second = 1 - first
    assert [m.body for m in fork.stored("yz", first)] == [b"rr0", b"rr2"]
    assert [m.body for m in fork.stored("yz", second)] == [b"rr1", b"rr3"]
    assert lines(fork, b"PUB ") == [
        b"PUB yz %d\n\x00\x00\x00\x03rr%d" % (partition, n)
        for n, partition in enumerate([first, second, first, second])
    ]


async def test_traced_publishing_returns_the_30_byte_answer(fork: YouzanCluster) -> None:
    outcomes: list[PublishOutcome] = []
    async with Partitions([fork.lookupd_http_address], config()) as partitions:
        await partitions.refresh("yz")
        async with open_producer(
            [], config(), partitions=partitions, on_outcome=outcomes.append
        ) as producer:
            answer = await producer.publish("yz", b"traced", partition=1, trace_id=NEWLINES)
            await producer.put_many("yz", [b"a", b"b"], partition=0, trace_ids=[7, 8])
    (stored,) = fork.stored("yz", 1)
    assert answer == youzan.TraceAnswer(
        stored.internal_id, NEWLINES, stored.offset, stored.raw_size
    )
    first, second = fork.stored("yz", 0)
    assert (first.trace_id, second.trace_id) == (7, 8)
    batch = outcomes[-1]
    assert batch.partition == 0 and batch.trace is not None
    assert (batch.trace.internal_id, batch.trace.trace_id) == (first.internal_id, 0)
    assert batch.trace.raw_size == first.raw_size + second.raw_size


async def test_pub_ext_tags_a_message(fork: YouzanCluster) -> None:
    async with Partitions([fork.lookupd_http_address], config()) as partitions:
        await partitions.refresh("tagged")
        async with open_producer([], config(), partitions=partitions) as producer:
            answer = await producer.publish("tagged", b"ext", tag="green", trace_id=5)
            untraced = await producer.publish("tagged", b"ext2", tag="green")
    first, second = fork.stored("tagged")
    assert (first.tag, second.tag) == ("green", "green")
    assert answer is not None and (answer.trace_id, answer.internal_id) == (5, first.internal_id)
    assert untraced is None


async def test_a_moved_partition_is_looked_up_again_and_followed(fork: YouzanCluster) -> None:
    settings = config(partition_wait=0.3)
    async with Partitions([fork.lookupd_http_address], settings) as partitions:
        await partitions.refresh("yz")
        async with open_producer([], settings, partitions=partitions) as producer:
            fork.refuse_next("yz", 0, "E_FAILED_ON_NOT_LEADER")
            await producer.publish("yz", b"after-not-leader", partition=0)
            fork.move_partition("yz", 1, 0)  # nsqd 1 now answers E_FAILED_ON_NOT_LEADER
            await producer.publish("yz", b"after-move", partition=1)
            # Refused for longer than partition_wait: that publish fails, named.
            fork.refuse_next("yz", 0, "E_FAILED_ON_NOT_WRITABLE", times=1000)
            with pytest.raises(PartitionError, match="E_FAILED_ON_NOT_WRITABLE") as refused:
                await producer.publish("yz", b"never", partition=0)
    assert "takes no writes now" in str(refused.value)
    assert [m.body for m in fork.stored("yz")] == [b"after-not-leader", b"after-move"]
    assert lines(fork, b"PUB yz 1").count(b"PUB yz 1\n\x00\x00\x00\x0aafter-move") == 2


async def test_an_ordered_topic_needs_a_partition_or_a_key(fork: YouzanCluster) -> None:
    async with Partitions([fork.lookupd_http_address], config()) as partitions:
        await partitions.refresh("ordered")
        async with open_producer([], config(), partitions=partitions) as producer:
            with pytest.raises(PartitionError, match="ordered: give each message"):
                await producer.publish("ordered", b"x")
        assert partitions.for_key("ordered", b"user-1") == shard_partition(b"user-1", 2)


def test_to_nsq_refuses_the_forks_options_on_upstream(cluster: Cluster) -> None:
    """Upstream nsqd would read `PUB t 1` as `PUB t`; upstream lookupd has no partitions."""
    to_partition = run(
        "to_nsq",
        f"--nsqd-tcp-address={cluster.nsqd.tcp_address}",
        "--topic=t",
        "--partition=1",
        stdin=b"x\n",
    )
    assert to_partition.returncode == 1
    assert b"is NSQ 1.3.0, not the Youzan fork" in to_partition.stderr
    cluster.publish_many("t", lambda nsqd: [b"registered"])
    through_lookupd = run(
        "to_nsq",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        "--topic=t",
        stdin=b"x\n",
    )
    assert through_lookupd.returncode == 1
    assert b"topic t is not on the Youzan fork" in through_lookupd.stderr
    assert b"Traceback" not in to_partition.stderr + through_lookupd.stderr


async def test_an_unknown_topic_has_no_writable_partition(fork: YouzanCluster) -> None:
    async with Partitions([fork.lookupd_http_address], config()) as partitions:
        with pytest.raises(PartitionError, match=r"404|Key not found|no writable"):
            await partitions.refresh("nope")


def test_shard_keys_hash_stably() -> None:
    """CRC-32 of the key modulo the count, as documented: these values never change."""
    # zlib.crc32: 0xe8b7be43, 0x7e264614, 0 (Go's crc32.ChecksumIEEE gives the same)
    assert [shard_partition(key, 4) for key in (b"a", b"user-1", b"")] == [3, 0, 0]


# -- the tools ----------------------------------------------------------------------------


def run(tool: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / tool), *args], input=stdin, capture_output=True, timeout=30, check=False
    )


def test_nsq_tail_json_shows_partition_trace_id_and_offset(fork: YouzanCluster) -> None:
    stored = [
        fork.inject("ordered", 0, b"zero"),
        fork.inject("ordered", 1, b"one", trace_id=NEWLINES),
    ]
    # No -n: near its end -n leaves RDY for one partition at a time (as for one nsqd of
    # several upstream), and the other's turn comes seconds later.
    tail = subprocess.Popen(
        [
            str(BIN / "nsq_tail"),
            f"--lookupd-http-address={fork.lookupd_http_address}",
            "--topic=ordered",
            "--channel=tail",
            "--format=json",
        ],
        stdout=subprocess.PIPE,
    )
    assert tail.stdout is not None
    try:
        output = [tail.stdout.readline(), tail.stdout.readline()]
    finally:
        tail.terminate()
        assert tail.wait(20) == 0
    documents = sorted(map(json.loads, output), key=lambda d: d["partition"])
    for document, message in zip(documents, stored, strict=True):
        assert document["id"] == message.id.hex()
        assert (document["partition"], document["trace_id"]) == (
            message.partition,
            str(message.trace_id),
        )
        assert (document["queue_offset"], document["raw_size"]) == (
            message.offset,
            message.raw_size,
        )
    assert documents[1]["trace_id"] == str(NEWLINES)


def test_nsq_tail_reads_one_partition(fork: YouzanCluster) -> None:
    fork.inject("yz", 0, b"zero")
    fork.inject("yz", 1, b"one")
    result = run(
        "nsq_tail",
        f"--lookupd-http-address={fork.lookupd_http_address}",
        "--topic=yz",
        "--channel=one",
        "--partition=1",
        "--format={partition} {body}",
        "-n",
        "1",
    )
    assert (result.returncode, result.stdout) == (0, b"1 one\n"), result.stderr
    assert lines(fork, b"SUB ") == [b"SUB yz one 1\n"]


def test_nsq_tail_with_a_desired_tag(fork: YouzanCluster) -> None:
    # The red message first: a channel whose consumers are all tagged waits at the first
    # message none of them wants (for an untagged consumer), as on the fork.
    for tag in ("red", "blue"):
        ext = json.dumps({youzan.TAG_KEY: tag}).encode()
        fork.inject("tagged", 0, tag.encode(), tag=tag, ext=ext)
    lookupd = f"--lookupd-http-address={fork.lookupd_http_address}"
    result = run(
        "nsq_tail",
        lookupd,
        "--topic=tagged",
        f"--channel={CHANNEL}",
        "--desired-tag=red",
        "-n",
        "1",
    )
    assert (result.returncode, result.stdout) == (0, b"red\n"), result.stderr
    identify = next(c for c in fork.commands() if c.startswith(b"IDENTIFY"))
    assert b'"desired_tag":"red"' in identify


def test_nsq_tail_refuses_a_bad_start_position() -> None:
    result = run("nsq_tail", "--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--start-at=soon")
    assert result.returncode == 2
    assert b"--start-at" in result.stderr and b"Traceback" not in result.stderr


def test_to_nsq_shards_records_by_key_keeping_their_order(
    fork: YouzanCluster, tmp_path: Path
) -> None:
    users = [f"u{n % 5}" for n in range(40)]
    records = [json.dumps({"user": user, "n": n}) for n, user in enumerate(users)]
    records.append('{"no": "user"}')
    failed = tmp_path / "failed"
    result = run(
        "to_nsq",
        f"--lookupd-http-address={fork.lookupd_http_address}",
        "--topic=ordered",
        "--shard-key=user",
        f"--failed-file={failed}",
        stdin="\n".join(records).encode() + b"\n",
    )
    assert result.returncode == 1
    assert b"1 of 41 records were not published" in result.stderr
    assert b"no field 'user'" in result.stderr
    assert failed.read_bytes() == b'{"no": "user"}\n'
    for partition in (0, 1):
        seen = [json.loads(m.body) for m in fork.stored("ordered", partition)]
        for user in {document["user"] for document in seen}:
            assert shard_partition(user.encode(), 2) == partition
            mine = [document["n"] for document in seen if document["user"] == user]
            assert mine == [n for n, name in enumerate(users) if name == user]
    assert len(fork.stored("ordered")) == 40


def test_to_nsq_publishes_traced_to_a_partition(fork: YouzanCluster) -> None:
    records = b'{"tid": 11}\n{"tid": 12}\n'
    result = run(
        "to_nsq",
        f"--nsqd-tcp-address={fork.nsqd_tcp_addresses[1]}",
        "--topic=yz",
        "--partition=1",
        "--trace-id={tid}",
        stdin=records,
    )
    assert result.returncode == 0, result.stderr
    assert [m.trace_id for m in fork.stored("yz", 1)] == [11, 12]
    assert lines(fork, b"MPUB_TRACE yz 1\n") != []


def test_to_nsq_refuses_a_shard_key_without_lookupd() -> None:
    result = run("to_nsq", "--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--shard-key=user")
    assert result.returncode != 0
    assert b"--shard-key needs --lookupd-http-address" in result.stderr


ORDERED_COUNT = 20


def inject_ordered(fork: YouzanCluster) -> None:
    """Bodies "<partition>:<n>", n rising: in order when sorted within a partition."""
    for n in range(ORDERED_COUNT):
        fork.inject("ordered", n % 2, f"{n % 2}:{n:02d}".encode())


def consume_ordered(fork: YouzanCluster, tool: str, channel: str, *args: str) -> None:
    """Run a consuming tool on the ordered topic until it FIN'd everything, then stop it."""
    process = subprocess.Popen(
        [
            str(BIN / tool),
            f"--lookupd-http-address={fork.lookupd_http_address}",
            "--topic=ordered",
            f"--channel={channel}",
            *args,
        ],
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: len(fork.finished("ordered", channel)) == ORDERED_COUNT, 20, "FINs")
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr


def assert_each_partition_in_order(lines_out: list[bytes]) -> None:
    for partition in (b"0", b"1"):
        mine = [line for line in lines_out if line.startswith(partition)]
        assert mine == sorted(mine) and len(mine) == ORDERED_COUNT // 2


def test_nsq_to_file_keeps_each_partitions_order(fork: YouzanCluster, tmp_path: Path) -> None:
    inject_ordered(fork)
    consume_ordered(fork, "nsq_to_file", "archive", f"--output-dir={tmp_path}")
    (archive,) = tmp_path.glob("ordered.*.log")
    assert_each_partition_in_order(archive.read_bytes().splitlines())


def test_nsq_to_nsq_keeps_each_partitions_order(fork: YouzanCluster, nsqd: Nsqd) -> None:
    """From an ordered topic of the fork to upstream nsqd: each partition's messages
    arrive in their order (one in flight per partition, FIN after the destination's OK)."""
    nsqd.create_channels("relayed", "check")
    inject_ordered(fork)
    consume_ordered(
        fork,
        "nsq_to_nsq",
        "relay",
        f"--destination-nsqd-tcp-address={nsqd.tcp_address}",
        "--destination-topic=relayed",
    )
    tail = [f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=relayed", "--channel=check"]
    result = run("nsq_tail", *tail, "-n", str(ORDERED_COUNT), "--max-in-flight=1")
    assert_each_partition_in_order(result.stdout.splitlines())
