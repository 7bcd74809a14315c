"""Publishing tools as the fault harness drives them: PublishingTarget, what every one
shares (the faults of the nsqd it publishes to, through the tap; a last run once the
faults are over; the topic read back as the output; targets_spark.py's sink and replay
build on it), to_nsq: numbered records fed to its stdin while faults strike, and
`nsq pub TOPIC BODY --count` (ours only): each run makes and publishes bodies of its own.

Each run reads a pipe of its own, fed as the records fall due. When a run ends, what it
took from the pipe is known exactly (the bytes left in it are read back): a run that
stopped on a signal or failed must have published, or kept in its --failed-file, every
record it took whole; a record it took only in part is fed again to the next run, as are
all of a SIGKILLed run's (a killed process keeps nothing: a user runs the job again).
Once the faults are over, the running tool is stopped with SIGTERM and a last run reads
the records left from a file to its end, then exits by itself. The output is the
destination topic, read once everything is done.

`nsq pub --count` takes nothing in: each run publishes run<N>-000001 and on, --count of
them at --rate, and says how far it got. What it claims is what is expected of it: all
of them when it exits 0 by itself; N when a stop signal ends it with `interrupted: N of
M published`; T when it fails with `F of T records were not published` (the F in its
--failed-file). A SIGKILLed run (or one signalled before it took the signals) claims
nothing: its bodies found in the topic are allowed, none is required.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from nsqtools.testing.binaries import find_binary, our_tool
from nsqtools.testing.faults.harness import FINISH_DEADLINE, TOPIC, Harness, Target
from nsqtools.testing.faults.runs import Run
from nsqtools.testing.faults.schedule import Fault, FaultKind
from nsqtools.testing.faults.targets import (
    FEED_BATCH,
    FEED_SHARE,
    MESSAGES,
    NSQD_FAULTS,
    drain,
    numbered,
)

DELIMITER = b"\n"
FEED_WAIT = 0.005  # a full pipe: try again this soon


@dataclass
class _Pipe:
    """One run's stdin: the records from `first` on, written as they fall due."""

    first: int  # index of the first record fed into it
    read_end: int
    write_end: int
    written: int = 0  # whole records written so far
    pending: bytes = b""  # the rest of a record the pipe would not take yet

    def taken_whole(self, record_size: int) -> tuple[int, bool]:
        """How many records the run took whole, and whether it took one in part."""
        left = len(self.pending)
        while True:
            try:
                left += len(os.read(self.read_end, 1 << 16))
            except BlockingIOError:
                break
        taken = (self.written * record_size) - left
        return taken // record_size, taken % record_size != 0

    def close(self) -> None:
        for fd in (self.read_end, self.write_end):
            os.close(fd)


class PublishingTarget(Target):
    """A tool that publishes records to the World's nsqd (through the tap), which the
    publisher faults strike; done once a last run, started when the faults are over,
    has done what was left and ended by itself. The output is nsqd's topic."""

    consumes = False
    kinds = (*NSQD_FAULTS, FaultKind.DESTINATION_DOWN)

    def __init__(self, messages: int = MESSAGES) -> None:
        self.records = numbered(messages, "r")
        self.last = False  # the faults are over: the next run is the last
        self._fed = threading.Event()

    def finish(self, harness: Harness) -> None:
        """Stop the running tool; a last one does what is left and ends by itself."""
        harness.stop_tool()
        self.last = True
        harness.last_run()
        harness.supervise_until(
            lambda: harness.runs.current is None, FINISH_DEADLINE, "the last run to end"
        )

    def break_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DESTINATION_DOWN:
            self.world.nsqd.stop()

    def mend_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DESTINATION_DOWN:
            self.world.nsqd.start()

    def feeding_done(self) -> bool:
        return self._fed.is_set()

    @property
    def published(self) -> set[bytes]:
        return set(self.records)

    def output(self) -> Counter[bytes]:
        return drain(self.world.nsqd, TOPIC)

    # -- ours: --failed-file, one per run ----------------------------------------------

    def _failed_file(self, run: int) -> Path:
        return self.directory / f"failed-{run}.txt"

    def kept(self) -> Counter[bytes]:
        kept: Counter[bytes] = Counter()
        for path in self.directory.glob("failed-*.txt"):
            kept.update(self._failed_records(int(path.stem.split("-")[1])))
        return kept

    def _failed_records(self, run: int) -> list[bytes]:
        path = self._failed_file(run)
        return path.read_bytes().split(DELIMITER)[:-1] if path.exists() else []


