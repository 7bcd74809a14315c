"""The fault harness: one tool, ours or Go's, run under a schedule of faults while
numbered messages go in; then everything is counted and held to one invariant (tally.py).

A World is the NSQ a run uses: a durable nsqd (every message on disk as it comes, data in
memory-backed /dev/shm so that fsync is cheap) behind a tap (tap.py) through which the tool
talks to it. A Target (targets.py) is what differs from tool to tool: its command line,
where its output lands and how it is read back, the faults only it has (a destination, a
disk), and how the messages go in (published to the World's nsqd, or fed to the tool's
stdin). The Harness drives the schedule from the test's own thread (nsqd and the tool
die with the thread that started them): it strikes and mends each fault on time, starts
the tool again whenever a run ends (at once, or after the fault's duration for a kill or
a stop), and once the schedule is over lets the tool finish its work with no fault, stops
it with one SIGTERM and counts.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from nsqtools.testing.cluster import Nsqd
from nsqtools.testing.faults.runs import Run, ToolRuns
from nsqtools.testing.faults.schedule import Fault, FaultKind, Schedule
from nsqtools.testing.faults.tally import Tally
from nsqtools.testing.faults.tap import NsqTap

TOPIC = "faults"
CHANNEL = "harness"
# Every message written to disk as it comes: a SIGKILLed nsqd then loses only what it
# held in memory (in flight, deferred), which the tap tells apart.
DURABLE = ("--mem-queue-size=0", "--sync-every=1")
# nsqd takes back the messages in flight on a connection that died only once they time
# out: a short timeout keeps a run after a cut link to seconds (default: a minute).
MSG_TIMEOUT = "--msg-timeout=5s"
# A slow link: a few messages' worth of bytes a second, each way.
SLOW_RATE = 4_000.0
RESTART_DELAY = 0.1  # after a run ended by itself (a failure): start again this soon
FINISH_DEADLINE = 120.0  # for the tool to finish its work once the faults are over
TICK = 0.01  # how often the timeline looks at the clock and the tool
CHECK_EVERY = 0.1  # how often supervise_until asks its condition (it may ask nsqd)


class World:
    """The NSQ a harness run talks to: a durable nsqd behind a tap."""

    def __init__(self, directory: Path) -> None:
        # /dev/shm: nsqd's fsync per message costs microseconds there, not a millisecond.
        self.root = Path(tempfile.mkdtemp(prefix="nsqtools-faults-", dir=_memory_dir()))
        self.directory = directory
        self.nsqd = Nsqd(self.root / "nsqd", "nsqd", extra_args=(*DURABLE, MSG_TIMEOUT))
        self.tap: NsqTap | None = None
        self.nsqd_killed = False

    @property
    def address(self) -> str:
        """Where the tool connects: the tap in front of nsqd."""
        assert self.tap is not None
        return self.tap.address

    def __enter__(self) -> World:
        self.nsqd.start()
        self.tap = NsqTap(self.nsqd.tcp_address).__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.tap is not None:
            self.tap.__exit__()
        self.nsqd.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def break_nsqd(self, fault: Fault) -> None:
        assert self.tap is not None
        if fault.kind is FaultKind.NSQD_KILL:
            self.nsqd.kill()
            self.nsqd_killed = True
            self.tap.ledger.nsqd_killed()
        elif fault.kind is FaultKind.NSQD_FREEZE:
            self.nsqd.freeze()
        elif fault.kind is FaultKind.SLOW_LINK:
            self.tap.proxy.upstream_rate = self.tap.proxy.downstream_rate = SLOW_RATE
        elif fault.kind is FaultKind.LINK_CUT:
            self.tap.proxy.cut()

    def mend_nsqd(self, fault: Fault) -> None:
        assert self.tap is not None
        if fault.kind is FaultKind.NSQD_KILL:
            self.nsqd.start()
        elif fault.kind is FaultKind.NSQD_FREEZE:
            self.nsqd.thaw()
        elif fault.kind is FaultKind.SLOW_LINK:
            self.tap.proxy.upstream_rate = self.tap.proxy.downstream_rate = None


class Target:
    """What the harness needs to know of one tool: subclasses define what raises
    NotImplementedError here, and may define the rest."""

    name: str  # as tables show it: "nsq_to_file gzip"
    kinds: tuple[FaultKind, ...]  # the faults that apply to it
    go_program: str | None = None  # Go's tool for the same scenario, if Go has one
    # It consumes nsqd's messages (a SIGKILLed nsqd may then lose those it held in
    # memory); a publisher's acknowledged messages are on nsqd's disk.
    consumes = True
    # Its exit statuses are held to the invariant (not so a stand-in application's).
    exits_judged = True
    world: World
    directory: Path
    schedule: Schedule

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        """Make what the tool needs (directories, a destination) before the first run."""
        self.world = world
        self.directory = directory
        self.schedule = schedule

    def argv(self, implementation: str, run: int) -> list[str]:
        """The command line of run number `run` of our tool ("ours") or Go's ("go")."""
        raise NotImplementedError

    def stdin_for(self, run: int) -> int | None:
        """What run number `run` reads as stdin (None: nothing)."""
        return None

    def run_ended(self, run: Run) -> None:
        """Account for a run that ended (to_nsq: what it read of its stdin)."""

    def break_fault(self, fault: Fault) -> None:
        """Strike a fault only this target has (a destination, a disk)."""

    def mend_fault(self, fault: Fault) -> None:
        """Mend a fault break_fault struck."""

    def start_feeding(self, started: float) -> None:
        """Begin putting the numbered messages in (in the background), from `started`."""
        raise NotImplementedError

    def feeding_done(self) -> bool:
        """Every message is in (published, or written to the tool's stdin)."""
        raise NotImplementedError

    def finish(self, harness: Harness) -> None:
        """The faults are over: let the tool complete its work, then stop it."""
        raise NotImplementedError

    @property
    def published(self) -> set[bytes]:
        """Every message put in."""
        raise NotImplementedError

    def output(self) -> Counter[bytes]:
        """Every message that came out, with its copies."""
        raise NotImplementedError

    def kept(self) -> Counter[bytes]:
        """Messages kept and named instead of delivered (dead letters, failed records)."""
        return Counter()

    def damaged(self) -> list[str]:
        """Output files left unreadable."""
        return []

    @property
    def ambiguous_publishes(self) -> int:
        return 0

    def close(self) -> None:
        """Undo prepare(): stop what it started."""


