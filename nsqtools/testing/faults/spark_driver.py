"""A user's Structured Streaming application, as the fault harness runs it: a process of
its own (a Spark driver on local[2]) around one query that uses format("nsq").

    source ADDRESS TOPIC CHANNEL CHECKPOINT OUTPUT
        nsq → foreachBatch: each micro-batch's bodies appended to OUTPUT, one a line,
        synced before the batch ends (so before Spark commits it, and the source FINs).
    sink INPUT ADDRESS TOPIC CHECKPOINT [--available-now]
        text files dropped in INPUT → nsq; with --available-now, what is there and then
        an end (the harness's last run).

A first SIGINT/SIGTERM stops the query and the session, then exits 0; a failed query
exits 1 with one line. (Spark's own processes share the process group: a signal sent to
the group, as `timeout` does, reaches the JVM and its Python workers too.) The query's
checkpoint carries it over restarts.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

MAX_MESSAGES_PER_TRIGGER = "200"
POLL = 0.2  # seconds between looks at the query and the stop flag
_stopping = False


def _stop(signum: int, frame: FrameType | None) -> None:
    global _stopping
    _stopping = True


def main() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop)
    from nsqtools.spark import register
    from nsqtools.spark.session import SparkSettings, start

    log = Path(tempfile.gettempdir(), f"nsqtools-faults-spark-{os.getpid()}.log")
    spark, _ = start(SparkSettings(master="local[2]"), log)
    register(spark)
    mode, *args = sys.argv[1:]
    query = _source(spark, *args) if mode == "source" else _sink(spark, *args)
    code = _wait(query)
    spark.stop()
    os._exit(code)  # py4j's threads would hold a normal exit up


def _source(spark: Any, address: str, topic: str, channel: str, checkpoint: str, out: str) -> Any:
    def append(batch: Any, batch_id: int) -> None:
        bodies = [bytes(row.body) for row in batch.select("body").collect()]
        with open(out, "ab") as file:
            file.write(b"".join(body + b"\n" for body in bodies))
            file.flush()
            os.fsync(file.fileno())

    stream = (
        spark.readStream.format("nsq")
        .option("nsqd_tcp_addresses", address)
        .option("topic", topic)
        .option("channel", channel)
        .option("maxMessagesPerTrigger", MAX_MESSAGES_PER_TRIGGER)
        .load()
    )
    return stream.writeStream.foreachBatch(append).option("checkpointLocation", checkpoint).start()


def _sink(spark: Any, source: str, address: str, topic: str, checkpoint: str, *rest: str) -> Any:
    stream = spark.readStream.format("text").load(source).selectExpr("value AS body")
    writer = (
        stream.writeStream.format("nsq")
        .option("nsqd_tcp_addresses", address)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
    )
    if "--available-now" in rest:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="500 milliseconds")
    return writer.start()


def _wait(query: Any) -> int:
    """Until the query ends (0, or 1 if it failed) or a stop signal came (0)."""
    try:
        while query.isActive and not _stopping:
            query.awaitTermination(POLL)
        query.stop()
        failure = query.exception()
    except Exception as error:  # the JVM went away under us (a signal to the group)
        failure = error
    if failure is not None and not _stopping:
        first = str(failure).strip().splitlines()[:1] or [type(failure).__name__]
        sys.stderr.write(f"spark_driver: error: {first[0][:300]}\n")
        return 1
    return 0


if __name__ == "__main__":
    main()
