"""format("nsq") in Structured Streaming, on real PySpark (local mode) and real nsqd:
every message once through a query, FIN only on Spark's commit, requeued at once when a
query stops uncommitted, no redelivery under a batch slower than msg_timeout, and the
sink through a destination nsqd's restart."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nsqtools.spark import register
from nsqtools.testing import Nsqd, wait_until
from nsqtools.testing.cluster import not_in_nsqd
from nsqtools.testing.faults.targets_spark import driver
from nsqtools.testing.processes import connected_to, descends_from
from tests.conftest import DURABLE, LocalNsq

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

TOPIC = "live"
WAIT = 90.0  # for Spark's micro-batches on two busy cores


@pytest.fixture
def nsq_spark(spark: Any) -> Any:
    register(spark)
    return spark


def source(spark: Any, nsqd: Nsqd, channel: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("nsq")
        .option("topic", TOPIC)
        .option("channel", channel)
        .option("nsqd_tcp_addresses", nsqd.tcp_address)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.fixture
def queries() -> Iterator[list[Any]]:
    """Streaming queries the test started, stopped at its end whatever happens."""
    started: list[Any] = []
    yield started
    for query in started:
        query.stop()


def rows_of(spark: Any, table: str) -> list[Any]:
    rows: list[Any] = spark.sql(f"SELECT * FROM {table}").collect()
    return rows


def bodies(count: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{index:04d}".encode() for index in range(count)]


def settled(nsqd: Nsqd, channel: str, finished: int) -> Callable[[], bool]:
    """Every message FIN'd: none waiting, none in flight, `finished` FINs."""

    def check() -> bool:
        try:
            stats = nsqd.channel_stats(TOPIC, channel)
        except KeyError:  # not subscribed yet
            return False
        fins = sum(client.finish_count for client in stats.clients)
        return stats.depth == 0 and stats.in_flight_count == 0 and fins == finished

    return check


def test_every_message_once_and_each_finished_when_committed(
    nsq_spark: Any, nsqd: Nsqd, queries: list[Any]
) -> None:
    """Two readers (the session's parallelism, local[2]): two consumers, each taking its
    share of every batch."""
    sent = bodies(120)
    nsqd.publish_many(TOPIC, sent)
    stream = source(nsq_spark, nsqd, "memory", maxMessagesPerTrigger="50")
    queries.append(stream.writeStream.format("memory").queryName("every").start())
    consumers: set[str] = set()

    def every_row() -> bool:
        with contextlib.suppress(KeyError):  # not subscribed yet
            clients = nsqd.channel_stats(TOPIC, "memory").clients
            consumers.update(client.remote_address for client in clients)
        return len(rows_of(nsq_spark, "every")) >= len(sent)

    wait_until(every_row, WAIT, "every row")
    assert len(consumers) >= 2
    rows = rows_of(nsq_spark, "every")
    assert sorted(row.body for row in rows) == sent
    assert len({row.id for row in rows}) == len(sent)
    assert {(row.topic, row.nsqd_address, row.attempts) for row in rows} == {
        (TOPIC, nsqd.tcp_address, 1)
    }
    # The last batch too: an empty batch after it makes Spark commit it.
    wait_until(settled(nsqd, "memory", len(sent)), WAIT, "every message FIN'd")
    sizes = [progress["numInputRows"] for progress in queries[0].recentProgress]
    assert max(sizes) <= 50


class Gate:
    """A foreachBatch function that records each batch's bodies and holds the first
    until released: a micro-batch caught before Spark commits it."""

    def __init__(self, hold_for: float = 0.0) -> None:
        self.seen: list[bytes] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold_for = hold_for

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.seen.extend(row.body for row in frame.collect())
        if not self.entered.is_set() and self.seen:
            self.entered.set()
            if self.hold_for:
                time.sleep(self.hold_for)  # the slow batch itself, not a synchronisation
            else:
                self.release.wait(WAIT)


