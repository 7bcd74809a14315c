"""The Spark parts as the fault harness drives them: format("nsq")'s source and sink,
each in a user's streaming application (spark_driver.py, a process with its own local[2]
Spark and a checkpoint that carries the query over restarts), and `nsq archive replay`.

The source reads the World's topic like any consuming tool; its output is what the
application's foreachBatch appended to a file. The sink's input is text files dropped
into a folder as the records fall due; its output, and replay's, is the World's topic,
read once everything is done. The application is the harness's, not a tool of ours: its
exit statuses are not judged (a signal to its process group ends Spark's JVM under it),
only what became of every message.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from nsqtools.testing.binaries import PACKAGE_ROOT, our_tool
from nsqtools.testing.faults.harness import CHANNEL, TOPIC, World
from nsqtools.testing.faults.schedule import Schedule
from nsqtools.testing.faults.targets import (
    FEED_BATCH,
    FEED_SHARE,
    NSQD_FAULTS,
    ConsumingTarget,
)
from nsqtools.testing.faults.targets_pub import PublishingTarget

REPLAY_RATE = 60  # messages a second: a replay lasts a few seconds, under faults


def driver(*args: str) -> list[str]:
    """The command line of the harness's streaming application."""
    code = (
        f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r}); "
        "from nsqtools.testing.faults.spark_driver import main; main()"
    )
    return [sys.executable, "-c", code, *args]


class StreamSourceTarget(ConsumingTarget):
    name = 'format("nsq") source'
    kinds = NSQD_FAULTS
    dead_letters = False
    exits_judged = False

    def argv(self, implementation: str, run: int) -> list[str]:
        checkpoint = self.directory / "checkpoint"
        return driver("source", self.world.address, TOPIC, CHANNEL, str(checkpoint), str(self.out))

    @property
    def out(self) -> Path:
        return self.directory / "batches.txt"

    def output(self) -> Counter[bytes]:
        return Counter(self.out.read_bytes().splitlines() if self.out.exists() else [])


class StreamSinkTarget(PublishingTarget):
    name = 'format("nsq") sink'
    exits_judged = False

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        super().prepare(world, directory, schedule)
        self.input.mkdir()

    @property
    def input(self) -> Path:
        return self.directory / "input"

    def argv(self, implementation: str, run: int) -> list[str]:
        checkpoint = str(self.directory / "checkpoint")
        last = ["--available-now"] if self.last else []
        return driver("sink", str(self.input), self.world.address, TOPIC, checkpoint, *last)

    def start_feeding(self, started: float) -> None:
        threading.Thread(target=self._feed, args=(started,), daemon=True).start()

    def _feed(self, started: float) -> None:
        """A file of FEED_BATCH records at a time, each complete before Spark sees it."""
        files = range(0, len(self.records), FEED_BATCH)
        spacing = self.schedule.span * FEED_SHARE / len(files)
        for number, start in enumerate(files):
            time.sleep(max(0.0, started + number * spacing - time.monotonic()))  # pacing
            draft = self.directory / f"draft-{number:05d}"
            draft.write_bytes(b"".join(r + b"\n" for r in self.records[start : start + FEED_BATCH]))
            os.rename(draft, self.input / f"part-{number:05d}.txt")
        self._fed.set()


class ReplayTarget(PublishingTarget):
    """`nsq archive replay` of one archive holding every record, at REPLAY_RATE, run again
    each time a run ends (a job run again and again: duplicates, nothing lost)."""

    name = "nsq archive replay"

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        super().prepare(world, directory, schedule)
        archive = directory / "archive"
        archive.mkdir()
        lines = b"".join(record + b"\n" for record in self.records)
        (archive / f"{TOPIC}.host-000000.2026-11-26_10.log").write_bytes(lines)

    def argv(self, implementation: str, run: int) -> list[str]:
        return [
            *our_tool("nsq"),
            "archive",
            "replay",
            str(self.directory / "archive"),
            f"--topic={TOPIC}",
            f"--nsqd-tcp-address={self.world.address}",
            f"--rate={REPLAY_RATE}",
        ]

    def start_feeding(self, started: float) -> None:
        self._fed.set()  # the archive is there from the start
