"""`nsq archive compact SRC... --out DIR`: archives → Parquet partitioned by topic, date
and hour (UTC), envelopes deduplicated by message id (nsqtools.spark.compact), and a
summary: files, damaged files, rows read, left out and written, partitions.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import consoles
from nsqtools.commands.archive.jobs import (
    Scanned,
    archive_options,
    find_archives,
    run_job,
    sources_argument,
)
from nsqtools.commands.cluster_cli import Column, Table, print_tables
from nsqtools.commands.front import CONTEXT_SETTINGS
from nsqtools.spark.storage import location_uri, shown

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from nsqtools.spark.compact import Compacted
    from nsqtools.spark.messages import ArchiveFile


@click.command(context_settings=CONTEXT_SETTINGS)
@sources_argument
@click.option(
    "--out",
    "out",
    required=True,
    metavar="DIR",
    help="Output directory, a local path or a Hadoop URI (s3a://bucket/prefix, "
    "hdfs://...): Parquet under topic=T/date=YYYY-MM-DD/hour=H/ (UTC).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@archive_options
def command(**options: Any) -> None:
    """Compact archives (files or directories) into Parquet, by topic, date and hour.

    \b
    Envelope archives (nsq_to_file --format json) are deduplicated by message id: of a
    message written twice (a requeue, a crash), the copy with the fewest attempts stays.
    Raw archives cannot be deduplicated. A partition already in DIR keeps its rows from
    other archives (so an hour may be compacted in several runs) and has those of the
    archives compacted again replaced. Each partition is replaced whole: a job killed
    halfway leaves no partial partition, and the same input gives the same rows.
    """
    out = location_uri(options["out"])
    conf = options["conf"]
    run = run_job(
        options,
        find_archives(options),
        lambda spark, files: _compact(spark, files, out, conf),
        consoles.stderr(),
    )
    outcome = run.result
    if options["as_json"]:
        click.echo(json.dumps(_summary_json(outcome, run.seconds), sort_keys=True))
    else:
        print_tables(_summary_tables(outcome, out))


def _compact(
    spark: SparkSession, files: list[ArchiveFile], out: str, conf: tuple[str, ...]
) -> Scanned[Compacted]:
    from nsqtools.spark.compact import compact
    from nsqtools.spark.session import parse_conf
    from nsqtools.spark.storage import Storage

    store = Storage.of(spark, parse_conf(conf))
    return Scanned(files, compact(spark, store, files, out))


def _raw_files(files: list[ArchiveFile]) -> int:
    return sum(file.report.format == "raw" for file in files)


def _summary_json(outcome: Scanned[Compacted], seconds: dict[str, float]) -> dict[str, Any]:
    compacted = outcome.result
    return {
        "files": len(outcome.files),
        "raw_files": _raw_files(outcome.files),
        "damaged": outcome.damaged_json(),
        "rows_read": compacted.rows_read,
        "malformed": compacted.malformed,
        "duplicates": compacted.duplicates,
        "rows_written": compacted.rows_written,
        "partitions": compacted.partitions,
        "seconds": {name: round(value, 3) for name, value in seconds.items()},
    }


def _summary_tables(outcome: Scanned[Compacted], out: str) -> list[Table]:
    compacted = outcome.result
    title = f"Compacted into {shown(out)}"
    summary = Table([Column("what"), Column("count", numeric=True)], title=title)
    rows = [
        ("files", len(outcome.files)),
        ("damaged files (their whole lines used)", len(outcome.damaged())),
        ("rows read", compacted.rows_read),
        ("malformed lines left out", compacted.malformed),
        ("duplicates left out", compacted.duplicates),
        ("rows written", compacted.rows_written),
        ("partitions written", len(compacted.partitions)),
    ]
    for what, count in rows:
        summary.add([what, f"{count:,}"])
    tables = [summary]
    raw = _raw_files(outcome.files)
    if raw:
        summary.title += f" ({raw} raw archives: not deduplicated, they carry no message id)"
    return [*tables, *outcome.damaged_table()]
