"""Issue 28's measure: `nsq archive compact` on a Spark standalone cluster beside local[2]
and DuckDB, on the same files (archive_compact.py's input, made or taken from its cache).

The cluster is the tests' (nsqtools.testing.spark_cluster), started once by this script:
a master and two workers of one core each on loopback, each worker running one executor
of one core (1 GiB) in a JVM of its own, with Python workers of their own; the driver is
ours, a whole process on `--master spark://...` (the tests' submit confs: every task
waits for both executors). So the cluster's run pays what local mode does not: two more
JVMs to start per job, and rows shuffled between processes through the network stack.

Each round runs DuckDB (2 threads, in this process), ours on local[2] and ours on the
cluster; every output must hold the rows the generator made, per (topic, date, hour).
Printed: every run, the medians, the ratios (cluster / local[2] and cluster / DuckDB, of
the job: everything after the SparkSession's start), each of every round too, and how
many tasks each executor ran in the median cluster run (from its event log).

    .venv/bin/python bench/archive_cluster.py [--messages N] [--files F] [--runs R]
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from archive_compact import (
    Corpus,
    Spark,
    check,
    median_run,
    parsed_corpus,
    run_duckdb,
    run_ours,
    table_row,
)

from nsqtools.testing.spark_cluster import SparkCluster

# Each worker's one executor takes all the worker's memory (spark_cluster gives it 1g).
EXECUTOR_MEMORY = {"spark.executor.memory": "1g"}


@dataclass
class Results:
    duckdb: list[float] = field(default_factory=list)
    local: list[Spark] = field(default_factory=list)
    cluster: list[Spark] = field(default_factory=list)
    executors: list[Counter[str]] = field(default_factory=list)  # tasks per executor


def tasks_per_executor(events: Path) -> Counter[str]:
    """Tasks that succeeded, per executor id, from a Spark event log (JSON lines)."""
    (log,) = events.iterdir()
    tasks: Counter[str] = Counter()
    with log.open() as lines:
        for line in lines:
            record = json.loads(line)
            if record["Event"] == "SparkListenerTaskEnd" and not record["Task Info"]["Failed"]:
                tasks[record["Task Info"]["Executor ID"]] += 1
    return tasks


def measure(data: Corpus, runs: int, scratch: Path, cluster: SparkCluster) -> Results:
    results = Results()
    conf = {**cluster.submit_conf, **EXECUTOR_MEMORY}
    for run in range(1, runs + 1):
        out = scratch / f"duckdb-{run}"
        results.duckdb.append(run_duckdb(data, out))
        check(f"duckdb run {run}", out, data)
        print(f"run {run} duckdb: job {results.duckdb[-1]:.2f} s", flush=True)
        for name, master, extra, spark_runs in (
            ("local[2]", "local[2]", {}, results.local),
            ("cluster", cluster.master_url, conf, results.cluster),
        ):
            folder = scratch / f"{name.replace('[2]', '2')}-{run}"  # no glob characters
            folder.mkdir()
            spark = run_ours(data, folder / "out", master, folder, extra)
            check(f"ours {name} run {run}", folder / "out", data)
            spark_runs.append(spark)
            if name == "cluster":
                results.executors.append(tasks_per_executor(folder / "events"))
            reported = ", ".join(f"{key} {value:.2f} s" for key, value in spark.seconds.items())
            print(f"run {run} ours {name}: {reported}; process {spark.wall:.2f} s", flush=True)
    return results


def summarise(results: Results, data: Corpus, runs: int) -> None:
    header = "".join(f"{f'run {run}':>8}" for run in range(1, runs + 1))
    print(f"\nseconds, {data.lines:,} lines, {sum(data.expected.values()):,} rows after dedup:")
    print(f"{'':<28}{header}{'median':>10}")
    print(table_row("duckdb job", results.duckdb))
    for name, sparks in (("local[2]", results.local), ("cluster", results.cluster)):
        for key in sparks[0].seconds:
            print(table_row(f"ours {name} {key}", [spark.seconds[key] for spark in sparks]))
        print(table_row(f"ours {name} process", [spark.wall for spark in sparks]))
    # The ratios of each round too: the contenders of one round share its noise.
    rounds = list(zip(results.cluster, results.local, results.duckdb, strict=True))
    cluster_local = [cluster.seconds["job"] / local.seconds["job"] for cluster, local, _ in rounds]
    print(table_row("cluster / local[2], job", cluster_local))
    print(table_row("cluster / duckdb, job", [c.seconds["job"] / d for c, _, d in rounds]))
    print(table_row("local[2] / duckdb, job", [local.seconds["job"] / d for _, local, d in rounds]))
    job = {
        name: statistics.median(spark.seconds["job"] for spark in sparks)
        for name, sparks in (("local[2]", results.local), ("cluster", results.cluster))
    }
    duckdb_job = statistics.median(results.duckdb)
    print(
        f"\njob medians: cluster {job['cluster']:.2f} s, local[2] {job['local[2]']:.2f} s,"
        f" duckdb {duckdb_job:.2f} s"
    )
    print(
        f"cluster / local[2]: {job['cluster'] / job['local[2]']:.2f}x;"
        f" cluster / duckdb: {job['cluster'] / duckdb_job:.2f}x"
    )
    median = results.cluster.index(median_run(results.cluster))
    tasks = ", ".join(
        f"executor {key}: {count}" for key, count in sorted(results.executors[median].items())
    )
    print(f"tasks of the median cluster run: {tasks}")


def main() -> None:
    data, runs = parsed_corpus(__doc__ or "")
    with (
        tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp,
        SparkCluster(Path(tmp) / "spark", workers=2) as cluster,
    ):
        print(f"cluster: {cluster.master_url}", flush=True)
        results = measure(data, runs, Path(tmp), cluster)
    summarise(results, data, runs)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
