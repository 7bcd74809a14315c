"""Archives as one DataFrame of messages, whatever their format, compression or damage.

Columns (MESSAGE_COLUMNS): topic, host, id, timestamp, timestamp_ns, attempts, channel,
nsqd, body (binary, byte-equal to what was published), file, and `malformed` for a line
of an envelope archive that is no envelope. Raw archives have no id, attempts, channel or
nsqd. Topic, host and time come from each file's name; an envelope's own topic and
timestamp win where present.

Files Spark reads as they are go through its own JSON and text readers (fast, in the
JVM); the others (damaged, or named otherwise than their content) give their whole
lines through Python tasks, and then take the same transform.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from nsqtools.archive.nameparsing import NameParser
from nsqtools.archive.reading import FileReport, Format, archive_files, scan, whole_lines
from nsqtools.errors import NsqError

ENVELOPE_SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType()),
        T.StructField("timestamp_ns", T.LongType()),
        T.StructField("attempts", T.IntegerType()),
        T.StructField("topic", T.StringType()),
        T.StructField("channel", T.StringType()),
        T.StructField("nsqd", T.StringType()),
        T.StructField("body", T.StringType()),
        T.StructField("encoding", T.StringType()),
    ]
)
MESSAGE_COLUMNS = (
    "topic",
    "host",
    "id",
    "timestamp",
    "timestamp_ns",
    "attempts",
    "channel",
    "nsqd",
    "body",
    "file",
)
_LINES_SCHEMA = "file_uri string, value binary"
_FILES_SCHEMA = "file_uri string, file string, name_topic string, host string, name_time timestamp"


@dataclass(frozen=True)
class ArchiveFile:
    """A scanned file and what its name says."""

    report: FileReport
    topic: str | None = None
    host: str | None = None
    when: datetime | None = None  # aware

    @property
    def uri(self) -> str:
        """The file as Spark's readers name it (input_file_name)."""
        return "file://" + self.report.path


_GLOB_CHARACTERS = re.compile(r"([\\{}\[\]*?])")


def local_uri(path: Path, *, to_read: bool) -> str:
    """A local path as Hadoop takes it: not percent-encoded (a partition directory
    topic=x stays so), and, to read, with the characters its readers glob escaped."""
    text = str(path.absolute())
    return "file://" + (_GLOB_CHARACTERS.sub(r"\\\1", text) if to_read else text)


class UnnamedArchives(NsqError):
    """Raw archives whose names do not say their topic: one line for the user."""


def find_archives(
    sources: Iterable[str], names: NameParser, format: Format | None = None
) -> list[ArchiveFile]:
    """The archives sources name, each scanned (in threads: inflating releases the GIL)
    and its name read. A raw archive must have its topic in its name; an envelope
    carries its own."""
    found = archive_files(sources)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        reports = list(pool.map(functools.partial(scan, format=format), found))
    files = []
    for report, relative_name in zip(reports, found.values(), strict=True):
        name = names.parse(relative_name)
        if name is None and report.format == "raw":
            raise UnnamedArchives(
                f"{report.path}: a raw archive whose name --filename-format does not "
                "give, so its topic is unknown (are --filename-format and "
                "--datetime-format those nsq_to_file ran with?)"
            )
        if name is None:
            files.append(ArchiveFile(report))
        else:
            files.append(ArchiveFile(report, name.topic, name.host, name.when))
    return files


