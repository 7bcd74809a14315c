"""nsq archive through spark-submit: the script `nsq archive --script` names runs the
same commands on spark-submit's session (its own JVM, so one test only)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from nsqtools import formats
from nsqtools.testing import our_tool
from tests.test_archive_compact import ORIGIN, message

# Spark jobs: a JVM per test worker, seconds per job (scripts/test --all runs them).
pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parent.parent


def test_compact_through_spark_submit(tmp_path: Path) -> None:
    script = subprocess.run(
        [*our_tool("nsq"), "archive", "--script"], capture_output=True, text=True, check=True
    ).stdout.strip()
    source = tmp_path / "orders.h-000000.2026-11-23_00.log.gz"
    source.write_bytes(gzip.compress(formats.json_lines([message(0), message(1)], ORIGIN)))
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    environment = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(CHECKOUT),
    }
    out = tmp_path / "out"
    submitted = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         script, "compact", str(source), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    summary = json.loads(submitted.stdout.strip().splitlines()[-1])
    assert summary["rows_written"] == 2
    assert [path.name for path in out.glob("topic=orders/date=*/hour=*")] == ["hour=0"]