def test_a_query_stopped_before_its_commit_requeues_at_once(
    nsq_spark: Any, nsqd: Nsqd, queries: list[Any]
) -> None:
    """msg_timeout is 2 minutes: what comes back within the wait came back by REQ."""
    sent = bodies(40)
    nsqd.publish_many(TOPIC, sent)
    gate = Gate()
    options = {"msg_timeout": "2m", "maxMessagesPerTrigger": "100"}
    first = source(nsq_spark, nsqd, "restart", **options).writeStream.foreachBatch(gate).start()
    assert gate.entered.wait(WAIT), "the first batch"
    stopping = threading.Thread(target=first.stop)
    stopping.start()
    gate.release.set()
    stopping.join(WAIT)
    assert gate.seen and set(gate.seen) <= set(sent)  # the first batch (a new nsqd
    # connection starts at RDY 1: it may hold a single message)
    stats = nsqd.channel_stats(TOPIC, "restart")
    assert sum(client.finish_count for client in stats.clients) == 0, "nothing committed"
    wait_until(lambda: nsqd.channel_stats(TOPIC, "restart").depth == len(sent), 30, "all requeued")
    again = source(nsq_spark, nsqd, "restart", **options)
    queries.append(again.writeStream.format("memory").queryName("again").start())
    wait_until(lambda: len(rows_of(nsq_spark, "again")) >= len(sent), WAIT, "every row again")
    rows = rows_of(nsq_spark, "again")
    assert sorted(row.body for row in rows) == sent
    # Back by REQ (a batch planned while the query stopped may have taken some again).
    assert min(row.attempts for row in rows if row.body in gate.seen) >= 2


def test_a_batch_slower_than_msg_timeout_is_not_redelivered(
    nsq_spark: Any, nsqd: Nsqd, queries: list[Any]
) -> None:
    sent = bodies(30)
    nsqd.publish_many(TOPIC, sent)
    gate = Gate(hold_for=5.0)  # msg_timeout is 2s: TOUCHes keep the messages
    stream = source(nsq_spark, nsqd, "slow", msg_timeout="2s", maxMessagesPerTrigger="100")
    queries.append(stream.writeStream.foreachBatch(gate).start())
    wait_until(settled(nsqd, "slow", len(sent)), WAIT, "every message FIN'd")
    stats = nsqd.channel_stats(TOPIC, "slow")
    assert (stats.timeout_count, stats.requeue_count) == (0, 0)
    assert sorted(gate.seen) == sent


def test_every_message_through_an_nsqd_restart(
    nsq_spark: Any, durable_nsq: LocalNsq, queries: list[Any]
) -> None:
    """nsqd is killed and restarted while the query reads (its queue on disk): the
    readers reconnect, and every message arrives at least once."""
    nsqd = durable_nsq.nsqd("restarting", extra_args=DURABLE)
    sent = bodies(300)
    nsqd.publish_many(TOPIC, sent)
    gate = Gate(hold_for=0.5)  # slow batches: the restart comes mid-stream
    stream = source(nsq_spark, nsqd, "restart", maxMessagesPerTrigger="20")
    queries.append(stream.writeStream.foreachBatch(gate).start())
    assert gate.entered.wait(WAIT), "the first batch"
    nsqd.kill()
    nsqd.start()
    wait_until(lambda: set(gate.seen) == set(sent), WAIT, "every message")
    assert queries[0].exception() is None


def test_every_message_through_a_driver_killed_and_restarted(nsqd: Nsqd, tmp_path: Path) -> None:
    """The application's driver (a process of its own, local[2]) is killed mid-stream:
    its JVM and its Python workers end with it, the readers requeueing (none of the
    messages comes back by nsqd's timeout). The application started again from its
    checkpoint gets every message."""
    sent = bodies(2000)
    nsqd.publish_many(TOPIC, sent)
    out = tmp_path / "batches.txt"
    argv = driver("source", nsqd.tcp_address, TOPIC, "driver", str(tmp_path / "ckpt"), str(out))

    def written() -> set[bytes]:
        return set(out.read_bytes().splitlines()) if out.exists() else set()

    with driver_process(argv, tmp_path / "first", nsqd) as first:
        wait_until(lambda: len(written()) >= 200, WAIT, "the first batches")
        first.kill()  # the driver alone: its JVM ends as its stdin closes
    assert written() != set(sent), "the query ended before it was killed"
    wait_until(lambda: not subscribed(nsqd, "driver"), WAIT, "its readers gone with it")
    assert nsqd.channel_stats(TOPIC, "driver").in_flight_count == 0
    assert nsqd.channel_stats(TOPIC, "driver").timeout_count == 0, "back by a timeout, not REQ"
    with driver_process(argv, tmp_path / "again", nsqd):
        wait_until(lambda: written() == set(sent), WAIT, "every message")