def read_messages(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    """Every whole line of the files as a message row (MESSAGE_COLUMNS and malformed)."""
    parts = [
        reader(spark, chosen)
        for reader, form in ((_envelopes, "json"), (_raw_bodies, "raw"))
        if (chosen := [file for file in files if file.report.format == form])
    ]
    if not parts:
        return spark.createDataFrame([], message_schema())
    lines = functools.reduce(DataFrame.unionByName, parts)
    table = F.broadcast(_files_table(spark, files))
    joined = lines.join(table, "file_uri")
    from_names = {
        "topic": F.coalesce("topic", "name_topic").alias("topic"),
        "timestamp": F.coalesce("timestamp", "name_time").alias("timestamp"),
    }
    return joined.select(*(from_names.get(name, name) for name in MESSAGE_COLUMNS), "malformed")


def message_schema(with_malformed: bool = True) -> T.StructType:
    """MESSAGE_COLUMNS' types, and `malformed` unless told not to."""
    fields = {
        "topic": T.StringType(),
        "host": T.StringType(),
        "id": T.StringType(),
        "timestamp": T.TimestampType(),
        "timestamp_ns": T.LongType(),
        "attempts": T.IntegerType(),
        "channel": T.StringType(),
        "nsqd": T.StringType(),
        "body": T.BinaryType(),
        "file": T.StringType(),
    }
    if with_malformed:
        fields["malformed"] = T.BooleanType()
    return T.StructType([T.StructField(name, kind) for name, kind in fields.items()])


def _files_table(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    rows = [(file.uri, file.report.path, file.topic, file.host, file.when) for file in files]
    return spark.createDataFrame(rows, _FILES_SCHEMA)


def _envelopes(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    native, other = _by_reader(files)
    parts = []
    if native:
        reader = spark.read.schema(ENVELOPE_SCHEMA).option("lineSep", "\n")
        parts.append(reader.json(native).withColumn("file_uri", F.input_file_name()))
    if other:
        parsed = F.from_json(F.col("value").cast("string"), ENVELOPE_SCHEMA).alias("m")
        lines = _python_lines(spark, other)
        parts.append(lines.select("file_uri", parsed).select("file_uri", "m.*"))
    envelopes = functools.reduce(DataFrame.unionByName, parts)
    body = F.col("body")
    return envelopes.select(
        "file_uri",
        "topic",
        "id",
        F.expr("timestamp_micros(div(timestamp_ns, 1000))").alias("timestamp"),
        "timestamp_ns",
        "attempts",
        "channel",
        "nsqd",
        F.when(F.col("encoding") == "base64", F.unbase64(body))
        .otherwise(body.cast("binary"))
        .alias("body"),
        (F.col("id").isNull() | F.col("timestamp_ns").isNull() | body.isNull()).alias("malformed"),
    )


def _raw_bodies(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    native, other = _by_reader(files)
    parts = []
    if native:
        text = spark.read.option("lineSep", "\n").text(native)
        parts.append(text.select(F.input_file_name().alias("file_uri"), _as_binary("value")))
    if other:
        parts.append(_python_lines(spark, other))
    lines = functools.reduce(DataFrame.unionByName, parts)
    missing = {
        "topic": "string",
        "id": "string",
        "timestamp": "timestamp",
        "timestamp_ns": "bigint",
        "attempts": "int",
        "channel": "string",
        "nsqd": "string",
    }
    return lines.select(
        "file_uri",
        *(F.lit(None).cast(kind).alias(name) for name, kind in missing.items()),
        F.col("value").alias("body"),
        F.lit(False).alias("malformed"),
    )


def _as_binary(column: str) -> Column:
    """A text line as its bytes: the cast keeps them as read, valid UTF-8 or not."""
    return F.col(column).cast("binary").alias(column)


def _by_reader(files: Sequence[ArchiveFile]) -> tuple[list[str], list[ArchiveFile]]:
    """The URIs of the files Spark's readers take as they are, and the other files."""
    native = [file.uri for file in files if file.report.spark_reads_as_is]
    other = [file for file in files if not file.report.spark_reads_as_is]
    return native, other


def _python_lines(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    """The whole lines of files read in Python tasks, one task per file."""
    named = [(file.uri, file.report.path) for file in files]
    lines = spark.sparkContext.parallelize(named, len(named)).flatMap(_lines_of)
    return spark.createDataFrame(lines, _LINES_SCHEMA)


def _lines_of(named: tuple[str, str]) -> Iterator[tuple[str, bytes]]:
    uri, path = named
    return ((uri, line) for line in whole_lines(path))
