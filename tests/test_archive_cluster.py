"""The four `nsq archive` commands and a streaming query on a real Spark standalone
cluster (the test run's shared one: a master and two workers on loopback), each run as
a user runs it, its own driver on `--master spark://...`, and compared with the same in
local mode (local[2], in this process). Each command's tasks must have run on both
executors: read from the driver's Spark event log.

The archives are small on purpose (seconds of data): a driver on the cluster costs tens
of seconds on 2 cores whatever it reads.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nsqtools import formats
from nsqtools.testing import Nsqd, not_in_nsqd, our_tool, wait_until
from nsqtools.testing.spark_cluster import RunningCluster
from tests.conftest import ArchiveRun
from tests.test_archive_compact import ORIGIN, envelopes, message, written_rows

# Spark jobs on a cluster: a driver and two executors each (scripts/test --all runs them).
pytestmark = pytest.mark.slow

Archive = Callable[..., ArchiveRun]
TIME_LIMIT = 300.0  # for one command on the cluster: more is stuck, not slow
WAIT = 180.0  # for a streaming query's output on two busy cores (a minute seen, loaded)
# The event log of a driver on the cluster: one plain JSON-lines file.
EVENT_LOG = {
    "spark.eventLog.enabled": "true",
    "spark.eventLog.compress": "false",
    "spark.eventLog.rolling.enabled": "false",
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four files (four read tasks): JSON bodies and a copy of a message, a non-UTF-8
    body, a raw archive, and a gzip file cut short."""
    directory = tmp_path_factory.mktemp("cluster-archives")
    users = [
        b'{"user": %d, "event": "%s"}' % (n % 3, b"buy" if n % 2 else b"view") for n in range(6)
    ]
    envelopes(
        directory / "orders.h-000000.2026-11-23_00.log.gz",
        [message(n, body=body) for n, body in enumerate(users)],
    )
    envelopes(
        directory / "orders.h-000001.2026-11-23_03.log.gz",
        [message(1, 2, users[1]), message(6, body=b"\xff\xfe"), message(7, body=b"plain")],
    )
    (directory / "clicks.h.2026-11-23_05.log").write_bytes(b"a\nb\n")
    cut = gzip.compress(formats.json_lines([message(n) for n in range(20, 30)], ORIGIN))
    (directory / "orders.h-000002.2026-11-23_10.log.gz").write_bytes(cut[: len(cut) // 2])
    return directory


def on_cluster(cluster: RunningCluster, events: Path, *args: str) -> ArchiveRun:
    """`nsq archive ARGS...` as its own process, a driver on the cluster, its Spark
    event log in `events`."""
    events.mkdir()
    conf = {**cluster.submit_conf, **EVENT_LOG, "spark.eventLog.dir": str(events)}
    argv = [
        *our_tool("nsq"), "archive", *args, "--master", cluster.master_url,
        *(f"--conf={key}={value}" for key, value in conf.items()),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIME_LIMIT, check=False)
    return ArchiveRun(done.returncode, done.stdout, done.stderr)


def executors_with_tasks(events: Path) -> set[str]:
    """The executors that ran a task that succeeded, from the driver's event log."""
    return {task["Task Info"]["Executor ID"] for task in successful_tasks(events)}


def tasks_per_stage(events: Path) -> dict[int, int]:
    """Each completed stage's number of tasks, from the driver's event log. A stage the
    query's stop cancelled (some of its tasks done, some not) is not counted."""
    return {
        record["Stage Info"]["Stage ID"]: record["Stage Info"]["Number of Tasks"]
        for record in event_records(events, "SparkListenerStageCompleted")
        if "Failure Reason" not in record["Stage Info"]
    }


def successful_tasks(events: Path) -> Iterator[dict[str, Any]]:
    """The driver's event log's records of tasks that succeeded."""
    for record in event_records(events, "SparkListenerTaskEnd"):
        if not record["Task Info"]["Failed"]:
            yield record


def event_records(events: Path, kind: str) -> Iterator[dict[str, Any]]:
    """The driver's event log's records of one kind."""
    (log,) = events.iterdir()
    with log.open() as lines:
        for line in lines:
            record = json.loads(line)
            if record["Event"] == kind:
                yield record


def document(run: ArchiveRun) -> dict[str, Any]:
    """A command's --json summary, without its timings."""
    assert run.exit_code == 0, run.stderr
    summary: dict[str, Any] = json.loads(run.stdout)
    summary.pop("seconds", None)
    return summary


def test_compact(
    spark_cluster: RunningCluster, source: Path, tmp_path: Path, spark: Any, nsq_archive: Archive
) -> None:
    events, out = tmp_path / "events", tmp_path / "cluster-out"
    remote = on_cluster(spark_cluster, events, "compact", str(source), "--out", str(out), "--json")
    local = nsq_archive("compact", str(source), "--out", str(tmp_path / "local-out"), "--json")
    assert document(remote) == document(local)
    assert document(remote)["rows_written"] > 0
    assert written_rows(spark, out) == written_rows(spark, tmp_path / "local-out")
    assert len(executors_with_tasks(events)) == spark_cluster.workers


def test_stats(
    spark_cluster: RunningCluster, source: Path, tmp_path: Path, nsq_archive: Archive
) -> None:
    events = tmp_path / "events"
    remote = on_cluster(spark_cluster, events, "stats", str(source), "--json")
    local = nsq_archive("stats", str(source), "--json")
    assert document(remote) == document(local)
    assert len(document(remote)["damaged"]) == 1
    assert len(executors_with_tasks(events)) == spark_cluster.workers


def test_sql_over_the_json_bodies(
    spark_cluster: RunningCluster, source: Path, tmp_path: Path, nsq_archive: Archive
) -> None:
    """data (the bodies' JSON, its schema inferred) and the table itself."""
    events = tmp_path / "events"
    query = (
        "SELECT topic, data.user AS user, count(*) AS n, count(DISTINCT id) AS ids "
        "FROM messages GROUP BY topic, data.user ORDER BY topic, user"
    )
    remote = on_cluster(spark_cluster, events, "sql", query, str(source), "--output", "json")
    local = nsq_archive("sql", query, str(source), "--output", "json")
    assert remote.exit_code == 0, remote.stderr
    assert remote.stdout == local.stdout
    rows = [json.loads(line) for line in remote.stdout.splitlines()]
    assert {"topic": "orders", "user": 1, "n": 3, "ids": 2} in rows  # a copy is a row
    assert len(executors_with_tasks(events)) == spark_cluster.workers


def test_replay(
    spark_cluster: RunningCluster, source: Path, tmp_path: Path, nsqd: Nsqd, nsq_archive: Archive
) -> None:
    events = tmp_path / "events"
    to_nsqd = ("--nsqd-tcp-address", nsqd.tcp_address, "--json")
    remote = on_cluster(spark_cluster, events, "replay", str(source), "--topic", "c", *to_nsqd)
    local = nsq_archive("replay", str(source), "--topic", "l", *to_nsqd)
    assert {**document(remote), "topic": "l"} == document(local)
    published = document(remote)["published"]
    assert published > 0
    assert sorted(nsqd.read("c", published)) == sorted(nsqd.read("l", published))
    assert len(executors_with_tasks(events)) == spark_cluster.workers


# -- A streaming query: format("nsq") in and out -----------------------------------------

INPUT_TOPIC = "live"
MESSAGES = 60


def tagged(spark: Any, nsqd_address: str, channel: str, out_topic: str, checkpoint: str) -> Any:
    """Starts the query: the channel's messages, those whose body does not end in 7,
    tagged with their topic, to out_topic on the same nsqd."""
    address = {"nsqd_tcp_addresses": nsqd_address}
    return (
        spark.readStream.format("nsq")
        .options(topic=INPUT_TOPIC, channel=channel, maxMessagesPerTrigger="20", **address)
        .load()
        .where("NOT cast(body AS string) LIKE '%7'")
        .selectExpr("concat(topic, ':', cast(body AS string)) AS body")
        .writeStream.format("nsq")
        .options(topic=out_topic, checkpointLocation=checkpoint, **address)
        .start()
    )


# The driver of the query on the cluster: it runs until its stdin closes.
CLUSTER_DRIVER = """
import json, sys
sys.path.insert(0, {root!r})
from nsqtools.spark import register
from nsqtools.spark.session import SparkSettings, start
from tests.test_archive_cluster import tagged
settings = json.loads(sys.argv[1])
spark, _ = start(SparkSettings(master=settings["master"], conf=settings["conf"]))
with open(settings["app_id_file"], "w") as file:
    file.write(spark.sparkContext.applicationId)
register(spark)
query = tagged(spark, *settings["query"])
sys.stdin.read()
query.stop()
spark.stop()
"""


@pytest.fixture
def cluster_driver(
    spark_cluster: RunningCluster, nsqd: Nsqd, tmp_path: Path
) -> Iterator[subprocess.Popen[str]]:
    events = tmp_path / "events"
    events.mkdir()
    settings = {
        "master": spark_cluster.master_url,
        "conf": {**spark_cluster.submit_conf, **EVENT_LOG, "spark.eventLog.dir": str(events)},
        "query": [nsqd.tcp_address, "cluster", "out-cluster", str(tmp_path / "cluster-ckpt")],
        "app_id_file": str(tmp_path / "app-id"),
    }
    root = str(Path(__file__).resolve().parent.parent)
    argv = [sys.executable, "-c", CLUSTER_DRIVER.format(root=root), json.dumps(settings)]
    with (tmp_path / "driver.log").open("w") as log:
        driver = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=log, text=True)
    try:
        yield driver
    finally:
        try:
            end(driver)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
            raise


def delivered(nsqd: Nsqd, topic: str, count: int, query: Any = None) -> Callable[[], bool]:
    """Whether `count` messages are in the topic; fails at once if the query failed."""

    def check() -> bool:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        try:
            return nsqd.topic_depth(topic) >= count
        except KeyError:  # no topic yet
            return False

    return check


def test_a_streaming_query(
    spark: Any,
    spark_cluster: RunningCluster,
    nsqd: Nsqd,
    tmp_path: Path,
    cluster_driver: subprocess.Popen[str],
) -> None:
    from nsqtools.spark import register

    nsqd.create_channels(INPUT_TOPIC, "cluster", "local")
    sent = [b"m%03d" % index for index in range(MESSAGES)]
    nsqd.publish_many(INPUT_TOPIC, sent)
    expected = sorted(b"live:" + body for body in sent if not body.endswith(b"7"))
    register(spark)
    local = tagged(spark, nsqd.tcp_address, "local", "out-local", str(tmp_path / "local-ckpt"))
    try:
        wait_until(delivered(nsqd, "out-local", len(expected), local), WAIT, "local mode's output")
    finally:
        local.stop()
    assert sorted(nsqd.read("out-local", len(expected))) == expected
    on_cluster = delivered(nsqd, "out-cluster", len(expected))

    def cluster_delivered() -> bool:
        assert cluster_driver.poll() is None, f"the driver ended: see {tmp_path / 'driver.log'}"
        return on_cluster()

    wait_until(cluster_delivered, WAIT, "the cluster's output")
    assert sorted(nsqd.read("out-cluster", len(expected))) == expected
    assert cluster_driver.poll() is None, "the driver on the cluster ended early"
    end(cluster_driver)
    # Each micro-batch read by two tasks (the cluster's parallelism), one per executor.
    events = tmp_path / "events"
    assert set(tasks_per_stage(events).values()) == {spark_cluster.workers}
    assert len(executors_with_tasks(events)) == spark_cluster.workers


def test_a_streaming_query_through_an_executor_killed(
    nsqd: Nsqd, tmp_path: Path, cluster_driver: subprocess.Popen[str]
) -> None:
    """One of the query's two executors is killed mid-stream (the cluster's worker
    starts another): its Python workers requeue what they held as its daemon ends them,
    the batch's tasks run again, and every message arrives at least once."""
    nsqd.create_channels(INPUT_TOPIC, "cluster")
    sent = [b"m%03d" % index for index in range(400)]
    nsqd.publish_many(INPUT_TOPIC, sent)
    expected = {b"live:" + body for body in sent if not body.endswith(b"7")}

    def running() -> bool:
        assert cluster_driver.poll() is None, f"the driver ended: see {tmp_path / 'driver.log'}"
        return True

    wait_until(lambda: running() and delivered(nsqd, "out-cluster", 60)(), WAIT, "some output")
    app_id = (tmp_path / "app-id").read_text()
    executor = min(executors_of(app_id))
    os.kill(executor, signal.SIGKILL)
    wait_until(
        lambda: running() and delivered(nsqd, "out-cluster", len(expected))(), WAIT, "the rest"
    )
    wait_until(lambda: running() and not trio.run(not_in_nsqd, nsqd, "out-cluster", expected),
               WAIT, "every message at least once")  # fmt: skip


def executors_of(app_id: str) -> set[int]:
    """The executor processes (JVMs) of the application."""
    found = set()
    for process in Path("/proc").glob("[0-9]*"):
        try:
            command = (process / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in command and (
            app_id.encode() in command
        ):
            found.add(int(process.name))
    return found


def end(driver: subprocess.Popen[str]) -> None:
    """The driver stops its query and ends once its stdin closes."""
    assert driver.stdin is not None
    driver.stdin.close()
    driver.wait(WAIT)