@contextlib.contextmanager
def driver_process(
    argv: list[str], directory: Path, nsqd: Nsqd
) -> Iterator[subprocess.Popen[bytes]]:
    """The driver, running once its readers are subscribed (a JVM's start on a busy
    machine is no part of what a test waits for), ended at the block's end; on a failure
    its output and Spark's log (kept in `directory`) are shown."""
    directory.mkdir()
    environment = {**os.environ, "TMPDIR": str(directory)}  # where the driver logs
    with (directory / "output").open("w") as output:
        process = subprocess.Popen(
            argv, stdout=output, stderr=output, env=environment, start_new_session=True
        )
    try:
        wait_until(
            lambda: subscribed(nsqd, "driver") or process.poll() is not None, 3 * WAIT, "subscribed"
        )
        assert process.poll() is None, "the driver ended"
        yield process
    except BaseException:
        for log in sorted(directory.iterdir()):
            sys.stderr.write(f"--- {log}\n{log.read_text(errors='replace')[-4000:]}\n")
        raise
    finally:
        process.terminate()
        process.wait(WAIT)


def subscribed(nsqd: Nsqd, channel: str) -> bool:
    try:
        return bool(nsqd.channel_stats(TOPIC, channel).clients)
    except KeyError:  # no such channel yet
        return False


def test_the_sink_through_a_destination_restart(
    nsq_spark: Any, durable_nsq: LocalNsq, tmp_path: Path, queries: list[Any]
) -> None:
    """Text files in, one per micro-batch; the destination nsqd is killed and restarted
    after the first: every line arrives at least once."""
    destination = durable_nsq.nsqd("destination", extra_args=DURABLE)
    destination.create_channels("out")  # the topic, holding what comes until it is read
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    sent = bodies(400, "row")
    for part in range(4):
        (incoming / f"part{part}.txt").write_bytes(b"\n".join(sent[part * 100 : part * 100 + 100]))
    stream = (
        nsq_spark.readStream.option("maxFilesPerTrigger", "1")
        .text(str(incoming))
        .withColumnRenamed("value", "body")
    )
    query = (
        stream.writeStream.format("nsq")
        .option("nsqd_tcp_addresses", destination.tcp_address)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    queries.append(query)
    wait_until(lambda: destination.topic_depth("out") > 0, WAIT, "the first batch")
    destination.kill()
    destination.start()
    query.processAllAvailable()
    assert query.exception() is None
    missing = trio.run(not_in_nsqd, destination, "out", set(sent))
    assert not missing, f"{len(missing)} rows lost"


def test_a_missing_option_is_named(nsq_spark: Any, nsqd: Nsqd) -> None:
    stream = (
        nsq_spark.readStream.format("nsq").option("nsqd_tcp_addresses", nsqd.tcp_address).load()
    )
    query = stream.writeStream.format("memory").queryName("missing").start()
    try:
        with pytest.raises(Exception, match=r'needs \.option\("topic", \.\.\.\)'):
            query.awaitTermination(WAIT)
    finally:
        query.stop()


NO_REUSE_SCRIPT = """
import sys
from nsqtools.spark import register
from nsqtools.spark.session import SparkSettings, start
conf = {"spark.python.worker.reuse": "false"}
spark, _ = start(SparkSettings(master="local[1]", conf=conf))
register(spark)
query = (spark.readStream.format("nsq").option("topic", sys.argv[1]).option("channel", "c")
         .option("nsqd_tcp_addresses", sys.argv[2]).load()
         .writeStream.format("memory").queryName("q").start())
try:
    query.awaitTermination(120)
except Exception as error:
    print(error)
"""


def test_workers_that_spark_does_not_keep_are_refused(nsqd: Nsqd, tmp_path: Path) -> None:
    """With spark.python.worker.reuse off, a reader would end with its task: the query
    fails, saying why."""
    argv = [sys.executable, "-c", NO_REUSE_SCRIPT, TOPIC, nsqd.tcp_address]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT, cwd=tmp_path)
    assert "spark.python.worker.reuse must be true" in result.stdout, result.stderr[-2000:]


