"""The PySpark jobs over nsq_to_file's archives (nsq archive): the only package that
imports pyspark, an optional extra (pip install 'nsqtools[spark]').

- session.py: the SparkSession (master, --conf, Spark's own logs kept quiet);
- messages.py: archives as one DataFrame of messages, whatever their format and damage;
- compact.py, stats.py, query.py, replay.py: the jobs;
- commit.py: compacted partitions made visible whole, or not at all;
- progress.py: what Spark is doing, for a progress display;
- streaming.py: format("nsq"), live topics in Structured Streaming (register() it);
- readers.py, coordination.py: its source's readers in the executors, and how they
  learn of Spark's commits;
- sink.py: format("nsq")'s sink, what a streaming query writes published.

The transforms are kept apart from the session set-up, so the tests share one session.
"""

from typing import Any

# A Spark Connect session's parallelism when its settings do not give it.
_CONNECT_PARALLELISM = 2


def register(spark: Any) -> None:
    """Make format("nsq") known to this SparkSession: readStream and writeStream, its
    source reading with as many tasks per batch as the session's parallelism.

    Also makes it the active session of the calling thread's JVM side: Spark looks a
    Python data source up in that session when a stream writer starts, and a JVM thread
    that py4j made afresh for this thread (after its connection was idle) has none."""
    from nsqtools.spark.streaming import NsqDataSource

    # A class made here is pickled whole, its default with it, for the driver's reader.
    source = type("NsqDataSource", (NsqDataSource,), {"default_readers": _parallelism(spark)})
    spark.dataSource.register(source)
    jvm = getattr(spark, "_jvm", None)  # a Spark Connect session has none, nor the quirk
    if jvm is not None:
        jvm.SparkSession.setActiveSession(spark._jsparkSession)


def _parallelism(spark: Any) -> int:
    """How many tasks the session runs at once: its default parallelism (a Connect
    client has no SparkContext to ask: its spark.default.parallelism, if set)."""
    if getattr(spark, "_jvm", None) is not None:
        return int(spark.sparkContext.defaultParallelism)
    return int(spark.conf.get("spark.default.parallelism", str(_CONNECT_PARALLELISM)))
