"""`nsq archive stats SRC...`: messages, bytes and duplicates per topic and hour, first
and last timestamps, and the damaged files (named, with the whole lines still used):
tables, or one JSON document with --json. --strict makes damage an exit status of 1.
"""

from __future__ import annotations

import json
from dataclasses import asdict
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
from nsqtools.commands.front import CONTEXT_SETTINGS, fail

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from nsqtools.spark.messages import ArchiveFile
    from nsqtools.spark.stats import ArchiveStats, HourStats


@click.command(context_settings=CONTEXT_SETTINGS)
@sources_argument
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option(
    "--strict",
    is_flag=True,
    help="Exit with status 1 when a file is damaged or a line is no envelope.",
)
@archive_options
def command(**options: Any) -> None:
    """Count what archives hold, per topic and hour (UTC), and find the damaged files.

    \b
    Messages, body bytes, duplicates (envelope messages written more than once: a
    requeue, a crash; raw archives carry no id, so theirs cannot be known), first and
    last timestamp. A damaged file (a gzip member cut short or corrupt, a last line
    without its newline) is named, and its whole lines before the damage are counted.
    """
    run = run_job(options, find_archives(options), _stats, consoles.stderr())
    outcome = run.result
    if options["as_json"]:
        click.echo(json.dumps(_as_json(outcome), sort_keys=True, default=str))
    else:
        print_tables(_tables(outcome))
    damaged, malformed = len(outcome.damaged()), sum(outcome.result.malformed.values())
    if options["strict"] and (damaged or malformed):
        fail(f"--strict: {damaged} damaged files, {malformed} lines that are no envelope")


def _stats(spark: SparkSession, files: list[ArchiveFile]) -> Scanned[ArchiveStats]:
    from nsqtools.spark.messages import read_messages
    from nsqtools.spark.stats import archive_stats

    return Scanned(files, archive_stats(read_messages(spark, files)))


def _as_json(outcome: Scanned[ArchiveStats]) -> dict[str, Any]:
    return {
        "files": len(outcome.files),
        "hours": [asdict(hour) for hour in outcome.result.hours],
        "damaged": outcome.damaged_json(),
        "malformed": outcome.result.malformed,
    }


def _duplicates_cell(hour: HourStats) -> str:
    """Raw messages' copies cannot be known: '-' when all are raw, '≥N' when some are."""
    if hour.raw == hour.messages:
        return "-"
    return f"{'≥' if hour.raw else ''}{hour.duplicates:,}"


def _tables(outcome: Scanned[ArchiveStats]) -> list[Table]:
    hours = Table(
        [
            Column("topic"),
            Column("date"),
            Column("hour", numeric=True),
            Column("messages", numeric=True),
            Column("bytes", numeric=True),
            Column("duplicates", numeric=True),
            Column("first (UTC)"),
            Column("last (UTC)"),
        ],
        title=f"{len(outcome.files)} archive files",
    )
    for hour in outcome.result.hours:
        hours.add(
            [
                hour.topic,
                hour.date,
                str(hour.hour),
                f"{hour.messages:,}",
                f"{hour.bytes:,}",
                _duplicates_cell(hour),
                f"{hour.first:%Y-%m-%d %H:%M:%S}" if hour.first else "",
                f"{hour.last:%Y-%m-%d %H:%M:%S}" if hour.last else "",
            ]
        )
    if any(hour.raw for hour in outcome.result.hours):
        hours.title += " (duplicates: '-' for raw archives, which carry no message id)"
    tables = [hours]
    tables += outcome.damaged_table()
    if outcome.result.malformed:
        table = Table(
            [Column("file"), Column("lines that are no envelope", numeric=True)],
            title="Malformed lines (left out)",
        )
        for path, count in sorted(outcome.result.malformed.items()):
            table.add([path, f"{count:,}"])
        tables.append(table)
    return tables
