"""nsq archive replay on archives made here, to a real nsqd, on the test run's
SparkSession: the bodies read back byte-equal, --where, --rate, time order, and an nsqd
that is down."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio

from nsqtools import formats
from nsqtools.config import ClientConfig
from nsqtools.consumer import ConsumerOptions, open_consumer
from nsqtools.protocol import Message
from nsqtools.testing import Nsqd
from tests.conftest import ArchiveRun

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

BASE_NS = int(datetime(2026, 11, 23, tzinfo=UTC).timestamp()) * 10**9
SECOND_NS = 10**9
# Bodies a line-based consumer or a UTF-8 decoder would damage.
AWKWARD_BODIES = [b"two\nlines", b"\xff\xfenot utf-8", b'{"json": "\\n"}', b"\r\n", b"\x00"]


def message(index: int, body: bytes, attempts: int = 1, seconds: int | None = None) -> Message:
    offset = index if seconds is None else seconds
    return Message(
        id=b"%016x" % index, timestamp=BASE_NS + offset * SECOND_NS, attempts=attempts, body=body
    )


def archive(directory: Path, topic: str, messages: list[Message], junk: bytes = b"") -> Path:
    """An nsq_to_file --format json --gzip archive of the messages (and junk lines)."""
    directory.mkdir(exist_ok=True)
    path = directory / f"{topic}.host-000000.2026-11-23_00.log.gz"
    origin = formats.Origin(topic, "archive", "127.0.0.1:4150")
    path.write_bytes(gzip.compress(formats.json_lines(messages, origin) + junk))
    return path


def summary(run: ArchiveRun) -> dict[str, Any]:
    assert run.exit_code == 0, run.stderr
    document: dict[str, Any] = json.loads(run.stdout)
    return document


def replay(
    nsq_archive: Callable[..., ArchiveRun], source: Path, nsqd: Nsqd, topic: str, *args: str
) -> ArchiveRun:
    return nsq_archive(
        "replay", str(source), "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address, *args
    )


def read_back(nsqd: Nsqd, topic: str, count: int) -> list[Message]:
    """The topic's messages, as nsqd delivers them, with the time nsqd took each."""

    async def read() -> list[Message]:
        messages: list[Message] = []
        config = ClientConfig(max_in_flight=count)
        with trio.fail_after(60):
            async with open_consumer(
                topic, "check", config, ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address])
            ) as consumer:
                async for batch in consumer:
                    messages.extend(batch.messages)
                    batch.finish()
                    if len(messages) >= count:
                        return messages
        raise AssertionError("the consumer stopped")

    return trio.run(read)


