"""What Spark is doing while a job runs, for a progress display: the tasks of the
stages under way, polled from a classic session's status tracker in a thread of our
own, or as a Spark Connect server reports them to its client's progress handlers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from nsqtools.spark.session import is_connect

POLL_SECONDS = 0.25

Report = Callable[[list["StageProgress"]], None]


@dataclass(frozen=True)
class StageProgress:
    stage_id: int
    tasks_done: int
    tasks: int


def watched(spark: SparkSession, report: Report) -> AbstractContextManager[None]:
    """Call report with the active stages as they change until the block ends."""
    return _reported_by_server(spark, report) if is_connect(spark) else _polled(spark, report)


@contextlib.contextmanager
def _polled(spark: SparkSession, report: Report) -> Iterator[None]:
    """The status tracker's active stages, every POLL_SECONDS."""
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            stages = []
            for stage_id in sorted(tracker.getActiveStageIds()):
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    stages.append(StageProgress(stage_id, info.numCompletedTasks, info.numTasks))
            report(stages)

    thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def _reported_by_server(spark: SparkSession, report: Report) -> Iterator[None]:
    """A Connect server's progress reports (its spark.connect.progress.reportInterval
    apart), as its client hands them over while a call runs."""

    def handler(stages: Iterable[Any] | None, done: bool, **_details: Any) -> None:
        running = [] if done else [stage for stage in stages or () if not stage.done]
        report([StageProgress(s.stage_id, s.num_completed_tasks, s.num_tasks) for s in running])

    # The client calls its handlers with keywords: any callable taking them will do.
    spark.registerProgressHandler(handler)  # type: ignore[arg-type]
    try:
        yield
    finally:
        spark.removeProgressHandler(handler)  # type: ignore[arg-type]
