"""format("nsq") with startingOffsets (nsqtools/spark/fork_offsets.py) against the
scripted Youzan fork: the offsets it starts from and cuts batches at, each message once
through a query, a failed batch replayed byte for byte from the checkpoint, a restart
that reads only what came after, and the one-line errors (upstream NSQ, bad JSON).

One fork cluster for the module; each test its own topic.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from nsqtools.spark import register
from nsqtools.spark.fork_offsets import ForkOffsetReader, ForkSettings, OffsetRange
from nsqtools.spark.streaming import OptionError
from nsqtools.testing import Nsqlookupd, wait_until
from nsqtools.testing.youzan import ForkTopic, StoredMessage, YouzanCluster

CHANNEL = "spark"
WAIT = 90.0  # for Spark's micro-batches on two busy cores


@pytest.fixture(scope="module")
def fork() -> Iterator[YouzanCluster]:
    with YouzanCluster() as cluster:
        yield cluster


def new_topic(fork: YouzanCluster, name: str, per_partition: int) -> list[StoredMessage]:
    """A topic of two partitions (one per nsqd), with `per_partition` messages in each."""
    fork.add_topic(ForkTopic(name, partitions=2, channels=(CHANNEL,)))
    return inject(fork, name, per_partition)


def inject(fork: YouzanCluster, topic: str, per_partition: int) -> list[StoredMessage]:
    first = len(fork.stored(topic))
    return [
        fork.inject(topic, index % 2, b"%s-%04d" % (topic.encode(), first + index))
        for index in range(2 * per_partition)
    ]


def options(fork: YouzanCluster, topic: str, starting: str, **more: str) -> dict[str, str]:
    return {
        "topic": topic,
        "channel": CHANNEL,
        "lookupd_http_addresses": fork.lookupd_http_address,
        "startingOffsets": starting,
        **more,
    }


def reader(fork: YouzanCluster, topic: str, starting: str, **more: str) -> ForkOffsetReader:
    return ForkOffsetReader(ForkSettings.of(options(fork, topic, starting, **more)))


def end_of(stored: list[StoredMessage], partition: int) -> int:
    last = [message for message in stored if message.partition == partition][-1]
    return last.offset + last.raw_size


def rows_of(source: ForkOffsetReader, wanted: OffsetRange) -> Any:
    """The one Arrow record batch a task outputs for the range."""
    (batch,) = source.read(wanted)
    return batch


# -- offsets, without Spark ---------------------------------------------------------------


def test_starting_offsets_and_the_cut(fork: YouzanCluster) -> None:
    stored = new_topic(fork, "starts", 6)
    ends = {"0": end_of(stored, 0), "1": end_of(stored, 1)}
    assert reader(fork, "starts", "earliest").initialOffset() == {"0": 0, "1": 0}
    assert reader(fork, "starts", "latest").initialOffset() == ends
    third = [message for message in stored if message.partition == 1][2].offset
    json_start = reader(fork, "starts", json.dumps({"0": -2, "1": third})).initialOffset()
    assert json_start == {"0": 0, "1": third}

    # 4 messages a trigger over 2 partitions: 2 each, cut on their bytes (all one size).
    size = stored[0].raw_size
    source = reader(fork, "starts", "earliest")
    assert source.latestOffset({"0": 0, "1": 0}, ReadMaxRows(4)) == {"0": 2 * size, "1": 2 * size}
    # No tail shorter than a share is left behind: 3 of 6 left, 2 a share, all taken.
    assert source.latestOffset({"0": 3 * size, "1": 0}, ReadMaxRows(4))["0"] == ends["0"]
    assert source.partitions({"0": 0, "1": ends["1"]}, ends) == [OffsetRange(0, 0, ends["0"])]


def test_a_range_is_read_exactly_and_again_the_same(fork: YouzanCluster) -> None:
    stored = new_topic(fork, "ranges", 5)
    mine = [message for message in stored if message.partition == 1]
    source = reader(fork, "ranges", "earliest")
    wanted = OffsetRange(1, mine[1].offset, mine[4].offset)
    first = rows_of(source, wanted).to_pydict()
    assert first["body"] == [message.body for message in mine[1:4]]
    assert first["id"] == [message.id.hex() for message in mine[1:4]]
    assert first["attempts"] == [1, 1, 1]
    # A cut inside a message: it belongs to the range it starts in.
    assert rows_of(source, wanted).to_pydict() == first
    inside = OffsetRange(1, mine[1].offset + 1, mine[3].offset + 1)
    assert rows_of(source, inside).to_pydict()["body"] == [mine[2].body, mine[3].body]


def test_an_ordered_topic_gives_each_message_once(fork: YouzanCluster) -> None:
    """SUB_ORDERED, on a channel the task's setoffset created over HTTP: the fork sends
    its first message twice (spec, "Observed on a running fork"); one row each."""
    fork.add_topic(ForkTopic("ordered", partitions=2, ordered=True))
    stored = inject(fork, "ordered", 3)
    mine = [message for message in stored if message.partition == 0]
    rows = rows_of(reader(fork, "ordered", "earliest"), OffsetRange(0, 0, end_of(stored, 0)))
    assert rows.to_pydict()["body"] == [message.body for message in mine]
    assert any(command.startswith(b"SUB_ORDERED ordered") for command in fork.commands())


def test_a_range_planned_before_a_leader_move_is_read_from_the_new_leader(
    fork: YouzanCluster,
) -> None:
    stored = new_topic(fork, "moved", 2)
    source = reader(fork, "moved", "earliest")
    end = source.latestOffset({"0": 0, "1": 0}, ReadAllAvailable())
    fork.move_partition("moved", 0, 1)
    rows = rows_of(source, OffsetRange(0, 0, end["0"])).to_pydict()
    assert rows["body"] == [message.body for message in stored if message.partition == 0]
    assert set(rows["nsqd_address"]) == {fork.nsqd_tcp_addresses[1]}


def test_upstream_nsq_is_one_clear_error(lookupd: Nsqlookupd) -> None:
    settings = ForkSettings.of(
        {
            "topic": "t",
            "channel": CHANNEL,
            "lookupd_http_addresses": lookupd.http_address,
            "startingOffsets": "earliest",
        }
    )
    with pytest.raises(OptionError, match=r"^startingOffsets needs the Youzan fork's") as caught:
        ForkOffsetReader(settings)
    assert "\n" not in str(caught.value)
    with pytest.raises(OptionError, match="needs lookupd_http_addresses"):
        ForkSettings.of(
            {
                "topic": "t",
                "channel": "c",
                "nsqd_tcp_addresses": "127.0.0.1:4150",
                "startingOffsets": "latest",
            }
        )


@pytest.mark.parametrize("text", ["{bad", '{"0": "x"}', '{"a": 1}', "[1]", "first", '{"0": -3}'])
def test_bad_starting_offsets_are_one_clear_error(fork: YouzanCluster, text: str) -> None:
    with pytest.raises(OptionError, match=r"^startingOffsets must be earliest, latest, or JSON"):
        ForkSettings.of(options(fork, "any", text))


def test_json_offsets_name_every_partition(fork: YouzanCluster) -> None:
    new_topic(fork, "named", 1)
    with pytest.raises(OptionError, match=r"each of the 2 partitions of named \(missing \[1\]"):
        reader(fork, "named", '{"0": 0}').initialOffset()


# -- through Spark ------------------------------------------------------------------------


class Recorder:
    """A foreachBatch function keeping each batch's rows as Spark gave them; it fails
    once, on batch `fail_on`, after recording it."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: dict[int, list[tuple[Any, ...]]] = {}
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = [tuple(row) for row in frame.orderBy("id").collect()]
        with self.lock:
            self.batches[batch_id] = rows
        if batch_id == self.fail_on:
            self.fail_on = None
            raise RuntimeError(f"the sink fails batch {batch_id} once")

    def bodies(self) -> list[bytes]:
        with self.lock:
            return sorted(bytes(row[1]) for rows in self.batches.values() for row in rows)


