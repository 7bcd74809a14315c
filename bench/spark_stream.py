"""Issues 15's and 29's measure: format("nsq") in Structured Streaming, beside Spark's own
file source carrying the same messages through the same query, so that NSQ's part shows.

Throughput: N messages (100-byte bodies) wait in a topic of a local nsqd (memory queue,
its --max-rdy-count raised so that every reader's RDY can cover two shares of the
largest batch); a query reads them with format("nsq") at maxMessagesPerTrigger B and
`readers` R (read tasks per batch) into Spark's no-op sink, timed from the end of its
first batch (nsqd's first FIN: the query's start is not the source's cost) until nsqd
counts every message FIN'd (every batch committed). The file pipeline: the same N
bodies as text files of B lines, read with maxFilesPerTrigger 1 into the same sink,
timed from the end of its first batch until it has processed N rows. The Python
floor: a Python data source of this file's with no I/O at all, whose read tasks (R a
batch) make the same rows from messages built in memory with format("nsq")'s own
record_batch; timed as the file pipeline. It is what Spark's Python data source API
costs by itself: format("nsq") cannot beat it. All in one session, alternating (per
batch size and round: the file run, then per readers count the floor run and the nsq
run), --runs rounds; medians of messages per second and their ratios.

Where: local[2] by default; with --cluster, a standalone cluster on loopback
(nsqtools.testing.spark_cluster: a master and two workers of one core), the driver in
this process with the tests' submit confs (every task waits for both executors).

Latency: with a query running (foreachBatch noting when each row became visible on the
driver), one message every 100 ms for --seconds, each carrying its publish time; for
the file source each message is a file, written (to a hidden name, then renamed in) at
that moment; nsq's query has the default readers (the session's parallelism). Median
and 90th percentile of visible - published.

    .venv/bin/python bench/spark_stream.py [--messages N] [--readers 1,2,4]
        [--batches 5000,20000] [--runs R] [--seconds S] [--cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi import send_sync
from nsqtools.protocol import Message
from nsqtools.spark import register
from nsqtools.spark.session import SparkSettings, start
from nsqtools.spark.streaming import SCHEMA, record_batch
from nsqtools.testing import Nsqd, wait_until
from nsqtools.testing.spark_cluster import SparkCluster

BODY_SIZE = 100
TIME_LIMIT = 600.0  # one run: more is stuck, not slow
LATENCY_INTERVAL = 0.1
RATE_POLL_INTERVAL = 0.05  # 1% of a 5 s run


def bodies(count: int, run: str) -> list[bytes]:
    return [f"{run}:{index:012d}:".encode().ljust(BODY_SIZE, b"x") for index in range(count)]


def finished(client: httpx.Client, nsqd: Nsqd, topic: str) -> int:
    """Messages FIN'd: those the channel got less those it still has (waiting, in
    flight, deferred). From the channel's counts, not its clients' finish_count: a
    holder's connection, and its count, may come and go."""
    call = nsqd_api.stats(nsqd.http_address, topic, "bench", include_clients=False)
    channel = send_sync(client, call).topic(topic).channel("bench")
    held = channel.depth + channel.in_flight_count + channel.deferred_count
    return channel.message_count - held


def nsq_throughput(spark: Any, nsqd: Nsqd, count: int, batch: int, readers: int, run: str) -> float:
    topic = f"through{run}"
    nsqd.create_channels(topic, "bench")
    sent = bodies(count, run)
    for start_at in range(0, count, 5000):
        nsqd.publish_many(topic, sent[start_at : start_at + 5000])
    query = (
        spark.readStream.format("nsq")
        .option("topic", topic)
        .option("channel", "bench")
        .option("nsqd_tcp_addresses", nsqd.tcp_address)
        .option("maxMessagesPerTrigger", str(batch))
        .option("readers", str(readers))
        .load()
        .writeStream.format("noop")
        .start()
    )
    try:
        with httpx.Client(timeout=10) as client:  # one: a client per poll costs a core
            return rate(lambda: finished(client, nsqd, topic), count)
    finally:
        query.stop()


def rate(done: Callable[[], int], count: int) -> float:
    """Messages per second from the first batch's end (`done` above 0) to `count` done."""
    poll_until(lambda: done() > 0, "the first batch")
    began, first = time.monotonic(), done()
    poll_until(lambda: done() >= count, "every message")
    return (count - first) / (time.monotonic() - began)


