"""The class-data archive of Spark's JVM (nsqtools.spark.classdata): which JVM dumps it,
which partial dump becomes it, and that no partial dump (some 200 MiB) is left behind.
No JVM is started: the JVMs here are stand-in processes, alive or gone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqtools.spark import classdata


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("NSQTOOLS_SPARK_CLASS_CACHE", raising=False)
    monkeypatch.setattr(classdata, "_dumping", None)


@pytest.fixture
def gone_pid() -> int:
    """The pid of a process that has exited."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    process = subprocess.Popen(["sleep", "60"])
    yield process.pid
    process.kill()
    process.wait()


def archive_path() -> Path:
    path = classdata._archive_path()
    assert path is not None
    return path


def test_a_start_dumps_when_there_is_no_archive_and_maps_it_once_there(gone_pid: int) -> None:
    options = classdata.java_options()
    partial = Path(options.split()[0].removeprefix("-XX:ArchiveClassesAtExit="))
    classdata.record_jvm(gone_pid)
    partial.write_bytes(b"classes")  # what the JVM wrote as it exited

    options = classdata.java_options()

    assert options.startswith(f"-XX:SharedArchiveFile={archive_path()} ")
    assert archive_path().read_bytes() == b"classes"
    assert list(archive_path().parent.iterdir()) == [archive_path()]


def test_a_dump_still_being_made_is_not_adopted(live_pid: int) -> None:
    classdata.java_options()
    classdata.record_jvm(live_pid)

    assert "-XX:ArchiveClassesAtExit=" in classdata.java_options()
    assert not archive_path().exists()


def test_a_dump_whose_archive_came_first_is_removed_once_complete(gone_pid: int) -> None:
    """Another JVM's archive adopted while this one started (the JVM takes seconds)."""
    options = classdata.java_options()
    partial = Path(options.split()[0].removeprefix("-XX:ArchiveClassesAtExit="))
    archive_path().write_bytes(b"the first")
    classdata.record_jvm(gone_pid)
    partial.write_bytes(b"the second")

    classdata.java_options()

    assert archive_path().read_bytes() == b"the first"
    assert list(archive_path().parent.iterdir()) == [archive_path()]


def test_a_dump_no_jvm_was_named_for_goes_with_its_process(gone_pid: int) -> None:
    cache = archive_path().parent
    left = cache / f"{archive_path().name}.partial-{gone_pid}"
    left.write_bytes(b"classes")
    starting = cache / f"{archive_path().name}.partial-{os.getpid()}"
    starting.write_bytes(b"")

    classdata.java_options()

    assert not left.exists()
    assert starting.exists()  # this process is alive: its JVM may be starting