class Harness:
    """Runs `target` with `implementation` ("ours" or "go") under `schedule`."""

    def __init__(
        self, target: Target, schedule: Schedule, directory: Path, implementation: str = "ours"
    ) -> None:
        self.target = target
        self.schedule = schedule
        self.directory = directory
        self.implementation = implementation
        self.started = 0.0
        self.restart_at: float | None = 0.0  # when to start the tool next (None: not)
        self.restarting = True  # start the tool again whenever a run ends
        self.early_stop: Fault | None = None  # a stop signal for the tool's next start
        self.notes: list[str] = []  # what went wrong in the harness's own waits
        self.finish_seconds = 0.0  # from the end of the schedule until the work was done
        self.runs = ToolRuns(
            lambda number: target.argv(implementation, number),
            directory / "runs",
            target.stdin_for,
        )

    def run(self) -> Tally:
        with World(self.directory) as world:
            self.world = world
            self.target.prepare(world, self.directory, self.schedule)
            try:
                self.started = time.monotonic()
                self.target.start_feeding(self.started)
                self._follow_schedule()
                self.target.finish(self)
                return self._tally()
            finally:
                self.runs.stop()
                self.target.close()

    # -- the timeline ------------------------------------------------------------------

    def _follow_schedule(self) -> None:
        events = sorted(
            [(fault.at, True, index) for index, fault in enumerate(self.schedule.faults)]
            + [(fault.ends, False, index) for index, fault in enumerate(self.schedule.faults)]
        )
        while events or self._elapsed() < self.schedule.span:
            while events and events[0][0] <= self._elapsed():
                _, strike, index = events.pop(0)
                fault = self.schedule.faults[index]
                self._strike(fault) if strike else self._mend(fault)
            self.supervise()
            time.sleep(TICK)  # the schedule's clock, not a synchronisation

    def supervise(self) -> None:
        """Notice a run that ended; start the next one when it is due."""
        ended = self.runs.poll()
        if ended is not None:
            self.target.run_ended(ended)
            if self.restart_at is None and self.restarting:
                self.restart_at = time.monotonic() + RESTART_DELAY
        due = self.restart_at is not None and time.monotonic() >= self.restart_at
        if self.runs.current is None and due:
            self.restart_at = None
            self._start_run()

    def _start_run(self) -> None:
        self.runs.start()
        fault, self.early_stop = self.early_stop, None
        if fault is not None:
            time.sleep(fault.early_delay)  # the fault's own timing: a signal this soon
            self.runs.send(fault.signal, doubled=fault.doubled)

    def supervise_until(self, condition: Callable[[], bool], deadline: float, what: str) -> None:
        """Keep the tool running (started again if a run ends) until condition() holds,
        asked every CHECK_EVERY; after `deadline` seconds, give up and note it."""
        began = time.monotonic()
        next_check = began
        while True:
            now = time.monotonic()
            if now >= next_check:
                if condition():
                    break
                next_check = now + CHECK_EVERY
            if now - began > deadline:
                self.notes.append(f"gave up waiting for {what} after {deadline:g}s")
                break
            self.supervise()
            time.sleep(TICK)
        self.finish_seconds = time.monotonic() - began

    def last_run(self) -> None:
        """Start the tool once more, now, and never again: it is to end by itself (an
        early stop signal whose start never came, the run before it slow to stop, is
        dropped: the faults are over)."""
        self.restarting = False
        self.restart_at = None
        self.early_stop = None
        self._start_run()

    def stop_tool(self) -> Run | None:
        """One SIGTERM to the running tool, and wait for it to end (accounted)."""
        self.restart_at = None
        self.runs.send("SIGTERM")
        run = self.runs.wait()
        if run is not None:
            self.target.run_ended(run)
        return run

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    # -- faults ------------------------------------------------------------------------

    def _strike(self, fault: Fault) -> None:
        kind = fault.kind
        if kind is FaultKind.TOOL_KILL:
            self.runs.kill()
            self.restart_at = time.monotonic() + fault.duration
        elif kind is FaultKind.TOOL_STOP:
            self._stop_signal(fault)
        elif kind in (FaultKind.NSQD_KILL, FaultKind.NSQD_FREEZE) or kind in (
            FaultKind.SLOW_LINK,
            FaultKind.LINK_CUT,
        ):
            self.world.break_nsqd(fault)
        else:
            self.target.break_fault(fault)

    def _stop_signal(self, fault: Fault) -> None:
        """A stop signal now, to the running tool; or, early, to its next start, soon
        after it (the running one is stopped first, with a plain SIGTERM)."""
        self.restart_at = time.monotonic() + fault.duration
        if fault.early:
            self.early_stop = fault
            self.runs.send("SIGTERM")
        else:
            self.runs.send(fault.signal, doubled=fault.doubled)

    def _mend(self, fault: Fault) -> None:
        if fault.kind in (FaultKind.TOOL_KILL, FaultKind.TOOL_STOP, FaultKind.LINK_CUT):
            return  # the tool starts again on its own schedule; a cut link is no more
        if fault.kind in (FaultKind.NSQD_KILL, FaultKind.NSQD_FREEZE, FaultKind.SLOW_LINK):
            self.world.mend_nsqd(fault)
        else:
            self.target.mend_fault(fault)

    # -- counting ----------------------------------------------------------------------

    def _tally(self) -> Tally:
        tap = self.world.tap
        assert tap is not None
        ledger = tap.ledger
        recoveries = [
            (fault, ledger.progress_after(self.started + fault.ends))
            for fault in self.schedule.faults
        ]
        return Tally(
            tool=self.target.name,
            implementation=self.implementation,
            schedule=self.schedule,
            published=self.target.published,
            output=self.target.output(),
            kept=self.target.kept(),
            finished=set(ledger.finished),
            at_risk=set(ledger.at_risk),
            seen=set(ledger.deliveries),
            nsqd_killed=self.world.nsqd_killed and self.target.consumes,
            runs=self.runs.runs,
            recoveries=recoveries,
            damaged=self.target.damaged(),
            ambiguous_publishes=self.target.ambiguous_publishes,
            finish_seconds=self.finish_seconds,
            exits_judged=self.target.exits_judged,
            notes=self.notes,
        )


def _memory_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None
