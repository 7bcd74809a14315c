"""nsq archive stats and nsq archive sql on archives made here, on the test run's
SparkSession."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nsqtools import formats
from tests.conftest import ArchiveRun
from tests.test_archive_compact import ORIGIN, envelopes, message, summary

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

Archive = Callable[..., ArchiveRun]


def archives(directory: Path) -> Path:
    """Hour 0: messages 0 and 1, 1 written twice; hour 1: message 2 and a non-UTF-8
    body; a raw archive of two lines; a gzip file cut short; a cut last line."""
    directory.mkdir()
    bodies = [b'{"user": 7, "event": "buy"}', b'{"user": 8, "event": "view"}']
    envelopes(
        directory / "orders.h-000000.2026-11-23_00.log.gz",
        [message(0, body=bodies[0]), message(1, body=bodies[1]), message(1, 2, bodies[1])],
    )
    envelopes(
        directory / "orders.h-000001.2026-11-23_01.log.gz",
        [message(2, body=b"plain"), message(3, body=b"\xff\xfe")],
    )
    (directory / "clicks.h.2026-11-23_05.log").write_bytes(b"a\nb\n")
    data = gzip.compress(formats.json_lines([message(i) for i in range(10, 1010)], ORIGIN))
    (directory / "orders.h-000002.2026-11-23_05.log.gz").write_bytes(data[: len(data) // 2])
    lines = formats.json_lines([message(2000), message(2001)], ORIGIN)
    (directory / "orders.h-000003.2026-11-23_06.log").write_bytes(lines[:-5])
    return directory


def test_stats_per_topic_and_hour_with_the_damaged_files(
    tmp_path: Path, nsq_archive: Archive
) -> None:
    source = archives(tmp_path / "src")
    result = summary(nsq_archive("stats", str(source), "--json"))
    hours = {
        (hour["topic"], hour["hour"]): hour
        for hour in result["hours"]
        if hour["date"] == "2026-11-23"
    }
    assert hours[("orders", 0)]["messages"] == 3
    assert hours[("orders", 0)]["duplicates"] == 1
    assert hours[("orders", 1)]["bytes"] == len(b"plain") + 2
    assert hours[("clicks", 5)]["raw"] == 2
    assert hours[("orders", 0)]["first"].startswith("2026-11-23 00:00:00")
    damaged = {Path(entry["file"]).name: entry for entry in result["damaged"]}
    assert set(damaged) == {
        "orders.h-000002.2026-11-23_05.log.gz",
        "orders.h-000003.2026-11-23_06.log",
    }
    assert "cut inside a gzip member" in damaged["orders.h-000002.2026-11-23_05.log.gz"]["damage"]
    assert damaged["orders.h-000003.2026-11-23_06.log"]["lines"] == 1
    readable = sum(hour["messages"] for hour in result["hours"] if hour["topic"] == "orders")
    assert readable == 5 + damaged["orders.h-000002.2026-11-23_05.log.gz"]["lines"] + 1


def test_stats_counts_the_lines_that_are_no_envelope_by_file(
    tmp_path: Path, nsq_archive: Archive
) -> None:
    """Apart from the hours' messages, in the same pass; --strict fails on them."""
    source = tmp_path / "src"
    source.mkdir()
    first, second = (formats.json_lines([message(n)], ORIGIN) for n in (0, 1))
    (source / "orders.h-000000.2026-11-23_00.log").write_bytes(first + b"junk\n{}\n" + second)
    envelopes(source / "orders.h-000001.2026-11-23_01.log.gz", [message(2)])
    result = summary(nsq_archive("stats", str(source), "--json"))
    assert {Path(file).name: count for file, count in result["malformed"].items()} == {
        "orders.h-000000.2026-11-23_00.log": 2
    }
    assert sum(hour["messages"] for hour in result["hours"]) == 3
    assert [hour["topic"] for hour in result["hours"]] == ["orders"] * len(result["hours"])
    strict = nsq_archive("stats", str(source), "--strict")
    assert strict.exit_code == 1
    assert "0 damaged files, 2 lines that are no envelope" in strict.stderr


