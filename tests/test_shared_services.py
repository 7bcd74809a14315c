"""nsqtools.testing.shared_services with a service of `sleep` processes: started once and
shared, a failed start told to every asker, and its processes ended at the run's end or
when the run's controller dies without ending them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqtools.testing import wait_until
from nsqtools.testing.shared_services import (
    GroupRecorder,
    SharedService,
    SharedServiceFailed,
    SharedServices,
    group_alive,
)

WAIT = 30.0


class Sleepers:
    """A service's start function: `sleep` processes, each leading a group of its own."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.starts = 0
        self.groups: list[int] = []

    def __call__(self, folder: Path, record_group: GroupRecorder) -> dict[str, object]:
        self.starts += 1
        sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
        record_group(sleeper.pid)
        self.groups.append(sleeper.pid)
        if self.fail:
            raise RuntimeError("no port today")
        return {"url": f"sleep://{sleeper.pid}", "folder": str(folder)}


@pytest.fixture
def controller() -> Iterator[subprocess.Popen[bytes]]:
    """Stands for the run's controller: the watchdog waits for this process's end."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def services(tmp_path: Path, controller: subprocess.Popen[bytes]) -> Iterator[SharedServices]:
    shared = SharedServices(tmp_path / "run")
    shared.begin(controller.pid)
    yield shared
    shared.end()


def test_started_once_then_shared_and_ended_with_the_run(services: SharedServices) -> None:
    start = Sleepers()
    service = SharedService("sleepers", start)
    first = services.get(service)
    assert SharedServices(services.folder).get(service) == first  # another process's view
    assert start.starts == 1
    assert first["url"] == f"sleep://{start.groups[0]}"
    assert Path(first["folder"]).is_dir()
    assert group_alive(start.groups[0])
    services.end()
    assert not group_alive(start.groups[0])
    assert not services.folder.exists()


def test_a_failed_start_fails_every_asker_and_leaves_nothing(services: SharedServices) -> None:
    start = Sleepers(fail=True)
    service = SharedService("broken", start)
    for _ in range(2):
        with pytest.raises(SharedServiceFailed, match="broken did not start: RuntimeError"):
            services.get(service)
    assert start.starts == 1
    assert not group_alive(start.groups[0])


def test_the_processes_end_when_the_controller_dies_first(
    services: SharedServices, controller: subprocess.Popen[bytes]
) -> None:
    start = Sleepers()
    services.get(SharedService("sleepers", start))
    controller.kill()
    controller.wait()
    wait_until(lambda: not group_alive(start.groups[0]), WAIT, "the watchdog's end of the run")
    wait_until(lambda: not services.folder.exists(), WAIT, "the run's folder removed")
