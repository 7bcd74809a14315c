"""nsq archive compact: archives → Parquet partitioned by topic, date and hour (UTC).

Envelope rows are deduplicated by (topic, id, timestamp_ns): nsq_to_file is
at-least-once, so a requeue or a crash writes some messages twice, with the same id and
timestamp. Of copies, the one with the fewest attempts stays (then the first file by
name): the same input always gives the same rows. Raw rows have no id and all stay.

One shuffle and one sort do it all: rows are distributed by partition (topic, date,
hour), which the deduplication's key includes, sorted by that key within each task, and
each output partition is then written by one task. The counts come from Spark's
observed metrics, gathered while the job runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from nsqtools.spark import commit
from nsqtools.spark.messages import local_uri, message_schema

PARTITION_COLUMNS = ("topic", "date", "hour")
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


@dataclass(frozen=True)
class Compacted:
    rows_read: int  # whole lines, malformed ones included
    malformed: int  # lines of envelope archives that are no envelope: left out
    duplicates: int  # envelope rows left out as copies of another
    rows_written: int
    partitions: dict[str, int]  # partition path (topic=…/date=…/hour=…) → rows


def compact(
    spark: SparkSession, messages: DataFrame, out: Path, sources: Sequence[str]
) -> Compacted:
    """Write messages (nsqtools.spark.messages, read from the files `sources`) under out;
    a partition becomes visible whole or not at all.

    Where a partition exists in out already, its rows from other files stay (copies of
    a message across both deduplicated as any): compacting an hour's archives in two
    runs gives what one run would. Rows from the files compacted again are replaced.
    """
    read, kept = Observation("read"), Observation("kept")
    observed = messages.observe(
        read,
        F.count(F.lit(1)).alias("rows"),
        F.count_if("malformed").alias("malformed"),
        F.count_if(~F.col("malformed") & F.col("id").isNotNull()).alias("envelopes"),
    )
    rows = _partitioned(observed.where(~F.col("malformed")).drop("malformed"))
    unique = _deduplicated(rows).observe(kept, _envelope_count())
    with commit.staging_directory(out) as staging:
        new, merged = staging / "new", staging / "merged"
        unique.write.partitionBy(*PARTITION_COLUMNS).parquet(local_uri(new, to_read=False))
        both = [name for name in commit.partitions(new) if (out / name).is_dir()]
        merged_copies = _merge(spark, new, out, both, sources, merged) if both else 0
        partitions = _rows_by_partition(spark, new) | _rows_by_partition(spark, merged)
        commit.publish(merged, out)
        commit.publish(new, out)
    counts_read, counts_kept = read.get, kept.get
    return Compacted(
        rows_read=counts_read["rows"],
        malformed=counts_read["malformed"],
        duplicates=counts_read["envelopes"] - counts_kept["envelopes"] + merged_copies,
        rows_written=sum(partitions.values()),
        partitions=partitions,
    )


def read_compacted(
    spark: SparkSession, directory: Path, partitions: Sequence[str] = ()
) -> DataFrame:
    """Compacted Parquet under directory (only the partitions named, if any), with the
    types compact wrote: partition values are not guessed (a topic "42" stays text)."""
    reader = spark.read.schema(COMPACTED_SCHEMA)
    reader = reader.option("basePath", local_uri(directory, to_read=True))
    chosen = [directory / name for name in partitions] or [directory]
    paths = [local_uri(path, to_read=True) for path in chosen]
    return reader.parquet(*paths)


def _merge(
    spark: SparkSession,
    new: Path,
    out: Path,
    both: list[str],
    sources: Sequence[str],
    merged: Path,
) -> int:
    """Write under merged the partitions named `both`: the new rows with out's rows
    from other files; the copies left out."""
    compacted_again = spark.createDataFrame([(source,) for source in sources], "file string")
    kept_rows = read_compacted(spark, out, both).join(
        F.broadcast(compacted_again), "file", "left_anti"
    )
    fresh = read_compacted(spark, new, both)
    union = kept_rows.unionByName(fresh).select(*fresh.columns).repartition(*PARTITION_COLUMNS)
    before, after = Observation("before"), Observation("after")
    unique = _deduplicated(union.observe(before, _envelope_count()))
    unique.observe(after, _envelope_count()).write.partitionBy(*PARTITION_COLUMNS).parquet(
        local_uri(merged, to_read=False)
    )
    for name in both:
        shutil.rmtree(new / name)  # merged holds them now
    copies: int = before.get["envelopes"] - after.get["envelopes"]
    return copies


def _envelope_count() -> Column:
    return F.count_if(F.col("id").isNotNull()).alias("envelopes")


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


def _deduplicated(rows: DataFrame) -> DataFrame:
    """Envelope rows once per key (the fewest attempts, then the first file); raw rows
    as they are (each its own group, by a key of its own).

    A window, not an aggregation: its sort (partition columns first) is the one the
    partitioned write needs anyway, and rows stream through it instead of filling a hash
    table with whole messages.
    """
    own_key = F.when(F.col("id").isNull(), F.monotonically_increasing_id())
    copies = Window.partitionBy(*_KEY, own_key).orderBy("attempts", "file")
    ranked = rows.withColumn("copy", F.row_number().over(copies))
    return ranked.where(F.col("copy") == 1).drop("copy")


def _rows_by_partition(spark: SparkSession, written: Path) -> dict[str, int]:
    """Rows per partition directory, from the Parquet footers just written."""
    if not commit.partitions(written):
        return {}
    counts = read_compacted(spark, written).groupBy(*PARTITION_COLUMNS).count()
    return {
        "/".join(f"{name}={row[name]}" for name in PARTITION_COLUMNS): row["count"]
        for row in counts.collect()
    }
