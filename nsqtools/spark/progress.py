"""What Spark is doing while a job runs, for a progress display: the tasks of the
stages under way, polled from Spark's status tracker in a thread of our own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pyspark.sql import SparkSession

POLL_SECONDS = 0.25


@dataclass(frozen=True)
class StageProgress:
    stage_id: int
    name: str
    tasks_done: int
    tasks: int


@contextlib.contextmanager
def watched(spark: SparkSession, report: Callable[[list[StageProgress]], None]) -> Iterator[None]:
    """Call report with the active stages every POLL_SECONDS until the block ends."""
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            stages = []
            for stage_id in sorted(tracker.getActiveStageIds()):
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done = info.numCompletedTasks
                    stages.append(StageProgress(stage_id, info.name, done, info.numTasks))
            report(stages)

    thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