def poll_until(condition: Callable[[], bool], what: str) -> None:
    """wait_until at RATE_POLL_INTERVAL: its 5 ms polls (an HTTP request to nsqd, a call
    into the JVM) would take CPU from the pipelines measured, on 2 cores."""
    deadline = time.monotonic() + TIME_LIMIT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {TIME_LIMIT:g}s waiting for {what}")
        time.sleep(RATE_POLL_INTERVAL)


def file_throughput(spark: Any, folder: Path, count: int, batch: int, run: str) -> float:
    incoming = folder / f"through{run}"
    incoming.mkdir()
    sent = bodies(count, run)
    for number, start_at in enumerate(range(0, count, batch)):
        (incoming / f"part{number:05d}.txt").write_bytes(
            b"\n".join(sent[start_at : start_at + batch]) + b"\n"
        )
    query = (
        spark.readStream.option("maxFilesPerTrigger", "1")
        .text(str(incoming))
        .writeStream.format("noop")
        .start()
    )
    try:
        return rate(lambda: rows_processed(query), count)
    finally:
        query.stop()


@dataclass(frozen=True)
class FloorPartition(InputPartition):
    first: int
    count: int


class FloorReader(DataSourceStreamReader):
    """A batch of `batch` rows per trigger until `total`, in `readers` tasks: the rows
    format("nsq") would make, from messages made in the task. Classes of the __main__
    module: Spark's workers get them pickled by value, with no path to this file."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.total, self.batch = int(options["total"]), int(options["batch"])
        self.readers = int(options["readers"])

    def initialOffset(self) -> dict[str, int]:
        return {"rows": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.batch)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"rows": min(start["rows"] + self.batch, self.total)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        rows = end["rows"] - start["rows"]
        share = -(-rows // self.readers)
        firsts = range(start["rows"], end["rows"], share)
        return [FloorPartition(first, min(share, end["rows"] - first)) for first in firsts]

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, FloorPartition)
        body = b"x" * BODY_SIZE
        made = [
            (Message(b"%016x" % number, time.time_ns(), 1, body), "floor:4150")
            for number in range(partition.first, partition.first + partition.count)
        ]
        return iter([record_batch("floor", made)])


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsq-floor"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FloorReader(self.options)


def floor_throughput(spark: Any, count: int, batch: int, readers: int) -> float:
    query = (
        spark.readStream.format(FloorSource.name())
        .option("total", str(count))
        .option("batch", str(batch))
        .option("readers", str(readers))
        .load()
        .writeStream.format("noop")
        .start()
    )
    try:
        return rate(lambda: rows_processed(query), count)
    finally:
        query.stop()


def rows_processed(query: Any) -> int:
    rows: int = sum(progress["numInputRows"] for progress in query.recentProgress)
    return rows


class Visible:
    """foreachBatch: when each row's body (its publish time) became visible."""

    def __init__(self) -> None:
        self.latencies: list[float] = []

    def __call__(self, frame: Any, batch_id: int) -> None:
        now = time.time()
        for row in frame.collect():
            published = float(bytes(row[0]).split(b" ")[0]) if row[0] else now
            self.latencies.append(now - published)


def latency(
    start_query: Callable[[Visible], Any], publish: Callable[[bytes], None], seconds: float
) -> list[float]:
    visible = Visible()
    query = start_query(visible)
    try:
        time.sleep(5.0)  # the query's first batches (its start) are not what is measured
        sent = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            publish(f"{time.time():.6f} latency".encode())
            sent += 1
            time.sleep(LATENCY_INTERVAL)  # the publishing pace, not a synchronisation
        wait_until(lambda: len(visible.latencies) >= sent, TIME_LIMIT, "every row visible")
        return visible.latencies
    finally:
        query.stop()


def nsq_latency(spark: Any, nsqd: Nsqd, seconds: float) -> list[float]:
    nsqd.create_channels("latency", "bench")

    def start_query(visible: Visible) -> Any:
        return (
            spark.readStream.format("nsq")
            .option("topic", "latency")
            .option("channel", "bench")
            .option("nsqd_tcp_addresses", nsqd.tcp_address)
            .load()
            .select("body")
            .writeStream.foreachBatch(visible)
            .start()
        )

    with httpx.Client(timeout=10) as client:  # one: a client per message costs ~20 ms

        def publish(body: bytes) -> None:
            send_sync(client, nsqd_api.pub(nsqd.http_address, "latency", body))

        return latency(start_query, publish, seconds)


