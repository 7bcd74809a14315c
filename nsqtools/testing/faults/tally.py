"""What a harness run found, and the one invariant it is held to.

The invariant: every message published is delivered at least once, or kept and named (a
dead letter, a record in to_nsq's failed file); nothing is FIN'd that is neither; nothing
comes out that was never put in; and every run's exit status tells the truth (a first
stop signal, even doubled, ends in 0 unless something failed; a failure says so in one
line and exits 1; never a traceback). Duplicates are counted, not forbidden: delivery is
at least once. Losses nsqd itself causes (a SIGKILLed nsqd drops the messages it held in
memory: in flight, deferred, or never handed to the tool) are told apart and allowed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from nsqtools.testing.faults.runs import Run
from nsqtools.testing.faults.schedule import Fault, Schedule

# Exit statuses a stop signal may end a run with: 0, or 1 when something failed.
STOP_EXITS = (0, 1)
SHOWN = 8  # bodies named in a report, at most, per kind


@dataclass
class Tally:
    tool: str
    implementation: str  # "ours" or "go"
    schedule: Schedule
    published: set[bytes]
    output: Counter[bytes]  # every body that came out, with its copies
    kept: Counter[bytes]  # dead letters, failed records
    finished: set[bytes]  # FIN'd, as the tap saw
    at_risk: set[bytes]  # nsqd held them in memory only when it was killed
    seen: set[bytes]  # delivered to the tool at least once, as the tap saw
    nsqd_killed: bool
    runs: list[Run]
    recoveries: list[tuple[Fault, float | None]]  # seconds to the next progress
    damaged: list[str] = field(default_factory=list)  # output files left unreadable
    ambiguous_publishes: int = 0  # publishes of ours that may have gone in twice
    finish_seconds: float = 0.0  # after the faults, until the tool had done its work
    exits_judged: bool = True  # a stand-in application's exit statuses are not
    notes: list[str] = field(default_factory=list)  # the harness's own waits that failed

    @property
    def missing(self) -> set[bytes]:
        return self.published - self.output.keys() - self.kept.keys()

    @property
    def lost_by_nsqd(self) -> set[bytes]:
        """Missing, and nsqd held them in memory only when it was killed (or never handed
        them to the tool at all, when it was killed)."""
        if not self.nsqd_killed:
            return set()
        return {body for body in self.missing if body in self.at_risk or body not in self.seen}

    @property
    def lost(self) -> set[bytes]:
        return self.missing - self.lost_by_nsqd

    @property
    def fin_unwritten(self) -> set[bytes]:
        return self.finished & self.missing

    @property
    def garbage(self) -> set[bytes]:
        return set(self.output) - self.published

    @property
    def duplicates(self) -> int:
        return self.output.total() - len(self.output)

    def run_problems(self) -> list[str]:
        """Exit statuses that lie, and tracebacks."""
        problems: list[str] = []
        if not self.exits_judged:
            return problems
        for run in self.runs:
            problem = _run_problem(run)
            if problem is not None:
                problems.append(f"{run.describe()}: {problem}")
        return problems

    def check(self) -> None:
        """Raise AssertionError with the whole report if the invariant does not hold."""
        if self.lost or self.garbage or self.damaged or self.notes or self.run_problems():
            raise AssertionError(self.report())

    def report(self) -> str:
        lines = [
            f"{self.tool} ({self.implementation}) under {self.schedule.describe()}",
            f"published {len(self.published)}, delivered "
            f"{len(self.published & self.output.keys())}, duplicates {self.duplicates}, "
            f"kept {len(self.kept)}, lost by nsqd {len(self.lost_by_nsqd)}, "
            f"LOST {len(self.lost)}, FIN'd unwritten {len(self.fin_unwritten)}, "
            f"garbage {len(self.garbage)}, ambiguous publishes {self.ambiguous_publishes}, "
            f"work done {self.finish_seconds:.1f}s after the faults",
        ]
        lines += [f"  NOTE {note}" for note in self.notes]
        for name, bodies in (
            ("lost", self.lost),
            ("FIN'd unwritten", self.fin_unwritten),
            ("garbage", self.garbage),
        ):
            if bodies:
                lines.append(f"  {name}: {_some(bodies)}")
        lines += [f"  damaged file: {damage}" for damage in self.damaged]
        for fault, recovered in self.recoveries:
            after = "no progress after it" if recovered is None else f"{recovered:.2f}s"
            lines.append(f"  recovery {after} after {fault.describe()}")
        lines += [f"  {run.describe()}" for run in self.runs]
        early = [run.number for run in self.runs if run.before_handler]
        if early:
            lines.append(
                f"  runs {early}: signalled while the interpreter started, before the "
                "program's first line (not judged: what Python does then is Python's)"
            )
        lines += [f"  PROBLEM {problem}" for problem in self.run_problems()]
        return "\n".join(lines)


def _run_problem(run: Run) -> str | None:
    if run.before_handler:
        # Python's own start: the tools' first line takes the signals (README, Signals).
        return None
    if "Traceback (most recent call last)" in run.stderr:
        return "a traceback"
    if run.killed or run.exit_code is None:
        return None
    error_line = any(": error: " in line for line in run.stderr.splitlines())
    if run.overdue:
        return "did not end within 30 s of its stop signal"
    if run.stop_signals and run.exit_code not in STOP_EXITS:
        return f"a first stop signal ended it with {run.exit_code}"
    if run.exit_code == 0 and error_line:
        return "exit 0 after an error line"
    if run.exit_code == 0 and run.kept:
        return f"exit 0, though it kept {run.kept} messages it did not deliver"
    if run.exit_code != 0 and not error_line:
        return "a failure exit without an error line"
    return None


def _some(bodies: set[bytes]) -> str:
    shown = sorted(bodies)[:SHOWN]
    more = f" and {len(bodies) - len(shown)} more" if len(bodies) > len(shown) else ""
    return ", ".join(body.decode(errors="replace") for body in shown) + more
