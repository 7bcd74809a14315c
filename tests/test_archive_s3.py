"""nsq archive on an object store: S3 (moto's server on loopback, nsqtools.testing.s3)
through s3a:// URIs, on the test run's session (which has the S3A jars and settings).
Compact from and to s3a://, stats and sql over s3a:// sources, replay from s3a://
Parquet, each giving what the same local files give; a publish killed on S3 finished
from its journal; a wrong secret, and S3A missing, said in one line (processes of their
own: a session's S3A settings are fixed at its start)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet
import pytest

from nsqtools import formats
from nsqtools.protocol import Message
from nsqtools.spark import commit
from nsqtools.spark.storage import Storage
from nsqtools.testing import Nsqd, our_tool
from nsqtools.testing.s3 import S3Server
from tests.conftest import ArchiveRun
from tests.test_archive_compact import ORIGIN, message
from tests.test_archive_replay import read_back

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

BUCKET = "archive"
# Two hours of envelopes, one message written twice (a requeue), and a file cut short.
ARCHIVES = {
    "orders.h-000000.2026-11-23_00.log.gz": [message(index) for index in range(4)],
    "orders.h-000001.2026-11-23_01.log.gz": [message(1, attempts=2), message(4)],
}
CUT = "orders.h-000002.2026-11-23_02.log.gz"


@pytest.fixture(scope="module")
def s3(s3_server: S3Server, spark: Any) -> S3Server:
    """The run's S3 server, which the test run's session reaches, with the bucket."""
    s3_server.create_bucket(BUCKET)
    return s3_server


@pytest.fixture(scope="module")
def archives(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The archive files, in a local directory and under s3a://archive/in/ alike."""
    local = tmp_path_factory.mktemp("archives")
    for name, messages in ARCHIVES.items():
        (local / name).write_bytes(gzip.compress(formats.json_lines(messages, ORIGIN)))
    hour_2 = [Message(b"%016x" % index, message(4).timestamp, 1, b"cut") for index in range(5, 900)]
    cut = gzip.compress(formats.json_lines(hour_2, ORIGIN))
    (local / CUT).write_bytes(cut[: len(cut) // 2])
    for path in local.iterdir():
        s3.put(BUCKET, f"in/{path.name}", path.read_bytes())
    return local


def in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`nsq archive ARGS...` in a process of its own (a session of its own)."""
    command = [*our_tool("nsq"), "archive", *args, "--master", "local[1]"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def succeeded(run: ArchiveRun) -> str:
    assert run.exit_code == 0, run.stderr
    return run.stdout


def words(table: str) -> list[list[str]]:
    """A printed table's lines by their words (column widths follow the longest name)."""
    return [line.split() for line in table.splitlines()]


def parquet_rows(s3: S3Server, prefix: str) -> list[dict[str, Any]]:
    """The rows of the Parquet objects under prefix, with their partition, by id."""
    rows = []
    for key in s3.keys(BUCKET, prefix):
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            partition = key[len(prefix) :].rsplit("/", 1)[0]
            table = pyarrow.parquet.read_table(io.BytesIO(s3.get(BUCKET, key)))
            rows += [{**row, "partition": partition} for row in table.to_pylist()]
    return sorted(rows, key=lambda row: (row["id"], row["attempts"]))


def test_compact_from_and_to_s3_gives_what_local_files_give(
    s3: S3Server, archives: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    run = nsq_archive("compact", f"s3a://{BUCKET}/in", "--out", f"s3a://{BUCKET}/out", "--json")
    remote = json.loads(succeeded(run))
    local_out = archives.parent / "local-out"
    local = json.loads(
        nsq_archive("compact", str(archives), "--out", str(local_out), "--json").stdout
    )
    assert remote["damaged"] == [
        {**damaged, "file": f"s3a://{BUCKET}/in/{CUT}"} for damaged in local["damaged"]
    ]
    for key in ("files", "rows_read", "duplicates", "rows_written", "partitions"):
        assert remote[key] == local[key], key
    assert remote["duplicates"] == 1

    written = parquet_rows(s3, "out/")
    expected = spark.read.parquet(str(local_out)).collect()
    assert [(row["id"], row["attempts"], row["body"]) for row in written] == sorted(
        (row.id, row.attempts, row.body) for row in expected
    )
    assert {row["file"] for row in written} == {
        f"s3a://{BUCKET}/in/{name}" for name in [*ARCHIVES, CUT]
    }
    staged = [key for key in s3.keys(BUCKET, "out/") if commit.STAGING_PREFIX in key]
    assert staged == []


def test_stats_and_sql_over_s3_sources_give_what_local_files_give(
    s3: S3Server, archives: Path, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    remote = succeeded(nsq_archive("stats", f"s3a://{BUCKET}/in"))
    local = succeeded(nsq_archive("stats", str(archives)))
    assert words(remote) == words(local.replace(str(archives), f"s3a://{BUCKET}/in"))
    query = (
        "SELECT hour, count(*) AS n, sum(attempts) AS a FROM messages GROUP BY hour ORDER BY hour"
    )
    remote = succeeded(nsq_archive("sql", query, f"s3a://{BUCKET}/in", "--output", "json"))
    assert remote == succeeded(nsq_archive("sql", query, str(archives), "--output", "json"))


def test_replay_from_s3_parquet_publishes_every_message(
    s3: S3Server, archives: Path, nsqd: Nsqd, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    out = f"s3a://{BUCKET}/replayed"
    succeeded(nsq_archive("compact", f"s3a://{BUCKET}/in", "--out", out))
    topic = "replayed"
    run = nsq_archive("replay", out, "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address)
    succeeded(run)
    rows = parquet_rows(s3, "replayed/")
    bodies = sorted(message.body for message in read_back(nsqd, topic, len(rows)))
    assert bodies == sorted(row["body"] for row in rows)


@pytest.mark.parametrize("moved", [0, 1])
def test_a_publish_killed_on_s3_is_finished_by_the_next_job(s3: S3Server, moved: int) -> None:
    """A journaled move into an existing partition killed after `moved` of its two new
    objects went in (S3 moves them one by one): the next job's start leaves the
    partition holding exactly the new objects, and no staging."""
    prefix = f"killed-{moved}"
    partition = "topic=orders/date=2026-11-23/hour=0"
    s3.put(BUCKET, f"{prefix}/{partition}/part-old.parquet", b"old")
    names = ["part-a.parquet", "part-b.parquet"]
    for index, name in enumerate(names):
        place = prefix if index < moved else f"{prefix}/.staging-killed/new"
        s3.put(BUCKET, f"{place}/{partition}/{name}", name.encode())
    journal = {partition: {"from": "new", "files": names}}
    s3.put(BUCKET, f"{prefix}/.staging-killed/publishing.json", json.dumps(journal).encode())

    store = Storage.with_own_jvm(s3.spark_conf)
    with commit.staging_directory(store, f"s3a://{BUCKET}/{prefix}"):
        pass
    assert s3.keys(BUCKET, f"{prefix}/") == [f"{prefix}/{partition}/{name}" for name in names]


def test_a_wrong_secret_is_one_line_without_the_secret(s3: S3Server, archives: Path) -> None:
    wrong = "not-the-secret-" + s3.secret_key[:8]
    arguments = [argument.replace(s3.secret_key, wrong) for argument in s3.conf_arguments]
    run = in_process("stats", f"s3a://{BUCKET}/in", *arguments)
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    assert f"error: s3a://{BUCKET}/in: " in line
    assert wrong not in run.stderr and s3.secret_key not in run.stderr


def test_s3a_without_its_jars_is_one_line_saying_what_it_needs() -> None:
    run = in_process("stats", f"s3a://{BUCKET}/in")
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    assert f"error: s3a://{BUCKET}/in: " in line
    assert "spark.jars.packages=org.apache.hadoop:hadoop-aws:3.5.0" in line
