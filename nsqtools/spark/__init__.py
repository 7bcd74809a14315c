"""The PySpark jobs over nsq_to_file's archives (nsq archive): the only package that
imports pyspark, an optional extra (pip install 'nsqtools[spark]').

- session.py: the SparkSession (master, --conf, Spark's own logs kept quiet);
- messages.py: archives as one DataFrame of messages, whatever their format and damage;
- compact.py, stats.py, query.py, replay.py: the jobs;
- commit.py: compacted partitions made visible whole, or not at all;
- progress.py: what Spark is doing, for a progress display;
- streaming.py: format("nsq"), live topics in Structured Streaming (register() it).
- sink.py: format("nsq")'s sink, what a streaming query writes published.

The transforms are kept apart from the session set-up, so the tests share one session.
"""

from typing import Any


def register(spark: Any) -> None:
    """Make format("nsq") known to this SparkSession: readStream and writeStream.

    Also makes it the active session of the calling thread's JVM side: Spark looks a
    Python data source up in that session when a stream writer starts, and a JVM thread
    that py4j made afresh for this thread (after its connection was idle) has none."""
    from nsqtools.spark.streaming import NsqDataSource

    spark.dataSource.register(NsqDataSource)
    jvm = getattr(spark, "_jvm", None)  # a Spark Connect session has none, nor the quirk
    if jvm is not None:
        jvm.SparkSession.setActiveSession(spark._jsparkSession)
