"""What the least Spark job costs beside DuckDB: the floor under `nsq archive compact`.

Issue 31 asks compaction within 3x of DuckDB (bench/archive_compact.py). This measures
where Spark itself stands on the same files and machine: the least job that does the
work DuckDB's does, less the deduplication (read the envelopes with Spark's JSON reader,
body as bytes, date and hour; one shuffle by partition; Parquet partitioned by topic,
date and hour), run as ours runs, in a fresh process: SparkSession started and the
archives scanned as `nsq archive compact` does (nsqtools' own session and scan), then
the job timed to its end. Each round runs DuckDB's job (archive_compact.py's), this
least job, and `nsq archive compact` on local[2]; printed: every run, the medians, and
each round's ratios (its contenders shared its noise).

    .venv/bin/python bench/archive_floor.py [--messages N] [--files F] [--runs R]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from archive_compact import (
    CHECKOUT,
    TIME_LIMIT,
    Corpus,
    check,
    parsed_corpus,
    rows_in,
    run_duckdb,
    run_ours,
)

CHILD = "--least-job"  # argv[1] of this script run as the process that runs the job


def least_job(out: str, paths: list[str]) -> float:
    """In this process: a session and the scan as the command has them, then the job's
    seconds."""
    from nsqtools.commands.archive.jobs import (
        GO_DATETIME_FORMAT,
        GO_FILENAME_FORMAT,
        find_archives,
    )
    from nsqtools.spark import session
    from nsqtools.spark.compact import PARTITION_COLUMNS, with_partition_columns
    from nsqtools.spark.messages import ENVELOPE_SCHEMA, envelope_columns

    spark, _ = session.start(session.SparkSettings(master="local[2]"))
    options = {
        "sources": paths,
        "filename_format": GO_FILENAME_FORMAT,
        "datetime_format": GO_DATETIME_FORMAT,
        "timezone": None,
        "archive_format": "auto",
    }
    find_archives(options)(spark)
    started = time.perf_counter()
    lines = spark.read.schema(ENVELOPE_SCHEMA).option("lineSep", "\n").json(paths)
    rows = lines.select(*envelope_columns())
    shuffled = with_partition_columns(rows).repartition(*PARTITION_COLUMNS)
    shuffled.write.partitionBy(*PARTITION_COLUMNS).parquet(out)
    return time.perf_counter() - started


def run_least_job(data: Corpus, out: Path) -> float:
    """The least job's seconds, in a process of its own; every line is a row of its
    output (it keeps the copies)."""
    argv = [sys.executable, __file__, CHILD, str(out), *map(str, data.paths)]
    environ = {**os.environ, "PYTHONPATH": str(CHECKOUT)}  # ours from this checkout
    done = subprocess.run(argv, capture_output=True, env=environ, timeout=TIME_LIMIT, check=False)
    if done.returncode != 0:
        sys.exit(f"the least job: exit status {done.returncode}: {done.stderr.decode()[-2000:]}")
    rows = sum(rows_in(out).values())
    if rows != data.lines:
        sys.exit(f"the least job wrote {rows} rows of {data.lines} lines")
    seconds: float = json.loads(done.stdout.decode().splitlines()[-1])["job"]
    return seconds


def main() -> None:
    data, runs = parsed_corpus(__doc__ or "")
    times: dict[str, list[float]] = {"duckdb": [], "least": [], "ours": []}
    with tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp:
        scratch = Path(tmp)
        for run in range(1, runs + 1):
            times["duckdb"].append(run_duckdb(data, scratch / f"duckdb-{run}"))
            check(f"duckdb run {run}", scratch / f"duckdb-{run}", data)
            times["least"].append(run_least_job(data, scratch / f"least-{run}"))
            folder = scratch / f"ours-{run}"
            folder.mkdir()
            ours = run_ours(data, folder / "out", "local[2]", folder)
            check(f"ours run {run}", folder / "out", data)
            times["ours"].append(ours.seconds["job"])
            print(f"run {run}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()))
    print(f"\njob seconds, {data.lines:,} lines, medians of {runs} runs:")
    for name, values in times.items():
        print(f"{name:>7} {statistics.median(values):7.2f}   / duckdb by round: ", end="")
        print(ratios(values, times["duckdb"]))
    print(f"ours / least by round: {ratios(times['ours'], times['least'])}")


def ratios(values: list[float], bases: list[float]) -> str:
    return ", ".join(f"{value / base:.2f}" for value, base in zip(values, bases, strict=True))


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD]:
        print(json.dumps({"job": least_job(sys.argv[2], sys.argv[3:])}))
    else:
        main()
