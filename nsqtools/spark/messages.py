"""Archives as one DataFrame of messages, whatever their format, compression or damage.

Columns (MESSAGE_COLUMNS): topic, host, id, timestamp, timestamp_ns, attempts, channel,
nsqd, body (binary, byte-equal to what was published), file, and `malformed` for a line
of an envelope archive that is no envelope. Raw archives have no id, attempts, channel or
nsqd. Topic, host and time come from each file's name; an envelope's own topic and
timestamp win where present.

Sources are local paths or any Hadoop URI (s3a://, hdfs://...): Spark lists them, and
scans each file in its tasks (nsqtools.archive.reading: format, damage), so the driver
needs no access of its own to the files. Files Spark reads as they are go through its
own JSON and text readers (fast, in the JVM); the others (damaged, or named otherwise
than their content) give their whole lines through Python tasks, and then take the same
transform.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pyarrow
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from nsqtools.archive.nameparsing import NameParser
from nsqtools.archive.reading import FileReport, Format, SourceError, scan, whole_lines
from nsqtools.errors import NsqError
from nsqtools.spark import storage

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
# What S3A needs beside PySpark's own Hadoop (the version PySpark's jars/ has).
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
_LINES_SCHEMA = "file_uri string, value binary"
_LINES_ARROW_SCHEMA = pyarrow.schema([("file_uri", pyarrow.string()), ("value", pyarrow.binary())])
_LINES_PER_BATCH = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The small tables read_indexed_messages and with_file_columns join (broadcast).
_BY_URI_SCHEMA = T.StructType(
    [
        T.StructField("file_uri", T.StringType()),
        T.StructField("file_index", T.IntegerType()),
        T.StructField("name_topic", T.StringType()),
        T.StructField("name_time", T.TimestampType()),
    ]
)
_BY_INDEX_SCHEMA = T.StructType(
    [
        T.StructField("file_index", T.IntegerType()),
        T.StructField("host", T.StringType()),
        T.StructField("file", T.StringType()),
    ]
)
_REPORT_FIELDS = ("size", "gzip", "format", "lines", "content_bytes", "damage")
_REPORT_SCHEMA = (
    "uri string, size bigint, gzip boolean, format string, lines bigint, "
    "content_bytes bigint, damage string"
)


@dataclass(frozen=True)
class ArchiveFile:
    """A scanned file and what its name says."""

    uri: str  # as Hadoop names it (nsqtools.spark.storage)
    report: FileReport
    topic: str | None = None
    host: str | None = None
    when: datetime | None = None  # aware


class UnnamedArchives(NsqError):
    """Raw archives whose names do not say their topic: one line for the user."""


@dataclass(frozen=True)
class Listed:
    """A file a source names: its URI, and its name relative to the source (the
    directory listed, or the file's own directory), the name nsq_to_file gave it."""

    uri: str
    relative_name: str


def list_sources(spark: SparkSession, sources: Sequence[str]) -> dict[str, list[Listed]]:
    """The files each source names (a local path or any Hadoop URI, a file or a
    directory listed to its depth), hidden ones aside, in a stable order; listed by
    Spark, so through Hadoop's FileSystem wherever the source is."""
    if not sources:
        return {}
    reader = spark.read.format("binaryFile").option("recursiveFileLookup", "true")
    frames = []
    for index, source in enumerate(sources):
        uri = storage.location_uri(source)
        readable = storage.to_read(uri) if storage.is_local(uri) else uri
        try:
            frame = reader.load(readable)
        except (AnalysisException, Py4JJavaError) as error:
            raise _source_error(source, error) from None
        frames.append(frame.select(F.lit(index).alias("source"), "path"))
    try:
        rows = functools.reduce(DataFrame.unionByName, frames).collect()
    except (AnalysisException, Py4JJavaError) as error:
        raise _source_error(", ".join(sources), error) from None
    listed: dict[str, list[Listed]] = {source: [] for source in sources}
    for row in sorted(rows, key=lambda row: (row.source, row.path)):
        source = sources[row.source]
        listed[source].append(Listed(row.path, _relative_name(source, row.path)))
    return listed


def is_compacted(listed: Sequence[Listed]) -> bool:
    """Files of a directory nsq archive compact wrote: partition directories topic=…,
    or Parquet files; read as a table, not as archives."""
    return any(
        file.relative_name.startswith("topic=") or file.relative_name.endswith(".parquet")
        for file in listed
    )


def _source_error(source: str, error: Exception) -> SourceError:
    """What a source's listing failed on, in a line: Spark's message, or for a failure in
    the JVM (a store it cannot reach) the Java exception's own."""
    if isinstance(error, AnalysisException) and error.getCondition() == "PATH_NOT_FOUND":
        return SourceError(f"{source}: no such file or directory")
    java = getattr(error, "java_exception", None)
    reason = _first_line(str(java) if java is not None else str(error))
    if source.startswith("s3a:") and ("S3AFileSystem" in reason or "No FileSystem" in reason):
        reason += f" (S3A needs --conf spark.jars.packages={HADOOP_AWS})"
    return SourceError(f"{source}: {reason}")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _relative_name(source: str, uri: str) -> str:
    """uri's name relative to source: below a directory, its path under it; a file
    named itself (or matched by a glob), its base name."""
    root = urlsplit(storage.location_uri(source)).path.rstrip("/") + "/"
    path = urlsplit(uri).path
    return path[len(root) :] if path.startswith(root) else path.rsplit("/", 1)[-1]


def find_archives(
    spark: SparkSession,
    listed: Sequence[Listed],
    names: NameParser,
    format: Format | None = None,
) -> list[ArchiveFile]:
    """The listed archives, each scanned (in Spark's tasks, where the files are) and its
    name read. A raw archive must have its topic in its name; an envelope carries its
    own."""
    reports = _scanned(spark, [file.uri for file in listed], format)
    files = []
    for file in listed:
        report = reports[file.uri]
        name = names.parse(file.relative_name)
        if name is None and report.format == "raw":
            raise UnnamedArchives(
                f"{report.path}: a raw archive whose name --filename-format does not "
                "give, so its topic is unknown (are --filename-format and "
                "--datetime-format those nsq_to_file ran with?)"
            )
        if name is None:
            files.append(ArchiveFile(file.uri, report))
        else:
            files.append(ArchiveFile(file.uri, report, name.topic, name.host, name.when))
    return files


def _scanned(
    spark: SparkSession, uris: Sequence[str], format: Format | None
) -> dict[str, FileReport]:
    """Each file's report, by URI: one Spark job, the files read in Python tasks."""
    if not uris:
        return {}
    contents = _contents(spark, uris)
    scanned = contents.mapInArrow(functools.partial(_scan_batches, format), _REPORT_SCHEMA)
    return {
        row.uri: FileReport(
            path=storage.shown(row.uri),
            size=row.size,
            gzip=row.gzip,
            format=row.format,
            lines=row.lines,
            content_bytes=row.content_bytes,
            damage=row.damage,
        )
        for row in scanned.collect()
    }


def _contents(spark: SparkSession, uris: Sequence[str]) -> DataFrame:
    """Each file's URI and bytes (Spark packs small files into one task, a large one
    has its own: a task holds about spark.sql.files.maxPartitionBytes of them)."""
    files = spark.read.format("binaryFile").load([storage.to_read(uri) for uri in uris])
    return files.select(F.col("path").alias("uri"), "content")


def _scan_batches(format: Format | None, batches: Iterable[Any]) -> Iterator[Any]:
    import pyarrow

    for batch in batches:
        reports = [
            scan(io.BytesIO(content), "", format) for content in batch.column("content").to_pylist()
        ]
        yield pyarrow.RecordBatch.from_pylist(
            [
                {"uri": uri, **{key: getattr(report, key) for key in _REPORT_FIELDS}}
                for uri, report in zip(batch.column("uri").to_pylist(), reports, strict=True)
            ]
        )


def read_messages(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    """Every whole line of the files as a message row (MESSAGE_COLUMNS and malformed)."""
    return with_file_columns(spark, files, read_indexed_messages(spark, files))


def read_indexed_messages(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    """read_messages' rows with `file_index` (the file's rank by its name, an int) in place
    of host and file: narrow rows for a job that shuffles and sorts them, which adds the
    two back (with_file_columns) once it is done with them."""
    parts = [
        reader(spark, chosen)
        for reader, form in ((_envelopes, "json"), (_raw_bodies, "raw"))
        if (chosen := [file for file in files if file.report.format == form])
    ]
    if not parts:
        return spark.createDataFrame([], _INDEXED_SCHEMA)
    lines = functools.reduce(DataFrame.unionByName, parts)
    ranks = _ranks_by_name(files)
    rows = [(file.uri, ranks[file.uri], file.topic, file.when) for file in files]
    table = F.broadcast(_literal_table(spark, _BY_URI_SCHEMA, rows))
    from_names = {
        "topic": F.coalesce("topic", "name_topic").alias("topic"),
        "timestamp": F.coalesce("timestamp", "name_time").alias("timestamp"),
    }
    joined = lines.join(table, "file_uri")
    return joined.select(*(from_names.get(name, name) for name in _INDEXED_SCHEMA.fieldNames()))


def with_file_columns(
    spark: SparkSession, files: Sequence[ArchiveFile], rows: DataFrame
) -> DataFrame:
    """Rows of read_indexed_messages (or made from them) with host and file in place of
    file_index: MESSAGE_COLUMNS first, then the rows' other columns in their order."""
    ranks = _ranks_by_name(files)
    names = [(ranks[file.uri], file.host, file.report.path) for file in files]
    table = F.broadcast(_literal_table(spark, _BY_INDEX_SCHEMA, names))
    rest = [name for name in rows.columns if name not in (*MESSAGE_COLUMNS, "file_index")]
    return rows.join(table, "file_index").select(*MESSAGE_COLUMNS, *rest)


def _ranks_by_name(files: Sequence[ArchiveFile]) -> dict[str, int]:
    """Each file's rank by the name it is shown by: file_index orders files as names do."""
    ordered = sorted(files, key=lambda file: (file.report.path, file.uri))
    return {file.uri: rank for rank, file in enumerate(ordered)}


def _literal_table(
    spark: SparkSession, schema: T.StructType, rows: list[tuple[Any, ...]]
) -> DataFrame:
    """A small table made in the JVM from one JSON text in the plan: no Python task makes
    it (a table from Python rows is a job of its own, Python workers and all), and its
    plan is one expression however many rows (a literal per value took 141 s for 10,000
    files: a call to the JVM each). Timestamps travel as microseconds since the epoch."""
    timestamps = {f.name for f in schema.fields if isinstance(f.dataType, T.TimestampType)}
    as_json = T.StructType(
        [
            T.StructField(field.name, T.LongType() if field.name in timestamps else field.dataType)
            for field in schema.fields
        ]
    )
    text = json.dumps(
        [
            {
                field.name: _json_value(value)
                for value, field in zip(row, schema.fields, strict=True)
            }
            for row in rows
        ]
    )
    table = spark.range(1).select(F.inline(F.from_json(F.lit(text), T.ArrayType(as_json))))
    return table.select(
        *(
            F.timestamp_micros(name).alias(name) if name in timestamps else F.col(name)
            for name in schema.fieldNames()
        )
    )


def _json_value(value: Any) -> Any:
    """A value as _literal_table's JSON holds it: an aware datetime as microseconds."""
    if isinstance(value, datetime):
        return (value - _EPOCH) // timedelta(microseconds=1)
    return value


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


# read_indexed_messages' rows: message_schema's, with file_index for host and file.
_INDEXED_SCHEMA = T.StructType(
    [field for field in message_schema().fields if field.name not in ("host", "file", "malformed")]
    + [T.StructField("file_index", T.IntegerType()), T.StructField("malformed", T.BooleanType())]
)


def _envelopes(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    native, other = _by_reader(files)
    parts = []
    if native:
        reader = spark.read.schema(ENVELOPE_SCHEMA).option("lineSep", "\n")
        parts.append(reader.json(native).withColumn("file_uri", _file_uri()))
    if other:
        parsed = F.from_json(F.col("value").cast("string"), ENVELOPE_SCHEMA).alias("m")
        lines = _python_lines(spark, other)
        parts.append(lines.select("file_uri", parsed).select("file_uri", "m.*"))
    envelopes = functools.reduce(DataFrame.unionByName, parts)
    malformed = F.col("id").isNull() | F.col("timestamp_ns").isNull() | F.col("body").isNull()
    return envelopes.select("file_uri", *envelope_columns(), malformed.alias("malformed"))


def envelope_columns() -> list[Column]:
    """The message's columns of an envelope read with ENVELOPE_SCHEMA: its timestamp as
    one, its body as the bytes published (base64 decoded where the envelope says so)."""
    body = F.col("body")
    return [
        F.col("topic"),
        F.col("id"),
        F.expr("timestamp_micros(div(timestamp_ns, 1000))").alias("timestamp"),
        F.col("timestamp_ns"),
        F.col("attempts"),
        F.col("channel"),
        F.col("nsqd"),
        F.when(F.col("encoding") == "base64", F.unbase64(body))
        .otherwise(body.cast("binary"))
        .alias("body"),
    ]


def _raw_bodies(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    native, other = _by_reader(files)
    parts = []
    if native:
        text = spark.read.option("lineSep", "\n").text(native)
        parts.append(text.select(_file_uri().alias("file_uri"), _as_binary("value")))
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


def _file_uri() -> Column:
    """A row's file as Spark's readers name it: for a plain path, its URI as Hadoop
    prints it (the form listings give)."""
    return F.col("_metadata.file_path")


def _as_binary(column: str) -> Column:
    """A text line as its bytes: the cast keeps them as read, valid UTF-8 or not."""
    return F.col(column).cast("binary").alias(column)


def _by_reader(files: Sequence[ArchiveFile]) -> tuple[list[str], list[ArchiveFile]]:
    """The URIs of the files Spark's readers take as they are, and the other files."""
    native = [file.uri for file in files if file.report.spark_reads_as_is]
    other = [file for file in files if not file.report.spark_reads_as_is]
    return native, other


def _python_lines(spark: SparkSession, files: Sequence[ArchiveFile]) -> DataFrame:
    """The whole lines of files, read in Python tasks."""
    return _contents(spark, [file.uri for file in files]).mapInArrow(_lines_of, _LINES_SCHEMA)


def _lines_of(batches: Iterable[Any]) -> Iterator[Any]:
    import pyarrow

    for batch in batches:
        for uri, content in zip(
            batch.column("uri").to_pylist(), batch.column("content").to_pylist(), strict=True
        ):
            lines = list(whole_lines(io.BytesIO(content)))
            for start in range(0, len(lines), _LINES_PER_BATCH):
                chunk = lines[start : start + _LINES_PER_BATCH]
                yield pyarrow.RecordBatch.from_pydict(
                    {"file_uri": [uri] * len(chunk), "value": chunk},
                    schema=_LINES_ARROW_SCHEMA,
                )
