"""The tool under test, run again and again: each start is a Run, with the signals it was
sent and how it ended.

Every run is the leader of its own process group, so a doubled signal can be sent the
way GNU `timeout` sends it: to the process, then to its group. Runs die with the thread
that started them (as nsqd does in the harness): start them from the test's own thread.
Each run's stdout and stderr go to files of their own, read once it has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nsqtools.testing.cluster import die_with_parent, wait_until

EXIT_WAIT = 30.0


@dataclass
class Run:
    number: int
    process: subprocess.Popen[bytes]
    started: float  # time.monotonic()
    stdout: Path
    stderr_path: Path
    sent: list[str] = field(default_factory=list)  # "SIGTERM", "SIGINT twice", "SIGKILL"
    ended: float | None = None
    exit_code: int | None = None
    stderr: str = ""
    overdue: bool = False  # it did not end within EXIT_WAIT of its stop signal: killed
    kept: int = 0  # messages it kept rather than delivered (dead letters, failed records)
    # A stop signal came before the program caught SIGTERM: while the interpreter itself
    # started, before any code of the program ran (what it does then is Python's).
    before_handler: bool = False

    @property
    def stop_signals(self) -> list[str]:
        return [sent for sent in self.sent if sent != "SIGKILL"]

    @property
    def killed(self) -> bool:
        return "SIGKILL" in self.sent

    def describe(self) -> str:
        sent = ", ".join(self.sent) or "no signal"
        last = self.stderr.strip().splitlines()[-1:] or [""]
        overdue = " (overdue: killed)" if self.overdue else ""
        return f"run {self.number}: {sent} → exit {self.exit_code}{overdue}; {last[0][:160]}"


def _child_setup(die_with_parent: Callable[[], None] | None) -> Callable[[], None]:
    """The run gets SIGINT as a program started from a terminal does, whatever the
    harness inherited (a CI script's `cmd &` starts it with SIGINT ignored: a SIGINT
    before the tool takes the signals would be ignored, and the run overdue); and dies
    with the thread that started it."""

    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if die_with_parent is not None:
            die_with_parent()

    return setup


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask in /proc), which
    every tool of ours installs with SIGINT's in its first line, and Python does not."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # it ended: nothing to tell
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return True


class ToolRuns:
    """Starts runs of one command line (argv_for(number) → argv) in `directory`."""

    def __init__(
        self,
        argv_for: Callable[[int], list[str]],
        directory: Path,
        stdin_for: Callable[[int], int | None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv_for = argv_for
        self.directory = directory
        self.stdin_for = stdin_for
        self.env = env
        self.runs: list[Run] = []
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def current(self) -> Run | None:
        """The last run if it is still running."""
        if self.runs and self.runs[-1].exit_code is None:
            return self.runs[-1]
        return None

    def start(self) -> Run:
        number = len(self.runs)
        stdout = self.directory / f"run{number}.out"
        stderr = self.directory / f"run{number}.err"
        stdin = self.stdin_for(number) if self.stdin_for is not None else subprocess.DEVNULL
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(
                self.argv_for(number),
                stdin=stdin,
                stdout=out,
                stderr=err,
                cwd=self.directory,
                env=self.env,
                process_group=0,
                preexec_fn=_child_setup(die_with_parent()),
            )
        run = Run(number, process, time.monotonic(), stdout, stderr)
        self.runs.append(run)
        return run

    def send(self, signame: str, *, doubled: bool = False) -> None:
        """A stop signal to the current run; doubled: then to its process group too.
        One stop per run: a run already stopping is left to end (another signal, a second
        apart, would be the "exit at once" one, which the harness never means: a slow
        stop, a Spark job's, may still be under way when the schedule ends)."""
        run = self.current
        if run is None or run.stop_signals:
            return
        signum = signal.Signals[signame]
        # Whether it has its handler yet, not how long it has run: on a loaded machine
        # the interpreter's own start (site's imports) took more than half a second, and
        # a SIGINT there ends it as Python does ("Fatal Python error: init_import_site",
        # exit 1). Every tool catches the signals in its first line (test_tool_signals).
        if not catches_sigterm(run.process.pid):
            run.before_handler = True
        try:
            os.kill(run.process.pid, signum)
            if doubled:
                os.killpg(run.process.pid, signum)
        except ProcessLookupError:
            return  # it ended meanwhile
        run.sent.append(f"{signame} twice" if doubled else signame)

    def kill(self) -> None:
        run = self.current
        if run is None:
            return
        run.sent.append("SIGKILL")
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(run.process.pid, signal.SIGKILL)

    def poll(self) -> Run | None:
        """The current run, once it has ended (and is recorded as such); else None."""
        run = self.current
        if run is None or run.process.poll() is None:
            return None
        return self._ended(run)

    def _ended(self, run: Run) -> Run:
        run.ended = time.monotonic()
        run.exit_code = run.process.returncode
        run.stderr = run.stderr_path.read_text(errors="replace")
        return run

    def wait(self, timeout: float = EXIT_WAIT) -> Run | None:
        """Wait for the current run to end (killing it after `timeout`); the run, if any."""
        run = self.current
        if run is None:
            return None
        try:
            wait_until(lambda: run.process.poll() is not None, timeout, f"run {run.number} to end")
        except TimeoutError:
            run.overdue = True
            run.process.kill()
            run.process.wait()
        return self._ended(run)

    def stop(self) -> None:
        """Kill whatever still runs (the harness's own teardown)."""
        run = self.current
        if run is not None:
            run.process.kill()
            run.process.wait()
            self._ended(run)