class PublishTarget(PublishingTarget):
    name = "to_nsq"
    go_program = "to_nsq"

    def __init__(self, messages: int = MESSAGES, rate: int = 0) -> None:
        super().__init__(messages)
        self.rate = rate  # --rate: records a second (0: as fast as nsqd takes them)
        if rate:
            self.name = f"to_nsq --rate={rate}"
        self.record_size = len(self.records[0]) + len(DELIMITER)
        self.cursor = 0  # the first record no run has taken for good
        self.pipe: _Pipe | None = None  # the running run's
        self._lock = threading.Lock()
        self._started = 0.0

    def argv(self, implementation: str, run: int) -> list[str]:
        common = [f"--nsqd-tcp-address={self.world.address}", f"--topic={TOPIC}"]
        if self.rate:
            common.append(f"--rate={self.rate}")
        if implementation == "go":
            return [str(find_binary("to_nsq")), *common]
        return [*our_tool("to_nsq"), *common, f"--failed-file={self._failed_file(run)}"]

    # -- records in --------------------------------------------------------------------

    def stdin_for(self, run: int) -> int | None:
        with self._lock:
            if self.last:
                rest = self.directory / "rest.txt"
                rest.write_bytes(
                    b"".join(record + DELIMITER for record in self.records[self.cursor :])
                )
                return os.open(rest, os.O_RDONLY)
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.set_blocking(write_end, False)
            self.pipe = _Pipe(self.cursor, read_end, write_end)
            return read_end

    def start_feeding(self, started: float) -> None:
        self._started = started
        threading.Thread(target=self._feed, daemon=True).start()

    def _due(self) -> int:
        """How many records have fallen due by now."""
        share = (time.monotonic() - self._started) / (self.schedule.span * FEED_SHARE)
        batches = int(share * len(self.records) / FEED_BATCH) + 1
        return min(len(self.records), batches * FEED_BATCH)

    def _feed(self) -> None:
        while not self._fed.is_set():
            with self._lock:
                if self.pipe is not None:
                    self._write_due(self.pipe)
                if self.last or (self._due() == len(self.records) and self._all_written()):
                    self._fed.set()
            time.sleep(FEED_WAIT)  # the feed's pace: records fall due over time

    def _all_written(self) -> bool:
        pipe = self.pipe
        return pipe is not None and pipe.first + pipe.written == len(self.records)

    def _write_due(self, pipe: _Pipe) -> None:
        while True:
            if not pipe.pending:
                index = pipe.first + pipe.written
                if index >= self._due():
                    return
                pipe.pending = self.records[index] + DELIMITER
                pipe.written += 1
            try:
                sent = os.write(pipe.write_end, pipe.pending)
            except BlockingIOError:
                return
            pipe.pending = pipe.pending[sent:]

    def feeding_done(self) -> bool:
        return self._fed.is_set()

    def run_ended(self, run: Run) -> None:
        """What the run took: kept by it (published or failed), or fed again."""
        run.kept = len(self._failed_records(run.number))
        with self._lock:
            pipe, self.pipe = self.pipe, None
            if pipe is None:
                return
            whole, _in_part = pipe.taken_whole(self.record_size)
            if not run.killed:
                self.cursor = pipe.first + whole
            pipe.close()


# What a run of `nsq pub --count` says of how far it got (stderr).
INTERRUPTED = re.compile(r"interrupted: ([\d,]+) of [\d,]+ published")
UNPUBLISHED = re.compile(r": error: [\d,]+ of ([\d,]+) records were not published")
RUN_SECONDS = 2.0  # a run of `nsq pub --count` at its --rate: faults strike mid-run


class PubCountTarget(PublishingTarget):
    """`nsq pub TOPIC BODY --count=K --rate=R` (ours only: Go's to_nsq makes no bodies),
    each run publishing run<N>-000001 to run<N>-<K>, in RUN_SECONDS, with a --failed-file
    of its own; started again whenever it ends, by itself or not. What each run claims it
    made (published, or kept in its failed file) is what is expected of it."""

    name = "nsq pub --count"

    def __init__(self, messages: int = MESSAGES) -> None:
        super().__init__(messages)
        self.count = messages // 2  # a run's: its runs together publish a few times more
        self.rate = round(self.count / RUN_SECONDS)
        self.claimed: dict[int, int] = {}  # run → bodies it made (numbered from 1)
        self.unclaimed: list[int] = []  # runs that said nothing: killed
        self.topic_read: Counter[bytes] | None = None  # the output, read once

    def argv(self, implementation: str, run: int) -> list[str]:
        if implementation != "ours":
            raise ValueError("Go's to_nsq makes no bodies: `nsq pub --count` is ours only")
        return [
            *our_tool("nsq"),
            "pub",
            f"--nsqd-tcp-address={self.world.address}",
            f"--count={self.count}",
            f"--rate={self.rate}",
            f"--failed-file={self._failed_file(run)}",
            TOPIC,
            f"run{run}-{{seq:06d}}",
        ]

    def start_feeding(self, started: float) -> None:
        self._fed.set()  # nothing goes in: each run makes its bodies

    def run_ended(self, run: Run) -> None:
        """What the run claims it made: all when it ended by itself with 0, else what
        its last words say; a killed run claims nothing."""
        run.kept = len(self._failed_records(run.number))
        interrupted = INTERRUPTED.search(run.stderr)
        unpublished = UNPUBLISHED.search(run.stderr)
        if unpublished is not None:
            self.claimed[run.number] = int(unpublished[1].replace(",", ""))
        elif interrupted is not None:
            self.claimed[run.number] = int(interrupted[1].replace(",", ""))
        elif run.killed or run.before_handler or run.overdue:
            self.unclaimed.append(run.number)
        else:  # exit 0 by itself, or a failure that did not say how far it got: all
            self.claimed[run.number] = self.count

    def _bodies(self, run: int, made: int) -> set[bytes]:
        return {b"run%d-%06d" % (run, seq) for seq in range(1, made + 1)}

    @property
    def published(self) -> set[bytes]:
        """Every body a run claims it made, and those of unclaimed runs found in the
        topic (allowed, not required)."""
        claimed = set[bytes]().union(*(self._bodies(*made) for made in self.claimed.items()))
        allowed = set[bytes]().union(*(self._bodies(run, self.count) for run in self.unclaimed))
        return claimed | (allowed & self.output().keys())

    def output(self) -> Counter[bytes]:
        if self.topic_read is None:
            self.topic_read = super().output()
        return self.topic_read
