"""Issue 28's measure: `nsq archive compact` from and to S3 (`s3a://`) beside the same job
on local files: what the object store's reads, writes and commit cost.

The input is archive_compact.py's (made or taken from its cache), uploaded once to an
S3-compatible server on loopback (moto's, nsqtools.testing.s3, as the tests use it;
a Python server checking every request's signature, so its figures are an upper bound
of a real store's per-request cost, not of its bandwidth). Each round runs ours as a
whole process on local[2], local files to a local directory, then s3a:// to s3a://
(fresh output prefixes each time: a first compaction, nothing to merge), and checks that
both wrote the rows the generator made. Printed: every run, the medians of the job
(everything after the SparkSession's start) and of the whole process, the ratio s3a /
local, and how many requests the S3 run made (moto's log lines).

    .venv/bin/python bench/archive_s3.py [--messages N] [--files F] [--runs R]
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from archive_compact import Corpus, Spark, check, parsed_corpus, run_ours, table_row

from nsqtools.testing.s3 import S3Server

BUCKET = "bench"
MASTER = "local[2]"


def requests_made(s3: S3Server) -> int:
    """The requests moto's server has logged so far."""
    return sum(1 for line in (s3.folder / "moto.log").read_text().splitlines() if '" ' in line)


def upload(s3: S3Server, data: Corpus) -> list[str]:
    s3.create_bucket(BUCKET)
    for path in data.paths:
        s3.put(BUCKET, f"in/{path.name}", path.read_bytes())
    return [f"s3a://{BUCKET}/in"]


def written_rows(s3: S3Server, prefix: str, data: Corpus, scratch: Path) -> None:
    """Download what the S3 run wrote and check it as archive_compact checks its output."""
    local = scratch / "downloaded"
    for key in s3.keys(BUCKET, prefix):
        if key.endswith("/"):  # S3A's marker of a directory
            continue
        target = local / key[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.get(BUCKET, key))
    check("ours on s3a", local, data)


def main() -> None:
    data, runs = parsed_corpus(__doc__ or "", messages=200_000)
    local_runs: list[Spark] = []
    s3_runs: list[Spark] = []
    requests: list[int] = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        with S3Server(scratch / "s3") as s3:
            sources = upload(s3, data)
            for round_number in range(runs):
                place = scratch / f"round-{round_number}"
                (place / "local").mkdir(parents=True)
                local_runs.append(run_ours(data, place / "out", MASTER, place / "local"))
                check("ours on local files", place / "out", data)
                (place / "s3").mkdir()
                before = requests_made(s3)
                prefix = f"out-{round_number}"
                s3_runs.append(
                    run_ours(
                        data,
                        f"s3a://{BUCKET}/{prefix}",
                        MASTER,
                        place / "s3",
                        s3.spark_conf,
                        sources,
                    )
                )
                requests.append(requests_made(s3) - before)
                written_rows(s3, f"{prefix}/", data, place / "s3")
                print(
                    f"round {round_number + 1}: local job {local_runs[-1].seconds['job']:.1f} s, "
                    f"s3a job {s3_runs[-1].seconds['job']:.1f} s, {requests[-1]} requests"
                )
    summarise(data, local_runs, s3_runs, requests)


def summarise(data: Corpus, local: list[Spark], s3: list[Spark], requests: list[int]) -> None:
    """Each line: the runs' seconds, then their median (table_row's layout)."""
    print(f"\n{data.lines:,} envelope lines in {len(data.paths)} files, {MASTER}")
    for label, runs in (("local files", local), ("s3a", s3)):
        print(table_row(f"{label}: job s", [run.seconds["job"] for run in runs]))
        print(table_row(f"{label}: process s", [run.wall for run in runs]))
    job = statistics.median(run.seconds["job"] for run in s3)
    ratio = job / statistics.median(run.seconds["job"] for run in local)
    print(f"s3a / local (job, medians): {ratio:.2f}")
    print(f"S3 requests per run (median): {statistics.median(requests):.0f}")


if __name__ == "__main__":
    main()