def file_latency(spark: Any, folder: Path, seconds: float) -> list[float]:
    incoming = folder / "latency"
    incoming.mkdir()
    counter = iter(range(10**9))

    def publish(body: bytes) -> None:
        number = next(counter)
        hidden = incoming / f".part{number}.txt"
        hidden.write_bytes(body + b"\n")
        hidden.rename(incoming / f"part{number:06d}.txt")

    def start_query(visible: Visible) -> Any:
        return (
            spark.readStream.text(str(incoming))
            .selectExpr("cast(value as binary) as body")
            .writeStream.foreachBatch(visible)
            .start()
        )

    return latency(start_query, publish, seconds)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def throughput(spark: Any, nsqd: Nsqd, folder: Path, args: argparse.Namespace, batch: int) -> None:
    """Rounds of the file run then, per readers count, the floor run and the nsq run, at
    one batch size; prints a row per readers count."""
    readers = [int(count) for count in args.readers.split(",")]
    ours: dict[int, list[float]] = {count: [] for count in readers}
    floors: dict[int, list[float]] = {count: [] for count in readers}
    files: list[float] = []
    for run in range(1, args.runs + 1):
        files.append(file_throughput(spark, folder, args.messages, batch, f"{batch}-{run}"))
        for count in readers:
            floors[count].append(floor_throughput(spark, args.messages, batch, count))
            name = f"{batch}-{run}-{count}"
            ours[count].append(nsq_throughput(spark, nsqd, args.messages, batch, count, name))
    file = statistics.median(files)
    for count in readers:
        nsq, floor = statistics.median(ours[count]), statistics.median(floors[count])
        print(
            f"{batch:>6} {count:>7}  {runs(ours[count])}{runs(floors[count])}{runs(files)}"
            f"{nsq / file:>9.2f}{floor / file:>9.2f}{nsq / floor:>9.2f}",
            flush=True,
        )


def runs(values: list[float]) -> str:
    return f"{' '.join(f'{value:7,.0f}' for value in values):<26}"


def measure(spark: Any, nsqd: Nsqd, folder: Path, args: argparse.Namespace, where: str) -> None:
    register(spark)
    spark.dataSource.register(FloorSource)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    print(f"{args.messages:,} messages of {BODY_SIZE} bytes, {where}; msgs/s", flush=True)
    print(
        f"{'batch':>6} {'readers':>7}  {'nsq runs':<26}{'floor runs':<26}{'file runs':<26}"
        f"{'nsq/file':>9}{'flr/file':>9}{'nsq/flr':>9}"
    )
    for batch in (int(size) for size in args.batches.split(",")):
        throughput(spark, nsqd, folder, args, batch)
    for name, values in (
        ("nsq", nsq_latency(spark, nsqd, args.seconds)),
        ("file", file_latency(spark, folder, args.seconds)),
    ):
        print(
            f"latency {name}: median {statistics.median(values) * 1000:,.0f} ms, "
            f"p90 {percentile(values, 0.9) * 1000:,.0f} ms over {len(values)} messages"
        )
    print(f"load average after: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--readers", default="1,2,4")
    parser.add_argument("--batches", default="5000,20000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cluster", action="store_true", help="a standalone cluster of two")
    args = parser.parse_args()
    largest = max(int(size) for size in args.batches.split(","))
    print(f"load average before: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nsqtools-bench-")))
        memory = [f"--mem-queue-size={args.messages * 2}"]  # nsqd's disk is not measured
        memory.append(f"--max-rdy-count={2 * largest}")  # two shares of one reader
        (folder / "nsqd").mkdir()
        nsqd = stack.enter_context(Nsqd(folder / "nsqd", extra_args=memory))
        settings = SparkSettings(master="local[2]")
        if args.cluster:
            cluster = stack.enter_context(SparkCluster(folder / "cluster", workers=2))
            settings = SparkSettings(master=cluster.master_url, conf=dict(cluster.submit_conf))
        spark, _ = start(settings, folder / "spark.log")
        stack.callback(spark.stop)
        measure(spark, nsqd, folder, args, "cluster of 2 x 1 core" if args.cluster else "local[2]")


if __name__ == "__main__":
    main()
