"""nsq archive compact: archives → Parquet partitioned by topic, date and hour (UTC).

Envelope rows are deduplicated by (topic, id, timestamp_ns): nsq_to_file is
at-least-once, so a requeue or a crash writes some messages twice, with the same id and
timestamp. Of copies, the one with the fewest attempts stays (then the first file by
name): the same input always gives the same rows. Raw rows have no id and all stay.

One shuffle and one sort do it all: rows are distributed by partition (topic, date,
hour), which the deduplication's key includes, sorted by that key within each task, and
each output partition is then written by one task. Through the shuffle and the sort a
row carries its file's rank (an int), not the file's name and host: they join the rows
just before the write. The counts come from Spark's observed metrics, gathered while
the job runs.

Before anything is published, the rows each write left where the driver can read them
(the Parquet footers, read here) are checked against the rows its tasks wrote (the
observed count): an executor whose files land where the driver does not look (an --out
that is not shared storage) would otherwise make a partial output look complete. Any
difference is RowsMissing, and nothing is published.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, DataFrameWriter, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from nsqtools.errors import NsqError
from nsqtools.spark import commit
from nsqtools.spark.messages import (
    ArchiveFile,
    message_schema,
    read_indexed_messages,
    with_file_columns,
)
from nsqtools.spark.storage import Storage, joined, shown, to_read

PARTITION_COLUMNS = ("topic", "date", "hour")
_COMMITTER_VERSION = "mapreduce.fileoutputcommitter.algorithm.version"
_SUCCESS_MARKER = "mapreduce.fileoutputcommitter.marksuccessfuljobs"
# Columns of values (nearly) all distinct: a dictionary per column is built for nothing,
# each value hashed, until Parquet gives up on it (measured with the timestamps as
# INT64, session.py: the write stage of 2M envelopes 19.8 -> 15.9 s on 2 cores).
_NO_DICTIONARY = ("id", "timestamp", "timestamp_ns", "body")
# The message's key, and the partition it is in (a function of its timestamp): the rows
# are distributed by partition already, so the grouping needs no shuffle of its own.
_KEY = (*PARTITION_COLUMNS, "id", "timestamp_ns")
COMPACTED_SCHEMA = T.StructType(
    [
        *message_schema(with_malformed=False).fields,
        T.StructField("date", T.StringType()),
        T.StructField("hour", T.IntegerType()),
    ]
)


class RowsMissing(NsqError):
    """The rows a write left in the output are not those its tasks wrote."""


@dataclass(frozen=True)
class Compacted:
    rows_read: int  # whole lines, malformed ones included
    malformed: int  # lines of envelope archives that are no envelope: left out
    duplicates: int  # envelope rows left out as copies of another
    rows_written: int
    partitions: dict[str, int]  # partition path (topic=…/date=…/hour=…) → rows


def compact(
    spark: SparkSession, store: Storage, files: Sequence[ArchiveFile], out: str
) -> Compacted:
    """Write the files' messages (nsqtools.spark.messages) under out (a URI,
    nsqtools.spark.storage); each partition is published whole (commit.py).

    Where a partition exists in out already, its rows from other files stay (copies of
    a message across both deduplicated as any): compacting an hour's archives in two
    runs gives what one run would. Rows from the files compacted again are replaced.
    """
    read, kept = Observation("read"), Observation("kept")
    # Host and file (the same for all of a file's rows) join the rows after the shuffle
    # and the sort, a file's rank standing for them until then (measured on 2M
    # envelopes, 2 cores: the write stage 17.6 -> 14.8 s, the job 35.4 -> 31.5 s).
    observed = read_indexed_messages(spark, files).observe(
        read,
        F.count(F.lit(1)).alias("rows"),
        F.count_if("malformed").alias("malformed"),
        F.count_if(~F.col("malformed") & F.col("id").isNotNull()).alias("envelopes"),
    )
    rows = _partitioned(observed.where(~F.col("malformed")).drop("malformed"))
    unique = with_file_columns(spark, files, _deduplicated(rows, "file_index"))
    unique = unique.observe(kept, *_counts())
    with commit.staging_directory(store, out) as staging:
        new, merged = joined(staging, "new"), joined(staging, "merged")
        _staged(unique).parquet(new)
        partitions = _checked_rows(store, new, kept.get["rows"], out)
        both = [name for name in partitions if store.is_directory(joined(out, name))]
        merged_copies = 0
        if both:  # merged holds them now, with their new counts
            sources = [file.report.path for file in files]
            merged_partitions, merged_copies = _merge(
                spark, store, (new, out, merged), both, sources
            )
            partitions |= merged_partitions
        commit.publish(store, staging, out, ["new", "merged"])
    counts_read, counts_kept = read.get, kept.get
    return Compacted(
        rows_read=counts_read["rows"],
        malformed=counts_read["malformed"],
        duplicates=counts_read["envelopes"] - counts_kept["envelopes"] + merged_copies,
        rows_written=sum(partitions.values()),
        partitions=partitions,
    )


def read_compacted(
    spark: SparkSession, directory: str, partitions: Sequence[str] = ()
) -> DataFrame:
    """Compacted Parquet under directory (a URI; only the partitions named, if any), with
    the types compact wrote: partition values are not guessed (a topic "42" stays text)."""
    reader = spark.read.schema(COMPACTED_SCHEMA).option("basePath", to_read(directory))
    chosen = [joined(directory, name) for name in partitions] or [directory]
    return reader.parquet(*(to_read(path) for path in chosen))


def _merge(
    spark: SparkSession,
    store: Storage,
    directories: tuple[str, str, str],
    both: list[str],
    sources: Sequence[str],
) -> tuple[dict[str, int], int]:
    """Write under merged the partitions named `both`: the new rows (under new) with
    out's rows from other files; the rows in each, and the copies left out."""
    new, out, merged = directories
    compacted_again = spark.createDataFrame([(source,) for source in sources], "file string")
    kept_rows = read_compacted(spark, out, both).join(
        F.broadcast(compacted_again), "file", "left_anti"
    )
    fresh = read_compacted(spark, new, both)
    union = kept_rows.unionByName(fresh).select(*fresh.columns).repartition(*PARTITION_COLUMNS)
    before, after = Observation("before"), Observation("after")
    unique = _deduplicated(union.observe(before, *_counts()), "file")
    _staged(unique.observe(after, *_counts())).parquet(merged)
    partitions = _checked_rows(store, merged, after.get["rows"], out)
    for name in both:
        store.delete(joined(new, name))  # merged holds them now
    copies: int = before.get["envelopes"] - after.get["envelopes"]
    return partitions, copies