def test_the_readmes_pipelines(
    nsq_spark: Any, nsqd: Nsqd, tmp_path: Path, queries: list[Any]
) -> None:
    """As the README shows them: windowed counts of a topic, and a topic filtered into
    another topic."""
    from pyspark.sql.functions import col, window

    nsqd.create_channels("click-errors", "check")
    nsqd.create_channels(TOPIC, "counts", "errors")  # each gets every message
    sent = [b"ok 1", b"error 2", b"ok 3", b"error 4"]
    nsqd.publish_many(TOPIC, sent)

    def clicks(channel: str) -> Any:
        return source(nsq_spark, nsqd, channel, maxMessagesPerTrigger="5000")

    counts = clicks("counts").groupBy(window("timestamp", "1 minute")).count()
    # Spark's 200 shuffle partitions cost seconds per micro-batch on two cores.
    nsq_spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        queries.append(
            counts.writeStream.outputMode("complete").format("memory").queryName("counts").start()
        )
    finally:
        nsq_spark.conf.unset("spark.sql.shuffle.partitions")
    queries.append(
        clicks("errors")
        .where(col("body").cast("string").contains("error"))
        .select("body")
        .writeStream.format("nsq")
        .option("nsqd_tcp_addresses", nsqd.tcp_address)
        .option("topic", "click-errors")
        .option("checkpointLocation", str(tmp_path / "click-errors"))
        .start()
    )

    def counted() -> bool:
        total: int = sum(row["count"] for row in rows_of(nsq_spark, "counts"))
        return total == len(sent)

    wait_until(counted, WAIT, "every message counted")
    wait_until(lambda: nsqd.channel_stats("click-errors", "check").depth == 2, WAIT, "errors")


READER_SCRIPT = """
import sys, time
from pyspark.sql.streaming.datasource import ReadMaxRows
from nsqtools.spark import readers
from nsqtools.spark.streaming import NsqStreamReader, ReaderPartition, SourceSettings

options = {"topic": sys.argv[1], "channel": "term", "nsqd_tcp_addresses": sys.argv[2],
           "msg_timeout": "2m", "readers": "1"}
reader = NsqStreamReader(SourceSettings.of(options))
start = reader.initialOffset()
[task] = reader.partitions(start, reader.latestOffset(start, ReadMaxRows(1000)))
deadline = time.monotonic() + 30
while not list(reader.read(task)):  # as Spark's read tasks would, batch after batch
    assert time.monotonic() < deadline, "no message came"
    task = ReaderPartition(task.coordinator, task.batch + 1, task.slot, task.limit)
holder = readers.holder_for(reader.settings, task.coordinator)
print("holding", flush=True)
"""
HOLD = READER_SCRIPT + "time.sleep(120)\n"
# As PySpark's daemon ends a worker whose socket Spark closed.
HOLD_THEN_EXIT = READER_SCRIPT + "import os; os._exit(3)\n"
# Spark's thread (this one) holds the holder's lock until it reads a line.
HOLD_THE_LOCK = (
    READER_SCRIPT
    + """
with holder.lock:
    print("locked", flush=True)
    sys.stdin.readline()
time.sleep(120)
"""
)


def requeued(nsqd: Nsqd, count: int) -> Callable[[], bool]:
    """Every message back: msg_timeout is 2 minutes, so within the wait the worker
    requeued them."""

    def check() -> bool:
        stats = nsqd.channel_stats(TOPIC, "term")
        return (stats.depth, stats.in_flight_count) == (count, 0) and stats.requeue_count > 0

    return check


