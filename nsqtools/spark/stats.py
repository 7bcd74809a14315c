"""nsq archive stats: what archives hold, per topic and hour (UTC): messages, body bytes,
copies of a message written more than once, first and last timestamp; and the lines of
envelope archives that are no envelope, per file. One pass over the messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    """One aggregation, so one scan: the messages grouped by hour, and the lines that are
    no envelope by file (their own groups, set apart here). The groups are few, so they
    are sorted here, not by a sort in Spark (a job more)."""
    rows = with_partition_columns(messages)
    envelope = F.col("id").isNotNull() & ~F.col("malformed")
    groups = (
        rows.groupBy(*PARTITION_COLUMNS, F.when(F.col("malformed"), F.col("file")).alias("bad"))
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(F.octet_length("body")).alias("bytes"),
            F.count_if(F.col("id").isNull()).alias("raw"),
            F.count_if(envelope).alias("envelopes"),
            F.count_distinct("id", "timestamp_ns").alias("distinct"),
            F.min("timestamp").alias("first"),
            F.max("timestamp").alias("last"),
        )
        .collect()
    )
    malformed: dict[str, int] = {}
    hours = []
    for row in groups:
        if row["bad"] is not None:
            malformed[row["bad"]] = malformed.get(row["bad"], 0) + row["messages"]
            continue
        hours.append(
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
        )
    hours.sort(key=_hour_order)
    return ArchiveStats(hours, malformed)


def _hour_order(hour: HourStats) -> tuple[tuple[bool, Any], ...]:
    """Spark's ascending order: by topic, date and hour, a missing value first."""
    keys = (hour.topic, hour.date, hour.hour)
    return tuple((key is not None, key) for key in keys)
