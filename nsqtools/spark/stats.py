"""nsq archive stats: what archives hold, per topic and hour (UTC): messages, body bytes,
copies of a message written more than once, first and last timestamp; and the lines of
envelope archives that are no envelope, per file. One pass over the messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from nsqtools.spark.compact import PARTITION_COLUMNS, with_partition_columns


@dataclass(frozen=True)
class HourStats:
    topic: str
    date: str
    hour: int
    messages: int
    bytes: int  # of the bodies
    raw: int  # messages from raw archives, which carry no id
    duplicates: int  # envelope messages that are copies of another
    first: datetime | None
    last: datetime | None


@dataclass(frozen=True)
class ArchiveStats:
    hours: list[HourStats]
    malformed: dict[str, int]  # file → lines that are no envelope


def archive_stats(messages: DataFrame) -> ArchiveStats:
    rows = with_partition_columns(messages)
    envelope = F.col("id").isNotNull() & ~F.col("malformed")
    per_hour = (
        rows.where(~F.col("malformed"))
        .groupBy(*PARTITION_COLUMNS)
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(F.octet_length("body")).alias("bytes"),
            F.count_if(F.col("id").isNull()).alias("raw"),
            F.count_if(envelope).alias("envelopes"),
            F.count_distinct("id", "timestamp_ns").alias("distinct"),
            F.min("timestamp").alias("first"),
            F.max("timestamp").alias("last"),
        )
        .orderBy(*PARTITION_COLUMNS)
    )
    hours = [
        HourStats(
            topic=row["topic"],
            date=row["date"],
            hour=row["hour"],
            messages=row["messages"],
            bytes=row["bytes"] or 0,
            raw=row["raw"],
            duplicates=row["envelopes"] - row["distinct"],
            first=row["first"],
            last=row["last"],
        )
        for row in per_hour.collect()
    ]
    malformed = rows.where("malformed").groupBy("file").count().collect()
    return ArchiveStats(hours, {row["file"]: row["count"] for row in malformed})
