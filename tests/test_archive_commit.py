"""Compacted partitions made visible whole (nsqtools.spark.commit), and a compaction
killed halfway, which leaves every partition whole and is finished by the next run."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nsqtools import formats
from nsqtools.spark import commit
from nsqtools.spark.storage import Storage, location_uri, shown
from nsqtools.testing import our_tool, wait_until
from tests.conftest import ArchiveRun
from tests.test_archive_compact import ORIGIN, message

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

PARTITION = "topic=orders/date=2026-11-23/hour=0"


@pytest.fixture(scope="module")
def store(spark: Any) -> Storage:
    """Hadoop's FileSystem through the test run's JVM, on local paths."""
    return Storage.of(spark, {})


def staged_partition(staging: Path, relative: str, content: bytes, name: str = "part-0") -> None:
    partition = staging / relative
    partition.mkdir(parents=True, exist_ok=True)
    (partition / f"{name}.parquet").write_bytes(content)
    (partition / f".{name}.parquet.crc").write_bytes(b"crc")


def test_a_new_partition_is_moved_in_and_an_old_one_replaced_whole(
    tmp_path: Path, store: Storage
) -> None:
    out = tmp_path / "out"
    old = out / PARTITION
    old.mkdir(parents=True)
    (old / "part-old.parquet").write_bytes(b"old")
    with commit.staging_directory(store, location_uri(str(out))) as staging:
        staged = Path(shown(staging))
        staged_partition(staged / "new", PARTITION, b"new")
        staged_partition(staged / "new", "topic=orders/date=2026-11-23/hour=1", b"new 1")
        published = commit.publish(store, staging, location_uri(str(out)), ["new"])
    assert published == [PARTITION, "topic=orders/date=2026-11-23/hour=1"]
    assert sorted(path.name for path in old.iterdir()) == [".part-0.parquet.crc", "part-0.parquet"]
    assert not list(out.glob(commit.STAGING_PREFIX + "*"))


def test_what_a_killed_job_staged_is_removed_by_the_next(tmp_path: Path, store: Storage) -> None:
    out = tmp_path / "out"
    leftover = out / f"{commit.STAGING_PREFIX}killed"
    staged_partition(leftover / "new", PARTITION, b"half")
    with commit.staging_directory(store, location_uri(str(out))) as staging:
        assert not leftover.exists()
        assert Path(shown(staging)).parent == out
    assert not (out / PARTITION).exists()  # never journaled: never published


@pytest.mark.parametrize("moved", [0, 1, 2])
def test_a_move_killed_partway_is_finished_by_the_next_job(
    tmp_path: Path, store: Storage, moved: int
) -> None:
    """A journaled move killed after `moved` of a partition's two new files went in,
    beside the partition's old file: the next job leaves exactly the new files (the
    file-by-file move object stores get)."""
    out = tmp_path / "out"
    (out / PARTITION).mkdir(parents=True)
    (out / PARTITION / "part-old.parquet").write_bytes(b"old")
    killed = out / f"{commit.STAGING_PREFIX}killed"
    names = ["part-a.parquet", "part-b.parquet"]
    for index, name in enumerate(names):
        place = out if index < moved else killed / "new"
        staged_partition(place, PARTITION, name.encode(), name.removesuffix(".parquet"))
    killed.mkdir(exist_ok=True)
    (killed / "publishing.json").write_text(
        json.dumps({PARTITION: {"from": "new", "files": names}})
    )
    with commit.staging_directory(store, location_uri(str(out))):
        assert sorted(path.name for path in (out / PARTITION).iterdir()) == [
            ".part-a.parquet.crc",
            ".part-b.parquet.crc",
            *names,
        ]
        assert not killed.exists()


def test_one_job_at_a_time_per_output_directory(tmp_path: Path, store: Storage) -> None:
    out = location_uri(str(tmp_path))
    with (
        commit.staging_directory(store, out),
        pytest.raises(commit.OutputBusy),
        commit.staging_directory(store, out),
    ):
        pass


def test_a_compaction_killed_halfway_leaves_whole_partitions(
    tmp_path: Path, spark: Any, nsq_archive: Callable[..., ArchiveRun]
) -> None:
    """The first run writes the partition; a second, over more archives, is killed with
    SIGKILL while Spark writes: the partition is still the first run's, whole. A third
    run gives what the second would have."""
    source = tmp_path / "src"
    source.mkdir()
    first = [message(index) for index in range(2)]
    (source / "orders.h-000000.2026-11-23_00.log.gz").write_bytes(
        gzip.compress(formats.json_lines(first, ORIGIN))
    )
    out = tmp_path / "out"
    assert nsq_archive("compact", str(source), "--out", str(out)).exit_code == 0
    before = sorted(row.id for row in spark.read.parquet(str(out)).collect())

    more = [message(index % 2) for index in range(2, 200_000)]  # copies, to keep rows equal
    (source / "orders.h-000001.2026-11-23_00.log.gz").write_bytes(
        gzip.compress(formats.json_lines(more, ORIGIN))
    )
    killed = subprocess.Popen(
        [*our_tool("nsq"), "archive", "compact", str(source), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: any(out.glob(commit.STAGING_PREFIX + "*")), 120, "the job staging")
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    assert sorted(row.id for row in spark.read.parquet(str(out)).collect()) == before
    run = nsq_archive("compact", str(source), "--out", str(out), "--json")
    assert json.loads(run.stdout)["duplicates"] == len(more)
    assert sorted(row.id for row in spark.read.parquet(str(out)).collect()) == before
