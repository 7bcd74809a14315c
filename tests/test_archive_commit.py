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
from nsqtools.testing import our_tool, wait_until
from tests.conftest import ArchiveRun
from tests.test_archive_compact import ORIGIN, message

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

PARTITION = "topic=orders/date=2026-11-23/hour=0"


def staged_partition(staging: Path, relative: str, content: bytes) -> None:
    partition = staging / relative
    partition.mkdir(parents=True)
    (partition / "part-0.parquet").write_bytes(content)
    (partition / ".part-0.parquet.crc").write_bytes(b"crc")


def test_a_new_partition_is_moved_in_and_an_old_one_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = out / PARTITION
    old.mkdir(parents=True)
    (old / "part-old.parquet").write_bytes(b"old")
    with commit.staging_directory(out) as staging:
        staged_partition(staging, PARTITION, b"new")
        staged_partition(staging, "topic=orders/date=2026-11-23/hour=1", b"new 1")
        published = commit.publish(staging, out)
    assert published == [PARTITION, "topic=orders/date=2026-11-23/hour=1"]
    assert sorted(path.name for path in old.iterdir()) == [".part-0.parquet.crc", "part-0.parquet"]
    assert not list(out.glob(commit.STAGING_PREFIX + "*"))


def test_what_a_killed_job_staged_is_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    leftover = out / f"{commit.STAGING_PREFIX}killed"
    staged_partition(leftover, PARTITION, b"half")
    with commit.staging_directory(out) as staging:
        assert not leftover.exists()
        assert staging.parent == out


def test_one_job_at_a_time_per_output_directory(tmp_path: Path) -> None:
    with (
        commit.staging_directory(tmp_path),
        pytest.raises(commit.OutputBusy),
        commit.staging_directory(tmp_path),
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
