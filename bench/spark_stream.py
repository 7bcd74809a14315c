"""Issues 15's and 29's measure: format("nsq") in Structured Streaming, beside Spark's own
file source carrying the same messages through the same query, so that NSQ's part shows.

Throughput: N messages (100-byte bodies) wait in a topic of a local nsqd (memory queue,
its --max-rdy-count raised so that every reader's RDY can cover two shares of the
largest batch); a query reads them with format("nsq") at maxMessagesPerTrigger B and
`readers` R (read tasks per batch) into Spark's no-op sink, timed from the end of its
first batch (nsqd's first FIN: the query's start is not the source's cost) until nsqd
counts every message FIN'd (every batch committed). The file pipeline: the same N
bodies as text files of B lines, read with maxFilesPerTrigger 1 into the same sink,
timed from the end of its first batch until it has processed N rows. All in one
session, alternating (per batch size and round: the file run, then one nsq run per
readers count), --runs rounds; medians of messages per second and their ratio.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi import send_sync
from nsqtools.spark import register
from nsqtools.spark.session import SparkSettings, start
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

        def processed() -> int:
            rows: int = sum(progress["numInputRows"] for progress in query.recentProgress)
            return rows

        return rate(processed, count)
    finally:
        query.stop()


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
    """Rounds of the file run then one nsq run per readers count, at one batch size;
    prints a row per readers count."""
    readers = [int(count) for count in args.readers.split(",")]
    ours: dict[int, list[float]] = {count: [] for count in readers}
    files: list[float] = []
    for run in range(1, args.runs + 1):
        files.append(file_throughput(spark, folder, args.messages, batch, f"{batch}-{run}"))
        for count in readers:
            name = f"{batch}-{run}-{count}"
            ours[count].append(nsq_throughput(spark, nsqd, args.messages, batch, count, name))
    for count in readers:
        ratio = statistics.median(ours[count]) / statistics.median(files)
        print(
            f"{batch:>6} {count:>7}  {' '.join(f'{v:8,.0f}' for v in ours[count]):<28}"
            f"{' '.join(f'{v:8,.0f}' for v in files):<28}{ratio:.2f}",
            flush=True,
        )


def measure(spark: Any, nsqd: Nsqd, folder: Path, args: argparse.Namespace, where: str) -> None:
    register(spark)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    print(f"{args.messages:,} messages of {BODY_SIZE} bytes, {where}; msgs/s", flush=True)
    print("batch  readers  nsq runs                    file runs                   nsq/file")
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
