"""`nsq archive sql QUERY SRC...`: a Spark SQL query over the table `messages` (archives,
or Parquet that compact wrote; nsqtools.spark.query), printed as a table (rich on a
terminal), CSV or JSON lines. CSV and JSON lines stream the rows, however many.
"""

from __future__ import annotations

import base64
import csv
import json
import sys
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import consoles
from nsqtools.commands.archive.jobs import Sources, archive_options, find_sources, run_job
from nsqtools.commands.cluster_cli import Column, Table, print_tables
from nsqtools.commands.front import CONTEXT_SETTINGS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession


TABLE_ROWS = 1000  # --limit's default for a table


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("query")
@click.argument("sources", nargs=-1, required=True, metavar="SRC...")
@click.option(
    "--output",
    type=click.Choice(["table", "csv", "json"]),
    help="How to print the rows: a table, CSV with a header, or one JSON object per line "
    "(binary as base64).  [default: table on a terminal, else csv]",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    help=f"Print at most this many rows (0: all).  [default: {TABLE_ROWS} for a table, else all]",
)
@click.option(
    "--body-schema",
    metavar="DDL",
    help='The JSON bodies\' schema for the column data, e.g. "user INT, event STRING"; '
    "default: inferred from a sample of the bodies.",
)
@click.option(
    "--sample-size",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Bodies to infer data's schema from.",
)
@archive_options
def command(**options: Any) -> None:
    """Query archives (or compacted Parquet) with Spark SQL, as the table `messages`.

    \b
    Columns: topic, host, id, timestamp, timestamp_ns, attempts, channel, nsqd, body
    (binary), file, date, hour (UTC), body_text (NULL when the body is not UTF-8) and
    data (the body parsed as JSON: data.user, data.items[0]...). For example:
      nsq archive sql "SELECT topic, count(*) AS n FROM messages GROUP BY topic" /var/archive
    """
    output = options["output"] or ("table" if sys.stdout.isatty() else "csv")
    limit = options["limit"]
    if limit is None:
        limit = TABLE_ROWS if output == "table" else 0

    def query(spark: SparkSession, sources: Sources) -> None:
        from nsqtools.spark.query import messages_table, register

        table = messages_table(spark, sources.archives, sources.compacted)
        register(spark, table, options["query"], options["body_schema"], options["sample_size"])
        _print(spark.sql(options["query"]), output, limit)

    run_job(options, find_sources(options), query, consoles.stderr())


def _print(result: DataFrame, output: str, limit: int) -> None:
    limited = result.limit(limit + 1) if output == "table" and limit else result
    rows: Iterable[Row] = limited.toLocalIterator()
    if limit:
        rows = _first(rows, limit)
    if output == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(result.columns)
        writer.writerows([_text(value) for value in row] for row in rows)
    elif output == "json":
        for row in rows:
            sys.stdout.write(json.dumps(_jsonable(row.asDict(recursive=True))) + "\n")
    else:
        _print_table(result.columns, list(rows), limited, limit)


def _first(rows: Iterable[Row], limit: int) -> Iterator[Row]:
    for index, row in enumerate(rows):
        if index == limit:
            return
        yield row


def _print_table(columns: list[str], rows: list[Row], limited: DataFrame, limit: int) -> None:
    table = Table([Column(name) for name in columns])
    for row in rows:
        table.add([_text(value) for value in row])
    if limit and len(rows) == limit and limited.count() > limit:
        table.title = f"the first {limit:,} rows (--limit 0 for all)"
    print_tables([table])


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value
