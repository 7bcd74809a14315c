"""nsq archive compact on a real Spark standalone cluster (a master and two workers on
loopback, nsqtools.testing.spark_cluster), run as a user runs it: its own driver, exit
status, one line on failure.

One worker sees its own private tmpfs where the other processes see the hidden output
directory: the files of its tasks land where the driver never looks, as with an --out
that is not shared storage. Compact must then exit 1 and publish no partition, never
exit 0 with part of the rows. (That compact writes every row on shared storage is
tested in local mode, test_archive_compact.py: a driver costs half a minute here.)
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqtools.testing import our_tool
from nsqtools.testing.spark_cluster import SparkCluster
from tests.test_archive_compact import envelopes, message

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

# 48 messages, two an hour: 24 partitions, over both write tasks.
MESSAGES = 48
# Two write tasks (no coalescing of the shuffle's output), one per worker.
WRITE_IN_TWO = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compact-cluster")


@pytest.fixture(scope="module")
def hidden_out(folder: Path) -> Path:
    """An output directory worker 1 sees as a private, empty tmpfs of its own."""
    out = folder / "hidden-out"
    out.mkdir()
    return out


@pytest.fixture(scope="module")
def cluster(folder: Path, hidden_out: Path) -> Iterator[SparkCluster]:
    with SparkCluster(folder / "spark", workers=2, private={1: hidden_out}) as spark:
        yield spark


@pytest.fixture(scope="module")
def source(folder: Path) -> Path:
    return envelopes(
        folder / "orders.host-000000.2026-11-23_00.log.gz",
        [message(index) for index in range(MESSAGES)],
    )


def compact_on(cluster: SparkCluster, source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    conf = {**cluster.submit_conf, **WRITE_IN_TWO}
    argv = [
        *our_tool("nsq"), "archive", "compact", str(source), "--out", str(out), "--json",
        "--master", cluster.master_url, *(f"--conf={key}={value}" for key, value in conf.items()),
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.longest  # a standalone cluster's start and a job: minutes on 2 cores
def test_rows_an_executor_wrote_where_the_driver_cannot_see_fail_the_job(
    cluster: SparkCluster, source: Path, hidden_out: Path
) -> None:
    result = compact_on(cluster, source, hidden_out)
    assert result.returncode == 1, result.stdout
    (line,) = result.stderr.splitlines()
    where = re.escape(str(hidden_out))
    found = re.fullmatch(
        f"nsq: error: {where}: Spark's tasks wrote {MESSAGES} rows, (\\d+) are in the output: "
        "nothing published \\(--out must be storage the driver and every executor share\\)",
        line,
    )
    assert found is not None, line
    assert 0 < int(found[1]) < MESSAGES  # the other worker's rows: a partial output
    assert not list(hidden_out.glob("topic=*"))  # nothing published