def test_sigterm_to_the_readers_worker_requeues_at_once(nsqd: Nsqd) -> None:
    """Spark may end the reader's worker with SIGTERM and no stop()."""
    nsqd.create_channels(TOPIC, "term")
    nsqd.publish_many(TOPIC, bodies(20))
    worker = subprocess.Popen(
        [sys.executable, "-c", HOLD, TOPIC, nsqd.tcp_address],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "holding\n"
        assert nsqd.channel_stats(TOPIC, "term").in_flight_count > 0
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == -signal.SIGTERM
    finally:
        worker.kill()
    wait_until(requeued(nsqd, 20), 30, "every message requeued")


def test_a_worker_ended_by_os_exit_requeues_first(nsqd: Nsqd) -> None:
    """PySpark's daemon ends a worker with os._exit when Spark closes its socket (the
    executor stopping, the query's driver gone): no atexit hook runs, yet the holder
    must requeue before the process ends."""
    nsqd.create_channels(TOPIC, "term")
    nsqd.publish_many(TOPIC, bodies(20))
    worker = subprocess.run(
        [sys.executable, "-c", HOLD_THEN_EXIT, TOPIC, nsqd.tcp_address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (worker.returncode, worker.stdout) == (3, "holding\n"), worker.stderr
    wait_until(requeued(nsqd, 20), 30, "every message requeued")


def test_sigterm_twice_while_sparks_thread_holds_the_lock_requeues_and_ends(nsqd: Nsqd) -> None:
    """SIGTERM comes while Spark's thread holds the source's lock, and the consumer's
    thread waits for it (a message arrived): the handler must not wait for the consumer
    in the thread it interrupted, and a second SIGTERM is the same one again."""
    nsqd.create_channels(TOPIC, "term")
    nsqd.publish_many(TOPIC, bodies(20))
    worker = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, TOPIC, nsqd.tcp_address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdin is not None and worker.stdout is not None
        assert worker.stdout.readline() == "holding\n"
        assert worker.stdout.readline() == "locked\n"
        nsqd.publish(TOPIC, b"while locked")
        wait_until(lambda: waits_for_a_lock(worker.pid), 30, "the consumer to wait for the lock")
        worker.send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGTERM)
        worker.stdin.write("\n")
        worker.stdin.flush()
        assert worker.wait(30) == -signal.SIGTERM
    finally:
        worker.kill()
    wait_until(requeued(nsqd, 21), 30, "every message requeued")


def waits_for_a_lock(pid: int) -> bool:
    """The process's threads other than its main one: one waits for a lock (a futex),
    and one only waits in epoll (the script's coordinator's trio loop, idle; the
    consumer's loop is not idle)."""
    waits = [
        (task / "wchan").read_text()
        for task in Path(f"/proc/{pid}/task").iterdir()
        if task.name != str(pid)
    ]
    return "futex_do_wait" in waits and waits.count("do_epoll_wait") == 1


def test_a_worker_whose_parent_is_gone_requeues_and_exits(nsqd: Nsqd) -> None:
    """A JVM that was killed sends no SIGTERM and calls no stop(): the worker, its child
    (here a shell's), must not stay behind holding messages."""
    nsqd.create_channels(TOPIC, "term")
    nsqd.publish_many(TOPIC, bodies(20))
    worker = shlex.join([sys.executable, "-c", HOLD, TOPIC, nsqd.tcp_address])
    parent = subprocess.Popen(
        ["sh", "-c", f"{worker} & echo $!; wait"], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline() == "holding\n"
        parent.kill()
        parent.wait()
        wait_until(lambda: not alive(pid), 30, "the orphaned worker to exit")
    finally:
        parent.kill()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    wait_until(requeued(nsqd, 20), 30, "every message requeued")


def alive(pid: int) -> bool:
    """Running: not gone, nor a zombie nobody has reaped yet."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def takers_of_sigterm(pid: int) -> set[int]:
    """The process's threads that do not block SIGTERM (the kernel gives the process's
    SIGTERM to one of them)."""
    takers = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        blocked = next(line for line in status.splitlines() if line.startswith("SigBlk:"))
        if not int(blocked.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            takers.add(int(task.name))
    return takers


def waiters_for_a_signal(pid: int) -> set[int]:
    """The process's threads waiting in sigwait() (the kernel unblocks what they wait
    for while they wait)."""
    return {
        int(task.name)
        for task in Path(f"/proc/{pid}/task").iterdir()
        if (task / "wchan").read_text().startswith("do_sigtimedwait")
    }


def source_workers(nsqd: Nsqd) -> set[int]:
    """The Python workers this test's Spark reads nsqd in (its consumers' processes)."""
    port = int(nsqd.tcp_address.rpartition(":")[2])
    return {pid for pid in connected_to(port) if descends_from(pid, os.getpid())}


def test_sigterm_twice_to_a_querys_source_worker(
    nsq_spark: Any, nsqd: Nsqd, queries: list[Any]
) -> None:
    """The readers' workers of a running query get SIGTERM twice, as the JVM, then its
    process group, may send it: each requeues what it holds at once and ends, and the
    query goes on."""
    sent = bodies(40)
    nsqd.publish_many(TOPIC, sent)
    gate = Gate()
    options = {"msg_timeout": "2m", "maxMessagesPerTrigger": "10"}
    query = source(nsq_spark, nsqd, "worker", **options).writeStream.foreachBatch(gate).start()
    queries.append(query)
    assert gate.entered.wait(WAIT), "the first batch"
    workers = source_workers(nsqd)
    assert workers
    for worker in workers:
        # No thread takes it but the one waiting for it (sigwait), which requeues first.
        assert takers_of_sigterm(worker) == waiters_for_a_signal(worker)
        os.kill(worker, signal.SIGTERM)
        os.kill(worker, signal.SIGTERM)
    wait_until(lambda: not any(map(alive, workers)), 30, "the workers to end")
    gate.release.set()
    # The query goes on with new workers: every message comes, those the ended workers
    # held by their REQ (msg_timeout is 2 minutes: none by a timeout).
    wait_until(lambda: set(gate.seen) == set(sent), WAIT, "every message")
    stats = nsqd.channel_stats(TOPIC, "worker")
    assert stats.requeue_count > 0 and stats.timeout_count == 0
