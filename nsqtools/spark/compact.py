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

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F

from nsqtools.spark import commit

PARTITION_COLUMNS = ("topic", "date", "hour")
# The message's key, and the partition it is in (a function of its timestamp): the rows
# are distributed by partition already, so the grouping needs no shuffle of its own.
_KEY = (*PARTITION_COLUMNS, "id", "timestamp_ns")


@dataclass(frozen=True)
class Compacted:
    rows_read: int  # whole lines, malformed ones included
    malformed: int  # lines of envelope archives that are no envelope: left out
    duplicates: int  # envelope rows left out as copies of another
    rows_written: int
    partitions: dict[str, int]  # partition path (topic=…/date=…/hour=…) → rows


def compact(spark: SparkSession, messages: DataFrame, out: Path) -> Compacted:
    """Write messages (nsqtools.spark.messages) under out, replacing the partitions they
    fall in; a partition becomes visible whole or not at all."""
    read, kept = Observation("read"), Observation("kept")
    observed = messages.observe(
        read,
        F.count(F.lit(1)).alias("rows"),
        F.count_if("malformed").alias("malformed"),
        F.count_if(~F.col("malformed") & F.col("id").isNotNull()).alias("envelopes"),
    )
    rows = _partitioned(observed.where(~F.col("malformed")).drop("malformed"))
    unique = _deduplicated(rows).observe(
        kept,
        F.count(F.lit(1)).alias("rows"),
        F.count_if(F.col("id").isNotNull()).alias("envelopes"),
    )
    with commit.staging_directory(out) as staging:
        unique.write.partitionBy(*PARTITION_COLUMNS).parquet(staging.as_uri())
        partitions = _rows_by_partition(spark, staging)
        commit.publish(staging, out)
    counts_read, counts_kept = read.get, kept.get
    return Compacted(
        rows_read=counts_read["rows"],
        malformed=counts_read["malformed"],
        duplicates=counts_read["envelopes"] - counts_kept["envelopes"],
        rows_written=counts_kept["rows"],
        partitions=partitions,
    )


def _partitioned(rows: DataFrame) -> DataFrame:
    with_partition = rows.withColumns(
        {
            "date": F.date_format("timestamp", "yyyy-MM-dd"),
            "hour": F.hour("timestamp"),
        }
    )
    return with_partition.repartition(*PARTITION_COLUMNS)


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
    if not any(written.glob("*=*")):
        return {}
    counts = spark.read.parquet(written.as_uri()).groupBy(*PARTITION_COLUMNS).count()
    return {
        "/".join(f"{name}={row[name]}" for name in PARTITION_COLUMNS): row["count"]
        for row in counts.collect()
    }