def test_bodies_are_published_again_byte_equal(
    tmp_path: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    orders = [message(i, body) for i, body in enumerate([*AWKWARD_BODIES, b"order 5"])]
    payments = [message(10 + i, b"payment %d" % i) for i in range(3)]
    source = tmp_path / "src"
    archive(source, "orders", orders, junk=b"not an envelope\n")
    archive(source, "payments", payments)
    result = summary(replay(nsq_archive, source, nsqd, "replayed", "--json"))
    assert (result["published"], result["failed"], result["malformed"]) == (9, 0, 1)
    assert result["by_topic"] == {
        "orders": {"published": 6, "failed": 0},
        "payments": {"published": 3, "failed": 0},
    }
    assert nsqd.topic_depth("replayed") == 9
    expected = [item.body for item in orders + payments]
    assert sorted(nsqd.read("replayed", 9)) == sorted(expected)


def test_where_selects_and_a_partition_goes_out_in_time_order(
    tmp_path: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    # One file (one partition), written out of time order; odd ones were requeued.
    seconds = [5, 1, 4, 0, 3, 2, 7, 6]
    messages = [
        message(i, b"at %d" % second, attempts=1 + i % 2, seconds=second)
        for i, second in enumerate(seconds)
    ]
    source = archive(tmp_path / "src", "orders", messages)
    where = "topic = 'orders' AND attempts < 2"
    result = summary(replay(nsq_archive, source, nsqd, "firsts", "--where", where, "--json"))
    assert (result["published"], result["failed"]) == (4, 0)
    wanted = sorted(second for i, second in enumerate(seconds) if i % 2 == 0)
    assert [item.body for item in read_back(nsqd, "firsts", 4)] == [b"at %d" % s for s in wanted]


def test_rate_is_shared_by_the_tasks_that_run_at_once(
    tmp_path: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    source = tmp_path / "src"
    # Two files, two partitions: two tasks at once on local[2], each at 10/s.
    for topic, first in (("a", 0), ("b", 100)):
        archive(
            source, topic, [message(first + i, b"%s %d" % (topic.encode(), i)) for i in range(20)]
        )
    rate, count = 20, 40
    result = summary(replay(nsq_archive, source, nsqd, "paced", "--rate", str(rate), "--json"))
    assert (result["published"], result["tasks"]) == (count, 2)
    taken = [item.timestamp for item in read_back(nsqd, "paced", count)]
    # Each task: its first message at once, then one every tasks/rate seconds; those
    # paced while its connection was still being made go together once it is (half a
    # second allowed for that on a loaded machine).
    least = (count - result["tasks"]) / rate
    assert (max(taken) - min(taken)) / SECOND_NS >= least - 0.5


def test_a_rate_below_the_tasks_at_once_runs_fewer_tasks(
    tmp_path: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    """Two partitions at 1/s overall: one task at 1/s (two tasks at 0.5/s each would
    never gather a whole token)."""
    source = tmp_path / "src"
    archive(source, "a", [message(0, b"a")])
    archive(source, "b", [message(1, b"b")])
    result = summary(replay(nsq_archive, source, nsqd, "slow", "--rate", "1", "--json"))
    assert (result["published"], result["tasks"]) == (2, 1)
    taken = [item.timestamp for item in read_back(nsqd, "slow", 2)]
    assert (max(taken) - min(taken)) / SECOND_NS >= 1 - 0.5  # as above: the connection


def test_an_nsqd_down_gives_exit_1_and_a_count_in_one_line(
    tmp_path: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    source = archive(tmp_path / "src", "orders", [message(i, b"m%d" % i) for i in range(3)])
    run = nsq_archive(
        "replay", str(source), "--topic", "half", "--json",
        "--nsqd-tcp-address", nsqd.tcp_address, "--nsqd-tcp-address", "127.0.0.1:1",
    )  # fmt: skip
    assert run.exit_code == 1
    assert run.stderr.splitlines() == [
        "nsq archive: error: 3 of 3 messages were not published to every nsqd: cannot "
        "connect to 127.0.0.1:1: connection refused (3)"
    ]
    assert json.loads(run.stdout)["by_topic"] == {"orders": {"published": 0, "failed": 3}}
    assert nsqd.topic_depth("half") == 3  # the live nsqd still has them


def test_a_bad_condition_or_topic_is_one_line(
    tmp_path: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    source = archive(tmp_path / "src", "orders", [message(0, b"m")])
    run = replay(nsq_archive, source, nsqd, "t", "--where", "no_such_column = 1")
    assert run.exit_code == 1
    [line] = run.stderr.splitlines()
    assert line.startswith("nsq archive: error: --where 'no_such_column = 1': "), line
    run = replay(nsq_archive, source, nsqd, "bad topic!")
    assert run.exit_code == 1
    [line] = run.stderr.splitlines()
    assert line.startswith("nsq archive: error: ") and "bad topic!" in line, line


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_cancels_the_job_and_says_so(
    nsqd: Nsqd, tmp_path: Path, signame: str
) -> None:
    """A stop signal while replay publishes (a whole program, its own Spark): the job is
    cancelled, exit 1 with one line (part may have gone out), no traceback, at once.
    SIGINT too, though PySpark's SparkContext installs a handler of its own for it."""
    import signal
    import subprocess

    from nsqtools.testing import our_tool, wait_until

    source = archive(tmp_path / "in", "orders", [message(i, b"m%d" % i) for i in range(300)])
    argv = [*our_tool("nsq"), "archive", "replay", str(source), "--topic=replayed"]
    argv += [f"--nsqd-tcp-address={nsqd.tcp_address}", "--rate=20"]
    with subprocess.Popen(argv, stderr=subprocess.PIPE) as tool:

        def publishing() -> bool:
            topics = nsqd.stats(topic="replayed").topics
            return bool(topics) and topics[0].message_count > 0

        wait_until(publishing, 120, "replay to publish")
        tool.send_signal(signal.Signals[signame])
        _, stderr = tool.communicate(timeout=60)
    assert tool.returncode == 1, stderr
    assert stderr.decode().strip().endswith("stopped by a signal before the job's end")
    assert b"Traceback" not in stderr
    assert nsqd.stats(topic="replayed").topics[0].message_count < 300


# Runs `nsq archive` with PySpark's SIGINT handler sending the process a SIGINT as it is
# installed: the signal comes while the session starts, in PySpark's handler's window.
_SIGINT_AS_PYSPARK_TAKES_IT = """
import os, signal, sys, types
sys.path.insert(0, {root!r})
import pyspark.core.context as context
from nsqtools.entry import nsq

def installing(signum, handler):
    previous = signal.signal(signum, handler)
    if signum == signal.SIGINT and handler.__name__ == "signal_handler":
        os.kill(os.getpid(), signal.SIGINT)
    return previous

context.signal = types.SimpleNamespace(signal=installing, SIGINT=signal.SIGINT)
sys.argv = ["nsq", *{arguments!r}]
nsq()
"""


def test_a_sigint_while_spark_starts_is_the_stop_too(tmp_path: Path) -> None:
    """PySpark's SparkContext puts its own SIGINT handler in place before the session's
    start ends (the program's is put back then): a SIGINT in between stops the command
    as any first stop does, exit 1 and one line, not 130 without a word."""
    import subprocess
    import sys

    from nsqtools.testing.binaries import PACKAGE_ROOT

    source = archive(tmp_path / "in", "orders", [message(1, b"m")])
    arguments = ["archive", "compact", str(source), "--out", str(tmp_path / "out")]
    code = _SIGINT_AS_PYSPARK_TAKES_IT.format(root=str(PACKAGE_ROOT), arguments=arguments)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert stderr.strip().endswith("stopped by a signal before the job's end")
    assert "Traceback" not in stderr
    assert not (tmp_path / "out").exists()
