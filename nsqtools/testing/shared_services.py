"""Services one test run shares across its processes (pytest-xdist's workers): started
once by the first process that needs one, reused by the others, ended once when the run
ends. For what costs too much to start per worker on 2 cores: a Spark cluster, a
Spark Connect server, an S3 server.

A service is a name and a start function. Given a folder of its own and a callback, the
start function starts the service's processes, each the leader of a process group of
its own (start_new_session), gives each group to the callback as it starts it, and
returns a JSON-able description of the running service (its URLs, ...). Everything
lives in the run's folder, named by the run's id (xdist's testrun_uid):

    controller.pid      the run's controller process (xdist's, or the only one)
    NAME.lock           held while NAME starts: the other processes wait for it
    NAME.groups         the process groups NAME started, one a line, as they start
    NAME.json           {"description": ...}, or {"error": ...} if its start failed
    NAME/               the service's own folder (its logs, ...)

The controller ends every recorded group at the run's end (end_run) and removes the
folder. The processes never outlive the run: a watchdog process, started with the
first service, waits for the controller to exit and then does the same; so a run
killed hard, or a worker that dies while its service starts, leaves nothing behind.

    services = SharedServices(run_folder(run_id))
    services.begin(os.getpid())          # the controller, at the run's start
    description = services.get(service)  # any process of the run
    services.end()                       # the controller, at the run's end
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsqtools.testing.binaries import PACKAGE_ROOT
from nsqtools.testing.cluster import wait_until

STOP_TIMEOUT = 30.0  # for a group to end after SIGTERM, before SIGKILL

# Called with each process group the service starts, as it starts it.
GroupRecorder = Callable[[int], None]


@dataclass(frozen=True)
class SharedService:
    name: str
    # (its folder, the recorder) → a JSON-able description of the running service
    start: Callable[[Path, GroupRecorder], Any]


class SharedServiceFailed(RuntimeError):
    """A service's start failed, here or in another process of the run."""


def run_folder(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"nsqtools-shared-{run_id}"


class SharedServices:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def begin(self, controller_pid: int) -> None:
        """The controller, before any other process of the run starts."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "controller.pid").write_text(f"{controller_pid}\n")

    def get(self, service: SharedService) -> Any:
        """The service's description, starting the service unless a process of the run
        already did (or failed to: then this fails the same way, without a second try)."""
        record = self.folder / f"{service.name}.json"
        with self._locked(service.name):
            if not record.exists():
                record.write_text(json.dumps(self._start(service)))
            outcome = json.loads(record.read_text())
        if "error" in outcome:
            raise SharedServiceFailed(f"{service.name} did not start: {outcome['error']}")
        return outcome["description"]

    def end(self) -> None:
        """The controller, at the end of the run: every service's process groups end
        (SIGTERM, then SIGKILL after STOP_TIMEOUT), and the run's folder goes."""
        end_run(self.folder)

    def _start(self, service: SharedService) -> dict[str, Any]:
        self._watch_the_controller()
        groups = self.folder / f"{service.name}.groups"

        def record_group(group: int) -> None:
            with groups.open("a") as lines:
                lines.write(f"{group}\n")

        folder = self.folder / service.name
        folder.mkdir(exist_ok=True)
        try:
            return {"description": service.start(folder, record_group)}
        except Exception as error:
            end_groups(_groups_in(groups))  # what it started before it failed
            groups.unlink(missing_ok=True)
            return {"error": f"{type(error).__name__}: {error}"}

    def _watch_the_controller(self) -> None:
        """Starts the run's watchdog, unless a process of the run already did."""
        marker = self.folder / "watchdog.pid"
        with self._locked("watchdog"):
            if marker.exists():
                return
            controller = (self.folder / "controller.pid").read_text().strip()
            command = [sys.executable, "-m", __name__, str(self.folder), controller]
            watchdog = subprocess.Popen(
                command,
                cwd=PACKAGE_ROOT,  # -m imports this checkout's nsqtools, installed or not
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the run's group: a ^C must not end it first
            )
            marker.write_text(f"{watchdog.pid}\n")

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        with (self.folder / f"{name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            yield


def end_run(folder: Path) -> None:
    """Ends every recorded group of the run's services and removes the run's folder."""
    for groups in sorted(folder.glob("*.groups")):
        end_groups(_groups_in(groups))
        groups.unlink()
    shutil.rmtree(folder, ignore_errors=True)


def end_groups(groups: list[int]) -> None:
    """SIGTERM to each group, then SIGKILL to those with a process left after a while."""
    for group in groups:
        _signal_group(group, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: not any(map(group_alive, groups)), STOP_TIMEOUT, "the groups' end")
    for group in groups:
        if group_alive(group):
            _signal_group(group, signal.SIGKILL)


def group_alive(group: int) -> bool:
    """Whether a process of the group still runs (a zombie, dead but not yet reaped by
    its parent, does not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so after its ')'
            state, _ppid, pgrp = stat.read_text().rpartition(")")[2].split()[:3]
            if int(pgrp) == group and state != "Z":
                return True
    return False


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signum)


def _groups_in(path: Path) -> list[int]:
    with contextlib.suppress(FileNotFoundError):
        return [int(line) for line in path.read_text().split()]
    return []


def watch(folder: Path, controller_pid: int) -> None:
    """The watchdog: waits for the controller to exit, then ends the run (nothing is
    left if the controller ended it already)."""
    try:
        controller = os.pidfd_open(controller_pid)
    except ProcessLookupError:
        pass  # gone already
    else:
        poll = select.poll()
        poll.register(controller, select.POLLIN)  # readable once the process has exited
        poll.poll()
    end_run(folder)


if __name__ == "__main__":
    watch(Path(sys.argv[1]), int(sys.argv[2]))
