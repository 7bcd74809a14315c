"""The pipeline end to end: messages published to a real nsqd, archived by nsq_to_file
(ours: --format json --gzip, rotated, killed with SIGKILL once midway and restarted;
Go's: raw lines), then compacted, counted, queried and replayed by nsq archive."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nsqtools.testing import Nsqd, find_binary, our_tool, wait_until
from tests.conftest import ArchiveRun, LocalNsq

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

TOPIC = "orders"
CHANNEL = "archive"
DEADLINE = 60.0
COUNT = 3000


def bodies() -> list[bytes]:
    """Distinct bodies; some hold newlines, some are not UTF-8."""
    made = []
    for index in range(COUNT):
        body = b"order %d" % index
        if index % 50 == 0:
            body += b"\nsecond line\r\n"
        if index % 70 == 0:
            body += b"\xff\xfe\x80"
        made.append(body)
    return made


def publish(nsqd: Nsqd, topic: str, to_publish: list[bytes]) -> None:
    nsqd.publish_many(topic, [body for body in to_publish if b"\n" not in body])
    for body in to_publish:
        if b"\n" in body:
            nsqd.publish(topic, body)


def finished(nsqd: Nsqd) -> int:
    """Messages FIN'd on the channel by the clients connected now."""
    try:
        stats = nsqd.channel_stats(TOPIC, CHANNEL)
    except KeyError:
        return 0
    return sum(client.finish_count for client in stats.clients)


def start_to_file(arguments: list[str], stderr: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*our_tool("nsq_to_file"), *arguments],
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("wb"),
    )


def test_archived_by_nsq_to_file_killed_midway_then_compacted_exactly_once(
    local_nsq: LocalNsq,
    tmp_path: Path,
    spark: Any,
    nsq_archive: Callable[..., ArchiveRun],
) -> None:
    # In-flight messages of the killed run come back after 2 s, not nsqd's default 60 s.
    nsqd = local_nsq.nsqd(extra_args=["--msg-timeout=2s"])
    nsqd.create_channels(TOPIC, CHANNEL)
    published = bodies()
    publish(nsqd, TOPIC, published)
    archives, work = tmp_path / "archives", tmp_path / "work"
    arguments = [
        f"--nsqd-tcp-address={nsqd.tcp_address}",
        f"--topic={TOPIC}",
        f"--channel={CHANNEL}",
        f"--output-dir={archives}",
        f"--work-dir={work}",
        "--format=json",
        "--gzip",
        "--rotate-size=20000",
        "--max-in-flight=50",
    ]
    killed = start_to_file(arguments, tmp_path / "killed.stderr")
    wait_until(lambda: finished(nsqd) >= COUNT // 3, DEADLINE, "a third archived")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    restarted = start_to_file(arguments, tmp_path / "restarted.stderr")
    wait_until(lambda: nsqd.drained(TOPIC, CHANNEL), DEADLINE, "every message archived")
    restarted.send_signal(signal.SIGTERM)
    assert restarted.wait(timeout=30) == 0, (tmp_path / "restarted.stderr").read_text()

    # A copy of a finished archive cut short, as a failed transfer leaves one.
    first = sorted(archives.glob("*.gz"))[0]
    cut = archives / first.name.replace(".log.gz", "-copy.log.gz")
    cut.write_bytes(first.read_bytes()[: first.stat().st_size // 2])

    out = tmp_path / "parquet"
    run = nsq_archive("compact", str(archives), "--out", str(out))
    assert run.exit_code == 0, run.stderr
    assert cut.name in run.stdout
    table = spark.read.parquet(str(out))
    rows = table.collect()
    assert len(rows) == COUNT
    assert table.select("id").distinct().count() == COUNT
    assert sorted(bytes(row.body) for row in rows) == sorted(published)
    assert {row.topic for row in rows} == {TOPIC}

    stats = nsq_archive("stats", str(archives), "--json")
    damaged = [Path(entry["file"]).name for entry in json.loads(stats.stdout)["damaged"]]
    assert damaged == [cut.name]

    query = "SELECT topic, count(DISTINCT id) AS n FROM messages GROUP BY topic"
    counted = nsq_archive("sql", query, str(out), "--output", "csv")
    assert counted.stdout.splitlines() == ["topic,n", f"{TOPIC},{COUNT}"]

    replayed = nsq_archive(
        "replay", str(out), "--topic=replayed", f"--nsqd-tcp-address={nsqd.tcp_address}"
    )
    assert replayed.exit_code == 0, replayed.stderr
    assert sorted(nsqd.read("replayed", COUNT)) == sorted(published)


def test_raw_archives_from_go_nsq_to_file_compact_too(
    nsqd: Nsqd, tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    published = [body for body in bodies() if b"\n" not in body]  # raw lines cannot hold one
    publish(nsqd, TOPIC, published)
    archives = tmp_path / "go"
    go = subprocess.Popen(
        [
            str(find_binary("nsq_to_file")),
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--topic={TOPIC}",
            f"--channel={CHANNEL}",
            f"--output-dir={archives}",
            "--gzip",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: nsqd.drained(TOPIC, CHANNEL), DEADLINE, "Go's nsq_to_file to drain")
    finally:
        go.send_signal(signal.SIGTERM)
        go.wait(timeout=30)
    out = tmp_path / "parquet"
    run = nsq_archive("compact", str(archives), "--out", str(out), "--json")
    assert run.exit_code == 0, run.stderr
    table = spark.read.parquet(str(out))
    rows = table.collect()
    assert sorted(bytes(row.body) for row in rows) == sorted(published)
    assert {(row.topic, row.id) for row in rows} == {(TOPIC, None)}
    assert '"raw_files": 1' in run.stdout