def start(spark: Any, fork: YouzanCluster, topic: str, sink: Recorder, checkpoint: Path) -> Any:
    register(spark)
    stream = spark.readStream.format("nsq")
    for key, value in options(fork, topic, "earliest", maxMessagesPerTrigger="10").items():
        stream = stream.option(key, value)
    return (
        stream.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


@pytest.mark.slow
def test_exactly_once_through_a_failed_batch_and_a_restart(
    spark: Any, fork: YouzanCluster, tmp_path: Path
) -> None:
    stored = new_topic(fork, "replayed", 15)
    failing = Recorder(fail_on=1)
    query = start(spark, fork, "replayed", failing, tmp_path / "checkpoint")
    with pytest.raises(Exception, match="fails batch 1 once"):
        query.awaitTermination(WAIT)
    assert sorted(failing.batches) == [0, 1]

    # Restarted from its checkpoint: batch 1 again, the same bytes; batch 0 not again.
    again = Recorder()
    query = start(spark, fork, "replayed", again, tmp_path / "checkpoint")
    try:
        sent = sorted(message.body for message in stored)
        first = [bytes(row[1]) for row in failing.batches[0]]
        wait_until(lambda: sorted(first + again.bodies()) == sent, WAIT, "every message")
    finally:
        query.stop()
    assert again.batches[1] == failing.batches[1]
    assert 0 not in again.batches
    ids = [row[0] for rows in [failing.batches[0], *again.batches.values()] for row in rows]
    assert sorted(ids) == sorted(message.id.hex() for message in stored)
    assert all(len(rows) <= 10 for rows in again.batches.values())

    # Stopped, then restarted: the batches whose commit Spark had not logged (the stop
    # may come between a batch's sink and its commit), the same, then what came after.
    replayed = uncommitted(tmp_path / "checkpoint")
    later = inject(fork, "replayed", 2)
    after = Recorder()
    query = start(spark, fork, "replayed", after, tmp_path / "checkpoint")
    try:
        wanted = sorted(
            [bytes(row[1]) for batch in replayed for row in again.batches[batch]]
            + [message.body for message in later]
        )
        wait_until(lambda: after.bodies() == wanted, WAIT, "the later messages")
    finally:
        query.stop()
    assert after.bodies() == wanted
    assert all(after.batches[batch] == again.batches[batch] for batch in replayed)


def uncommitted(checkpoint: Path) -> list[int]:
    """The batches in the checkpoint's offset log whose commit is not logged."""

    def logged(folder: str) -> set[int]:
        return {int(path.name) for path in (checkpoint / folder).iterdir() if path.name.isdigit()}

    return sorted(logged("offsets") - logged("commits"))
