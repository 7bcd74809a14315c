"""nsq archive sql: archives, or Parquet that compact wrote, as the table `messages`.

Columns: those of compact's output (topic, host, id, timestamp, timestamp_ns, attempts,
channel, nsqd, body, file, date, hour), `body_text` (the body as text, NULL when it is
not UTF-8), and, when a query names it, `data`: the body parsed as JSON, with the given
schema (Spark's DDL, "user INT, event STRING") or one inferred from a sample of bodies
(NULL for a body that is not JSON, or does not fit).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from nsqtools.spark.compact import COMPACTED_SCHEMA, read_compacted, with_partition_columns
from nsqtools.spark.messages import MESSAGE_COLUMNS, ArchiveFile, read_messages

TABLE = "messages"
_NAMES_DATA = re.compile(r"\bdata\b", re.IGNORECASE)


def source_messages(
    spark: SparkSession, archives: Sequence[ArchiveFile], compacted: Sequence[str]
) -> DataFrame:
    """Archives' messages (read_messages' columns, `malformed` included) and the rows of
    compacted directories (none malformed) together."""
    parts = [
        read_compacted(spark, directory)
        .select(*MESSAGE_COLUMNS)
        .withColumn("malformed", F.lit(False))
        for directory in compacted
    ]
    if archives or not parts:
        parts.append(read_messages(spark, archives))
    return functools.reduce(DataFrame.unionByName, parts)


def messages_table(
    spark: SparkSession, archives: Sequence[ArchiveFile], compacted: Sequence[str]
) -> DataFrame:
    """Archives and compacted directories as one table of compact's columns."""
    messages = source_messages(spark, archives, compacted)
    valid = with_partition_columns(messages.where(~F.col("malformed")).drop("malformed"))
    return valid.select(*COMPACTED_SCHEMA.fieldNames())


def register(
    spark: SparkSession,
    table: DataFrame,
    query: str,
    body_schema: str | None,
    sample_size: int,
) -> None:
    """Make `table`, with body_text and (when the query names it) data, the view TABLE."""
    text = F.try_validate_utf8(F.col("body").cast("string"))
    table = table.withColumn("body_text", text)
    if body_schema is not None or _NAMES_DATA.search(query):
        schema = body_schema or _inferred_schema(spark, table, sample_size)
        table = table.withColumn("data", F.from_json("body_text", schema))
    table.createOrReplaceTempView(TABLE)


def _inferred_schema(spark: SparkSession, table: DataFrame, sample_size: int) -> T.StructType:
    """The JSON schema of a sample of the bodies that are JSON objects, inferred by
    Spark's JSON reader over them as a DataFrame (no SparkContext: Connect has none)."""
    objects = table.where(F.col("body_text").startswith("{")).select("body_text")
    return spark.read.option("mode", "DROPMALFORMED").json(objects.limit(sample_size)).schema