def _staged(rows: DataFrame) -> DataFrameWriter:
    """A partitioned Parquet write into staging. Each task's files go straight where
    the job writes (Hadoop's output committer v2): publishing is commit.py's, and a
    second rename per file (v1's job commit) is one more copy per object on S3."""
    writer = rows.write.option(_COMMITTER_VERSION, "2").option(_SUCCESS_MARKER, "false")
    writer = writer.options(
        **{f"parquet.enable.dictionary#{name}": "false" for name in _NO_DICTIONARY}
    )
    return writer.partitionBy(*PARTITION_COLUMNS)


def _counts() -> tuple[Column, Column]:
    """Rows, and envelope rows (raw ones have no id), as observed metrics."""
    return F.count(F.lit(1)).alias("rows"), F.count_if(F.col("id").isNotNull()).alias("envelopes")


def with_partition_columns(rows: DataFrame) -> DataFrame:
    """date (yyyy-MM-dd) and hour of each row's timestamp, in UTC (the session's zone)."""
    return rows.withColumns(
        {
            "date": F.date_format("timestamp", "yyyy-MM-dd"),
            "hour": F.hour("timestamp"),
        }
    )


def _partitioned(rows: DataFrame) -> DataFrame:
    return with_partition_columns(rows).repartition(*PARTITION_COLUMNS)


def _deduplicated(rows: DataFrame, file_order: str) -> DataFrame:
    """Envelope rows once per key (the fewest attempts, then the first file, by the
    column `file_order`: the file's name, or its rank by name); raw rows as they are
    (each its own group, by a key of its own).

    A window, not an aggregation: its sort (partition columns first) is the one the
    partitioned write needs anyway, and rows stream through it instead of filling a hash
    table with whole messages.
    """
    own_key = F.when(F.col("id").isNull(), F.monotonically_increasing_id())
    copies = Window.partitionBy(*_KEY, own_key).orderBy("attempts", file_order)
    ranked = rows.withColumn("copy", F.row_number().over(copies))
    return ranked.where(F.col("copy") == 1).drop("copy")


def _checked_rows(store: Storage, written: str, meant: int, out: str) -> dict[str, int]:
    """Rows per partition directory under `written`, from the Parquet footers the driver
    can read; RowsMissing unless they add up to `meant`, the rows the tasks wrote."""
    partitions = {
        partition: sum(
            store.parquet_rows(joined(joined(written, partition), name)) for name in files
        )
        for partition, files in commit.partitions(store, written).items()
    }
    found = sum(partitions.values())
    if found != meant:
        raise RowsMissing(
            f"{shown(out)}: Spark's tasks wrote {meant} rows, {found} are in the output: "
            "nothing published (--out must be storage the driver and every executor share)"
        )
    return partitions
