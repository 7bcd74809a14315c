"""nsq archive compact on archives made here (envelopes with copies, raw bodies, damaged
files), on the test run's SparkSession; the end to end run from a real nsqd through
nsq_to_file is in test_archive_pipeline.py."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.parquet
import pytest

from nsqtools import formats
from nsqtools.protocol import Message
from tests.conftest import ArchiveRun

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

ORIGIN = formats.Origin("orders", "archive", "127.0.0.1:4150")
HOUR_NS = 3_600 * 10**9
BASE_NS = int(datetime(2026, 11, 23, tzinfo=UTC).timestamp()) * 10**9


def message(
    index: int, attempts: int = 1, body: bytes | None = None, at: int | None = None
) -> Message:
    """Message `index`, published half an hour after message index-1 unless `at` says
    when (nanoseconds)."""
    return Message(
        id=b"%016x" % index,
        timestamp=BASE_NS + index * HOUR_NS // 2 if at is None else at,
        attempts=attempts,
        body=body if body is not None else b"body %d" % index,
    )


def envelopes(path: Path, messages: list[Message]) -> Path:
    path.write_bytes(gzip.compress(formats.json_lines(messages, ORIGIN)))
    return path


def written_rows(spark: Any, out: Path) -> list[Any]:
    rows: list[Any] = spark.read.parquet(str(out)).orderBy("id", "body").collect()
    return rows


def summary(run: ArchiveRun) -> dict[str, Any]:
    assert run.exit_code == 0, run.stderr
    document: dict[str, Any] = json.loads(run.stdout)
    return document


def test_copies_of_a_message_are_kept_once_the_first_delivery(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    envelopes(source / "orders.host-000000.2026-11-23_00.log.gz", [message(i) for i in range(4)])
    # A requeue wrote message 1 again, with one more attempt, in a later file.
    envelopes(source / "orders.host-000001.2026-11-23_01.log.gz", [message(1, 2), message(4)])
    out = tmp_path / "out"
    result = summary(nsq_archive("compact", str(source), "--out", str(out), "--json"))
    assert (result["rows_read"], result["duplicates"], result["rows_written"]) == (6, 1, 5)
    rows = written_rows(spark, out)
    assert [(row.id, row.attempts) for row in rows] == [(f"{i:016x}", 1) for i in range(5)]
    assert {row.hour for row in rows} == {0, 1, 2}
    assert result["partitions"] == {
        "topic=orders/date=2026-11-23/hour=0": 2,
        "topic=orders/date=2026-11-23/hour=1": 2,
        "topic=orders/date=2026-11-23/hour=2": 1,
    }


def test_equal_copies_keep_the_first_file_by_name_with_its_host(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    """Copies with as many attempts: the row of the first file by name stays, with that
    file's host and name (the job carries a file's rank through its sort, and its name
    and host after); timestamps are written as INT64 microseconds."""
    # Listed in the opposite order of their names: the rank is the name's, not the listing's.
    later = envelopes(tmp_path / "orders.b-host-000000.2026-11-23_00.log.gz", [message(0)])
    first = envelopes(tmp_path / "orders.a-host-000000.2026-11-23_00.log.gz", [message(0)])
    out = tmp_path / "out"
    args = ("compact", str(later), str(first), "--out", str(out), "--json")
    result = summary(nsq_archive(*args))
    assert (result["rows_read"], result["duplicates"], result["rows_written"]) == (2, 1, 1)
    (row,) = written_rows(spark, out)
    assert (row.file, row.host) == (str(first), "a-host")
    (written,) = out.glob("topic=orders/date=2026-11-23/hour=0/*.parquet")
    timestamp = pyarrow.parquet.ParquetFile(written).schema_arrow.field("timestamp")
    assert timestamp.type == pyarrow.timestamp("us", tz="UTC")


def test_the_fewest_attempts_win_over_the_file_order_and_raw_repeats_all_stay(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    """Of copies, attempts decide before the file's name; raw lines have no id, so a
    line written three times is three rows."""
    envelopes(tmp_path / "orders.a-000000.2026-11-23_00.log.gz", [message(0, 3), message(1, 2)])
    envelopes(tmp_path / "orders.b-000000.2026-11-23_00.log.gz", [message(0, 2), message(1, 2)])
    (tmp_path / "clicks.h.2026-11-23_05.log").write_bytes(b"same\n" * 3 + b"other\n")
    out = tmp_path / "out"
    result = summary(nsq_archive("compact", str(tmp_path), "--out", str(out), "--json"))
    assert (result["rows_read"], result["duplicates"], result["rows_written"]) == (8, 2, 6)
    rows = written_rows(spark, out)
    kept = [(row.id, row.attempts, row.host) for row in rows if row.topic == "orders"]
    assert kept == [(f"{0:016x}", 2, "b"), (f"{1:016x}", 2, "a")]
    assert (
        sorted(bytes(row.body) for row in rows if row.topic == "clicks")
        == [b"other"] + [b"same"] * 3
    )


def test_the_same_input_twice_gives_the_same_rows(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    source = envelopes(tmp_path / "orders.h-000000.2026-11-23_00.log.gz", [message(0)])
    out = tmp_path / "out"
    first = summary(nsq_archive("compact", str(source), "--out", str(out), "--json"))
    rows = written_rows(spark, out)
    second = summary(nsq_archive("compact", str(source), "--out", str(out), "--json"))
    assert written_rows(spark, out) == rows
    assert first["partitions"] == second["partitions"]
    assert not list(out.glob(".staging-*"))


def test_bodies_stay_byte_equal_in_both_formats(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    bodies = [b"line\nbreak", b"\xff\xfe not utf-8", b"carriage\r", b'{"json": true}']
    envelopes(
        tmp_path / "orders.h-000000.2026-11-23_00.log.gz",
        [message(i, body=body) for i, body in enumerate(bodies)],
    )
    # Raw lines cannot hold a newline: the other bodies, as Go's nsq_to_file writes them.
    raw_bodies = [body for body in bodies if b"\n" not in body]
    (tmp_path / "clicks.h.2026-11-23_05.log").write_bytes(b"".join(b + b"\n" for b in raw_bodies))
    out = tmp_path / "out"
    result = summary(nsq_archive("compact", str(tmp_path), "--out", str(out), "--json"))
    assert result["raw_files"] == 1
    table = spark.read.parquet(str(out))
    by_topic = {
        topic: sorted(bytes(row.body) for row in table.where(table.topic == topic).collect())
        for topic in ("orders", "clicks")
    }
    assert by_topic == {"orders": sorted(bodies), "clicks": sorted(raw_bodies)}
    raw_hours = {row.hour for row in table.where(table.topic == "clicks").collect()}
    assert raw_hours == {5}  # from the file's name


def test_a_damaged_file_is_named_and_its_whole_lines_used(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    whole = envelopes(tmp_path / "orders.h-000000.2026-11-23_00.log.gz", [message(0), message(1)])
    # All in the file's hour: a thousand hours would make the compaction write a thousand
    # partitions (40 s of the test's time for nothing it checks).
    in_hour = [message(i, at=BASE_NS + HOUR_NS) for i in range(2, 2000)]
    data = gzip.compress(formats.json_lines(in_hour, ORIGIN))
    (tmp_path / "orders.h-000001.2026-11-23_01.log.gz").write_bytes(data[: len(data) // 2])
    plain = formats.json_lines([message(5000), message(5001)], ORIGIN)
    (tmp_path / "orders.h-000002.2026-11-23_02.log").write_bytes(plain[:-10])
    out = tmp_path / "out"
    run = nsq_archive("compact", str(tmp_path), "--out", str(out))
    assert run.exit_code == 0, run.stderr
    assert "2 damaged files" in run.stdout
    assert "orders.h-000001.2026-11-23_01.log.gz" in run.stdout
    assert "cut inside a gzip member" in run.stdout
    assert "the last line is cut" in run.stdout
    rows = written_rows(spark, out)
    ids = {row.id for row in rows}
    assert {f"{i:016x}" for i in (0, 1, 2, 3, 5000)} <= ids
    assert f"{5001:016x}" not in ids
    assert whole.exists()


def test_a_missing_source_is_one_line(
    tmp_path: Path, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    run = nsq_archive("compact", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"))
    assert run.exit_code == 1
    assert run.stderr.strip().endswith("no such file or directory")
    assert len(run.stderr.strip().splitlines()) == 1


def test_an_hour_compacted_in_two_runs_gives_what_one_run_gives(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    first = envelopes(tmp_path / "orders.h-000000.2026-11-23_00.log.gz", [message(0), message(1)])
    # The second archive holds a copy of message 1 (redelivered) and a new one.
    second = envelopes(
        tmp_path / "orders.h-000001.2026-11-23_00.log.gz", [message(1, attempts=2), message(2)]
    )
    (tmp_path / "raw").mkdir()
    raw = tmp_path / "raw" / "orders.h.2026-11-23_00.log"
    raw.write_bytes(b"raw one\nraw two\n")
    in_two, in_one = tmp_path / "in-two", tmp_path / "in-one"
    summary(nsq_archive("compact", str(first), str(raw), "--out", str(in_two), "--json"))
    result = summary(nsq_archive("compact", str(second), "--out", str(in_two), "--json"))
    assert result["duplicates"] == 1
    summary(
        nsq_archive("compact", str(first), str(second), str(raw), "--out", str(in_one), "--json")
    )
    assert written_rows(spark, in_two) == written_rows(spark, in_one)
    # Compacting the same archives again replaces their rows: the raw lines stay once.
    summary(nsq_archive("compact", str(raw), str(second), "--out", str(in_two), "--json"))
    assert written_rows(spark, in_two) == written_rows(spark, in_one)
    assert len(written_rows(spark, in_one)) == 5


def test_file_uris_read_and_write_as_local_paths_do(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    """A source and --out given as file:// URIs (Hadoop's names) are the same places as
    the paths: the same rows, the files named by their paths, nothing written to a
    directory named after the URI."""
    source = tmp_path / "src"
    source.mkdir()
    envelopes(source / "orders.h-000000.2026-11-23_00.log.gz", [message(0), message(1)])
    by_path = summary(nsq_archive("compact", str(source), "--out", str(tmp_path / "a"), "--json"))
    by_uri = summary(
        nsq_archive("compact", source.as_uri(), "--out", (tmp_path / "b").as_uri(), "--json")
    )
    assert {**by_uri, "seconds": None} == {**by_path, "seconds": None}
    assert written_rows(spark, tmp_path / "b") == written_rows(spark, tmp_path / "a")
    files = {row.file for row in spark.read.parquet(str(tmp_path / "b")).collect()}
    assert files == {str(source / "orders.h-000000.2026-11-23_00.log.gz")}