def test_a_path_is_read_whatever_it_holds_and_an_empty_file_is_nothing_to_read(
    tmp_path: Path, nsq_archive: Archive
) -> None:
    """A space, a percent sign or a letter outside ASCII in the path (URIs escape them,
    Hadoop's paths do not) changes neither which files are read nor how. An empty file
    (nsq_to_file opens the next rev before it writes to it) holds nothing to read: no
    damage, no topic needed."""
    source = tmp_path / "nsq archives 100% été"
    source.mkdir()
    envelopes(source / "orders.h-000000.2026-11-23_00.log.gz", [message(0), message(1)])
    plain = formats.json_lines([message(2)], ORIGIN)
    (source / "orders.h-000001.2026-11-23_00.log").write_bytes(plain)
    (source / "orders.h-000002.2026-11-23_01.log").write_bytes(b"")
    (source / "unnamed.log").write_bytes(b"")
    result = summary(nsq_archive("stats", str(source), "--json"))
    assert sum(hour["messages"] for hour in result["hours"]) == 3
    assert result["damaged"] == []


def test_stats_tables_and_strict(tmp_path: Path, nsq_archive: Archive) -> None:
    source = archives(tmp_path / "src")
    run = nsq_archive("stats", str(source))
    assert run.exit_code == 0, run.stderr
    assert "2 damaged files" in run.stdout
    assert "'-' for raw archives" in run.stdout
    assert nsq_archive("stats", str(source), "--strict").exit_code == 1


def test_sql_counts_by_topic_as_csv(tmp_path: Path, nsq_archive: Archive) -> None:
    source = archives(tmp_path / "src")
    query = "SELECT topic, count(*) AS n FROM messages GROUP BY topic ORDER BY topic"
    run = nsq_archive("sql", query, str(source), "--output", "csv")
    assert run.exit_code == 0, run.stderr
    rows = list(csv.reader(io.StringIO(run.stdout)))
    assert rows[0] == ["topic", "n"]
    assert rows[1][0] == "clicks" and rows[1][1] == "2"


def test_sql_over_json_bodies_inferred_or_given(tmp_path: Path, nsq_archive: Archive) -> None:
    source = archives(tmp_path / "src")
    query = "SELECT DISTINCT data.user FROM messages WHERE data.event = 'buy'"
    for extra in ([], ["--body-schema", "user INT, event STRING"]):
        run = nsq_archive("sql", query, str(source), "--output", "json", *extra)
        assert run.exit_code == 0, run.stderr
        assert [json.loads(line) for line in run.stdout.splitlines()] == [{"user": 7}]


def test_sql_body_text_is_null_when_not_utf8(tmp_path: Path, nsq_archive: Archive) -> None:
    source = archives(tmp_path / "src")
    query = "SELECT body, body_text FROM messages WHERE id = '0000000000000003'"
    run = nsq_archive("sql", query, str(source), "--output", "json")
    assert [json.loads(line) for line in run.stdout.splitlines()] == [
        {"body": "//4=", "body_text": None}
    ]


def test_sql_over_compacted_parquet(tmp_path: Path, nsq_archive: Archive) -> None:
    source = archives(tmp_path / "src")
    out = tmp_path / "out"
    assert nsq_archive("compact", str(source), "--out", str(out)).exit_code == 0
    query = "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM messages WHERE topic = 'orders'"
    run = nsq_archive("sql", query, str(out), "--output", "csv")
    count, ids = run.stdout.splitlines()[1].split(",")
    assert count == ids  # compacted: each message once


def test_a_bad_query_is_one_line(tmp_path: Path, nsq_archive: Archive) -> None:
    source = archives(tmp_path / "src")
    run = nsq_archive("sql", "SELECT nothing FROM messages", str(source))
    assert run.exit_code == 1
    assert len(run.stderr.strip().splitlines()) == 1
    assert "UNRESOLVED_COLUMN" in run.stderr
