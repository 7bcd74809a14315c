"""nsq_to_file under faults, as a user meets them: kill -9 and a restart, a file size
limit, a full disk, a read-only output dir, a work dir on another filesystem, SIGHUP.

Real nsqd, with a short --msg-timeout so that what a killed run held comes back soon,
and our tool as a child process run from this copy of nsqtools. What became of every
message is checked on both sides: every archive decompresses to whole lines, and every
published body is on disk or still in nsqd: nothing FIN'd that was not written and
synced. Waits are conditions with a deadline.
"""

from __future__ import annotations

import gzip
import hashlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from nsqtools.archive.inprogress import MARKERS
from nsqtools.archive.placing import PARTIAL_PREFIX
from nsqtools.httpapi.nsqd import ChannelStats, ClientStats
from nsqtools.testing import (
    LinkProxy,
    Nsqd,
    file_size_limit,
    not_in_nsqd,
    other_filesystem,
    our_tool,
    remount,
    small_filesystem,
    wait_until,
)
from nsqtools.testing.faults.tap import MOST_NSQD_LOSES, NsqTap
from tests.conftest import DURABLE, LocalNsq

TOPIC = "faults"
CHANNEL = "nsq_to_file"
# Names without a date, so a test knows them, with REV in every name; and a sync well
# within nsqd's --msg-timeout (else nsqd gives held messages again before they are FIN'd).
COMMON = [
    "--host-identifier=host",
    "--filename-format=<TOPIC>.<HOST><REV>.log",
    "--sync-interval=500ms",
]
DEADLINE = 20.0  # seconds for any one thing to happen


@pytest.fixture
def nsqd(local_nsq: LocalNsq) -> Nsqd:
    """An nsqd that gives a message again 2s after its consumer went silent (a killed
    run's messages come back within the test)."""
    return local_nsq.nsqd(extra_args=["--msg-timeout=2s"])


def bodies(start: int, stop: int) -> list[bytes]:
    """Numbered bodies that compress about as much as real data does (a hash in each)."""
    return [
        b"%08d-%s" % (index, hashlib.sha256(b"%d" % index).hexdigest().encode())
        for index in range(start, stop)
    ]


# -- our tool, as a process ------------------------------------------------------------


class Run:
    """One run of our nsq_to_file on the test channel; its stderr goes to a file (a
    pipe nobody reads could fill up and stop it)."""

    def __init__(
        self,
        nsqd: Nsqd,
        stderr: Path,
        args: list[str],
        preexec_fn: Callable[[], None] | None = None,
        address: str | None = None,
    ) -> None:
        self.stderr_path = stderr
        with stderr.open("wb") as errors:
            self.process = subprocess.Popen(
                [
                    *our_tool("nsq_to_file"),
                    f"--nsqd-tcp-address={address or nsqd.tcp_address}",
                    f"--topic={TOPIC}",
                    f"--channel={CHANNEL}",
                    *COMMON,
                    *args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                preexec_fn=preexec_fn,
            )

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self) -> int:
        return self.process.wait(DEADLINE)

    def stop(self) -> int:
        """SIGTERM once it is consuming, and its exit status. (Sooner, while it starts or
        repairs files, SIGTERM has its default effect, before any message is taken.)"""
        wait_until(
            lambda: "subscribed to" in self.stderr or self.process.poll() is not None,
            DEADLINE,
            "the run to subscribe",
        )
        self.process.send_signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def owns(self, marker: Path) -> bool:
        """The marker of a file this run opened (markers are named <pid>-<serial>)."""
        return marker.name.startswith(f"{self.process.pid}-")


@contextmanager
def running(
    nsqd: Nsqd,
    stderr: Path,
    *args: str,
    preexec_fn: Callable[[], None] | None = None,
    address: str | None = None,
) -> Iterator[Run]:
    """A run that is killed at the end of the block if it is still running; it reaches
    nsqd at `address` (a proxy) if given."""
    run = Run(nsqd, stderr, list(args), preexec_fn, address)
    try:
        yield run
    finally:
        if run.process.poll() is None:
            run.kill()


def assert_one_error_line(stderr: str, *parts: str) -> None:
    """The run ended on one clear line (after its log lines) holding every part."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("nsq_to_file: error: ")]
    assert len(errors) == 1, stderr
    assert stderr.splitlines()[-1] == errors[0]
    for part in parts:
        assert part in errors[0], stderr


# -- nsqd's side -----------------------------------------------------------------------


def channel(nsqd: Nsqd) -> ChannelStats | None:
    try:
        return nsqd.channel_stats(TOPIC, CHANNEL)
    except KeyError:
        return None


def drained(nsqd: Nsqd, published: int) -> bool:
    """Every one of the `published` messages FIN'd: none waiting, in flight or deferred."""
    stats = channel(nsqd)
    return (
        stats is not None
        and stats.message_count == published
        and stats.depth == stats.in_flight_count == stats.deferred_count == 0
    )


def emptied(nsqd: Nsqd) -> bool:
    """Nothing left in the channel: none waiting, in flight or deferred."""
    stats = channel(nsqd)
    return stats is not None and stats.depth == stats.in_flight_count == stats.deferred_count == 0


def held(nsqd: Nsqd) -> bool:
    """One message in flight: taken by the tool, not FIN'd yet."""
    stats = channel(nsqd)
    return stats is not None and stats.in_flight_count == 1


def clients(nsqd: Nsqd) -> list[ClientStats]:
    """The consumers on the test channel now."""
    stats = channel(nsqd)
    return [] if stats is None else list(stats.clients)


def finished_by_clients(nsqd: Nsqd) -> int:
    """Messages FIN'd by the consumers connected now (a killed run's are gone)."""
    return nsqd.finished_by_clients(TOPIC, CHANNEL)


def assert_in_nsqd(nsqd: Nsqd, wanted: set[bytes]) -> None:
    missing = sorted(trio.run(not_in_nsqd, nsqd, TOPIC, wanted, CHANNEL))
    assert not missing, f"{len(missing)} messages neither on disk nor in nsqd: {missing[:3]}"


# -- the files' side -------------------------------------------------------------------


def archives(directory: Path) -> list[Path]:
    """The archive files under directory (hidden files, such as markers, aside)."""
    return sorted(
        path
        for path in directory.rglob("*")
        if path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    )


def archived_lines(*directories: Path) -> list[bytes]:
    """The lines of every archive under the directories, each checked readable: a gzip
    file decompresses (and is not empty: gzip -d refuses that), and every file ends
    with a whole line."""
    lines: list[bytes] = []
    for path in (path for directory in directories for path in archives(directory)):
        data = path.read_bytes()
        if path.suffix == ".gz":
            assert data, f"{path} is empty: not a gzip file"
            data = gzip.decompress(data)
        assert not data or data.endswith(b"\n"), f"{path} ends mid-line"
        lines += data.splitlines()
    return lines


def markers(work_dir: Path) -> list[Path]:
    """The open-file markers; none once the tool has removed their directory (which it
    may do between any two looks)."""
    try:
        return sorted((work_dir / MARKERS).iterdir())
    except FileNotFoundError:
        return []


def partial_copies(output_dir: Path) -> list[Path]:
    return sorted(output_dir.rglob(f"{PARTIAL_PREFIX}*"))


# -- kill -9, again and again ----------------------------------------------------------


class Publisher(threading.Thread):
    """Publishes numbered bodies in small batches until stopped, keeping the channel's
    backlog short (the next batch waits until the tool has taken most of the last)."""

    def __init__(self, nsqd: Nsqd, batch: int = 100, backlog: int = 500) -> None:
        super().__init__(name="publisher", daemon=True)
        self.nsqd = nsqd
        self.batch = batch
        self.backlog = backlog
        self.published: list[bytes] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                wait_until(self._room, 60, "room in the channel's backlog")
                batch = bodies(len(self.published), len(self.published) + self.batch)
                self.nsqd.publish_many(TOPIC, batch)
                self.published += batch
        except BaseException as error:  # re-raised by stop(), in the test's thread
            self.error = error

    def _room(self) -> bool:
        stats = channel(self.nsqd)
        return self.stopping.is_set() or stats is None or stats.depth < self.backlog

    def stop(self) -> list[bytes]:
        """Stop publishing; every body published."""
        self.stopping.set()
        self.join(DEADLINE)
        if self.error is not None:
            raise self.error
        return self.published


# When to kill a run: a condition on nsqd, the run and the work dir.
KillPoint = Callable[[Nsqd, Run, Path], bool]


def at_once(nsqd: Nsqd, run: Run, work_dir: Path) -> bool:
    return True  # while it starts, or repairs what the last run left


def subscribed(nsqd: Nsqd, run: Run, work_dir: Path) -> bool:
    stats = channel(nsqd)
    return stats is not None and stats.client_count > 0


def opened_a_file(nsqd: Nsqd, run: Run, work_dir: Path) -> bool:
    return any(run.owns(marker) for marker in markers(work_dir))


def finished(count: int) -> KillPoint:
    def condition(nsqd: Nsqd, run: Run, work_dir: Path) -> bool:
        return finished_by_clients(nsqd) >= count

    condition.__name__ = f"finished {count}"
    return condition


KILL_POINTS = [at_once, finished(1), subscribed, finished(700), opened_a_file, finished(150)]


def kill_loop(nsqd: Nsqd, tmp_path: Path, output_dir: Path, work_dir: Path, *args: str) -> None:
    """Runs killed at each kill point while a publisher publishes, then a last run that
    drains the channel: every body published is in an archive of whole lines, and
    nothing is left in the work dir."""
    nsqd.create_channels(TOPIC, CHANNEL)
    options = [f"--output-dir={output_dir}", f"--work-dir={work_dir}", *args]
    publisher = Publisher(nsqd)
    publisher.start()
    try:
        for index, kill_point in enumerate(KILL_POINTS):
            with running(nsqd, tmp_path / f"run{index}.stderr", *options) as run:
                wait_until(
                    lambda: kill_point(nsqd, run, work_dir),  # noqa: B023
                    DEADLINE,
                    f"run {index} to reach {kill_point.__name__}",
                )
                run.kill()
    finally:
        published = publisher.stop()
    with running(nsqd, tmp_path / "last.stderr", *options) as run:
        wait_until(lambda: drained(nsqd, len(published)), DEADLINE, "the last run to drain")
        assert run.stop() == 0, run.stderr
    assert set(published) <= set(archived_lines(output_dir))
    assert markers(work_dir) == []
    if work_dir != output_dir:
        assert archives(work_dir) == []


@pytest.mark.slow
def test_kill_9_loop_plain_appending(nsqd: Nsqd, tmp_path: Path) -> None:
    """Plain files without a work dir: each run appends to the file the killed one left,
    once cut back to its last whole line."""
    out = tmp_path / "out"
    kill_loop(nsqd, tmp_path, out, out, "--max-in-flight=50")


@pytest.mark.slow
def test_kill_9_loop_gzip_work_dir_on_another_filesystem(nsqd: Nsqd, tmp_path: Path) -> None:
    """gzip files rotated by size, written in a work dir on another filesystem (each
    placed by a copy) when the machine has one, else beside the output dir."""
    with other_filesystem(tmp_path) as elsewhere:
        work = (elsewhere or tmp_path) / "work"
        kill_loop(
            nsqd, tmp_path, tmp_path / "out", work, "--gzip", "--rotate-size=20000",
            "--max-in-flight=50",
        )  # fmt: skip


@pytest.mark.slow
def test_kill_9_loop_plain_rotated_in_a_work_dir(nsqd: Nsqd, tmp_path: Path) -> None:
    kill_loop(
        nsqd, tmp_path, tmp_path / "out", tmp_path / "work", "--rotate-size=5000",
        "--max-in-flight=20",
    )  # fmt: skip


def test_a_gzip_file_killed_before_its_first_sync_leaves_no_empty_file(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    """Killed with a file open and nothing synced in it yet: the file is empty, which
    gzip -d refuses; it held nothing FIN'd, so the next start removes it."""
    out, work = tmp_path / "out", tmp_path / "work"
    options = [f"--output-dir={out}", f"--work-dir={work}", "--gzip"]
    body = bodies(0, 1)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, body)
    # One message of 1000 in flight is no starvation: nothing syncs before the tick.
    slow = ["--max-in-flight=1000", "--sync-interval=1m"]
    with running(nsqd, tmp_path / "killed.stderr", *options, *slow) as run:
        wait_until(lambda: opened_a_file(nsqd, run, work), DEADLINE, "a file opened")
        wait_until(lambda: finished_by_clients(nsqd) == 0 and held(nsqd), DEADLINE, "held")
        run.kill()
    [left] = archives(work)
    assert left.stat().st_size == 0
    with running(nsqd, tmp_path / "next.stderr", *options) as run:
        wait_until(lambda: drained(nsqd, 1), DEADLINE, "the message again, archived")
        assert run.stop() == 0, run.stderr
    assert archived_lines(out) == body
    assert archives(work) == markers(work) == []


# -- a full disk, a file size limit ----------------------------------------------------


def archive_until_the_disk_fails(
    nsqd: Nsqd,
    tmp_path: Path,
    output_dir: Path,
    *args: str,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[set[bytes], str]:
    """Publish more than fits, run until the tool gives up: exit 1, and every body
    published on disk or still in nsqd (nothing FIN'd unwritten). What is on disk, and
    the run's stderr."""
    published = bodies(0, 3000)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, published)
    work = tmp_path / "work"
    options = [f"--output-dir={output_dir}", "--max-in-flight=50", *args]
    with running(nsqd, tmp_path / "run.stderr", *options, preexec_fn=preexec_fn) as run:
        assert run.wait() == 1, run.stderr
    on_disk = set(archived_lines(output_dir, *([work] if work.exists() else [])))
    assert on_disk, "nothing was written before the disk failed"
    assert on_disk < set(published)
    assert_in_nsqd(nsqd, set(published) - on_disk)
    return on_disk, run.stderr


@pytest.mark.parametrize(
    "options", [[], ["--gzip", "--work-dir={work}"]], ids=["plain", "gzip-work-dir"]
)
def test_a_file_size_limit_ends_the_run_with_nothing_lost(
    nsqd: Nsqd, tmp_path: Path, options: list[str]
) -> None:
    """RLIMIT_FSIZE: a write past it fails with EFBIG. The file is cut back to its last
    sync; what it held goes back to nsqd. The next start, without the limit, places the
    file where a finished one goes."""
    out, work = tmp_path / "out", tmp_path / "work"
    options = [option.replace("{work}", str(work)) for option in options]
    on_disk, stderr = archive_until_the_disk_fails(
        nsqd, tmp_path, out, *options, preexec_fn=file_size_limit(20_000)
    )
    assert_one_error_line(stderr, str(tmp_path), ".log", ": file too large")
    work_dir = work if options else out
    assert len(markers(work_dir)) == 1
    with running(nsqd, tmp_path / "next.stderr", f"--output-dir={out}", *options) as run:
        wait_until(lambda: markers(work_dir) == [], DEADLINE, "the file repaired")
        assert run.stop() == 0, run.stderr
    assert set(archived_lines(out)) == on_disk


def test_a_full_disk_ends_the_run_with_nothing_lost(nsqd: Nsqd, tmp_path: Path) -> None:
    """A filesystem of 64 KiB (tmpfs) as the output dir: ENOSPC."""
    with small_filesystem(tmp_path, 64 * 1024) as disk:
        if disk is None:
            pytest.skip("mounting a small filesystem is not permitted here")
        _, stderr = archive_until_the_disk_fails(nsqd, tmp_path, disk)
        assert_one_error_line(stderr, str(disk), ": no space left on device")


# -- a read-only output dir ------------------------------------------------------------


def test_a_read_only_output_dir_fins_nothing(nsqd: Nsqd, tmp_path: Path) -> None:
    """Read-only (a read-only mount: file modes do not stop root): the first file cannot
    be opened, exit 1 on one line, and every message is still in nsqd."""
    published = bodies(0, 100)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, published)
    with small_filesystem(tmp_path, 64 * 1024) as disk:
        if disk is None:
            pytest.skip("mounting a small filesystem is not permitted here")
        remount(disk, read_only=True)
        with running(nsqd, tmp_path / "run.stderr", f"--output-dir={disk}") as run:
            assert run.wait() == 1, run.stderr
        assert_one_error_line(run.stderr, str(disk), ": read-only file system")
        assert list(disk.iterdir()) == []
    assert_in_nsqd(nsqd, set(published))


def test_a_read_only_output_dir_keeps_the_file_in_the_work_dir(nsqd: Nsqd, tmp_path: Path) -> None:
    """Written and synced in the work dir, FIN'd, then the move fails: exit 1, and the
    file stays in the work dir, marked; a start fails the same way, until the output dir
    is writable again and the next start moves it."""
    published = bodies(0, 100)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, published)
    work = tmp_path / "work"
    with small_filesystem(tmp_path, 64 * 1024) as disk:
        if disk is None:
            pytest.skip("mounting a small filesystem is not permitted here")
        options = [f"--output-dir={disk}", f"--work-dir={work}"]
        remount(disk, read_only=True)
        with running(nsqd, tmp_path / "run.stderr", *options) as run:
            wait_until(lambda: drained(nsqd, len(published)), DEADLINE, "all archived")
            assert run.stop() == 1, run.stderr
        # The line names the output dir, not only the file that could not go there.
        assert_one_error_line(run.stderr, str(work), str(disk), ": read-only file system")
        assert archived_lines(work) == published
        assert len(markers(work)) == 1
        with running(nsqd, tmp_path / "again.stderr", *options) as run:
            assert run.wait() == 1, run.stderr  # at start, repairing what is marked
        assert_one_error_line(run.stderr, str(work), str(disk), ": read-only file system")
        remount(disk, read_only=False)
        with running(nsqd, tmp_path / "next.stderr", *options) as run:
            wait_until(lambda: archives(work) == [], DEADLINE, "the file moved")
            assert run.stop() == 0, run.stderr
        assert archived_lines(disk) == published
        assert markers(work) == []


# -- a work dir on another filesystem --------------------------------------------------


def test_a_work_dir_on_another_filesystem_never_overwrites(nsqd: Nsqd, tmp_path: Path) -> None:
    """Go's nsq_to_file cannot move a file across filesystems; ours copies it in. A name
    taken in the output dir, before the file is opened or while it is, is never
    overwritten: the next REV is taken, and no partial copy is left behind."""
    out = tmp_path / "out"
    out.mkdir()
    published = bodies(0, 500)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, published)
    with other_filesystem(tmp_path) as elsewhere:
        if elsewhere is None:
            pytest.skip("no second filesystem here")
        work = elsewhere / "work"
        (out / "faults.host-000000.log").write_bytes(b"theirs 0\n")
        with running(
            nsqd, tmp_path / "run.stderr", f"--output-dir={out}", f"--work-dir={work}"
        ) as run:
            wait_until(lambda: drained(nsqd, len(published)), DEADLINE, "all archived")
            [opened] = archives(work)
            assert opened.name == "faults.host-000001.log"  # REV 0 was taken
            (out / opened.name).write_bytes(b"theirs 1\n")  # and now REV 1 is
            assert run.stop() == 0, run.stderr
        assert archives(work) == markers(work) == []
    assert [path.name for path in archives(out)] == [
        "faults.host-000000.log",
        "faults.host-000001.log",
        "faults.host-000002.log",
    ]
    assert (out / "faults.host-000000.log").read_bytes() == b"theirs 0\n"
    assert (out / "faults.host-000001.log").read_bytes() == b"theirs 1\n"
    assert archived_lines(out)[2:] == published
    assert partial_copies(out) == []


def test_an_output_dir_too_full_for_the_copy_keeps_the_file_in_the_work_dir(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    """The output dir on another, full filesystem: the copy in fails, exit 1 on a line
    that names the output dir; the file stays whole in the work dir, marked, and no
    partial copy is left."""
    published = bodies(0, 2000)  # 146 kB
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, published)
    work = tmp_path / "work"
    with small_filesystem(tmp_path, 64 * 1024) as disk:
        if disk is None:
            pytest.skip("mounting a small filesystem is not permitted here")
        options = [f"--output-dir={disk}", f"--work-dir={work}"]
        with running(nsqd, tmp_path / "run.stderr", *options) as run:
            wait_until(lambda: drained(nsqd, len(published)), DEADLINE, "all archived")
            assert run.stop() == 1, run.stderr
        assert_one_error_line(run.stderr, str(disk), ": no space left on device")
        assert archived_lines(work) == published
        assert len(markers(work)) == 1
        assert list(disk.iterdir()) == []


# -- SIGHUP ----------------------------------------------------------------------------


def test_sighup_closes_and_moves_the_open_file(nsqd: Nsqd, tmp_path: Path) -> None:
    """SIGHUP (after logrotate, say) closes the open file and moves it out of the work
    dir; the next message opens the next REV. Go's nsq_to_file dies here: it goes on
    writing to the file it closed."""
    out, work = tmp_path / "out", tmp_path / "work"
    first, second = bodies(0, 100), bodies(100, 200)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, first)
    with running(nsqd, tmp_path / "run.stderr", f"--output-dir={out}", f"--work-dir={work}") as run:
        wait_until(lambda: drained(nsqd, len(first)), DEADLINE, "the first messages archived")
        assert [path.name for path in archives(work)] == ["faults.host-000000.log"]
        run.process.send_signal(signal.SIGHUP)
        wait_until(lambda: archives(work) == markers(work) == [], DEADLINE, "the file moved")
        nsqd.publish_many(TOPIC, second)
        wait_until(lambda: drained(nsqd, 200), DEADLINE, "the next messages archived")
        assert [path.name for path in archives(work)] == ["faults.host-000001.log"]
        assert run.stop() == 0, run.stderr
    assert [path.name for path in archives(out)] == [
        "faults.host-000000.log",
        "faults.host-000001.log",
    ]
    assert (out / "faults.host-000000.log").read_bytes().splitlines() == first
    assert (out / "faults.host-000001.log").read_bytes().splitlines() == second


# -- nsqd killed, restarted and frozen under a run -----------------------------------


def test_nsqd_killed_restarted_and_frozen_loses_nothing(
    durable_nsq: LocalNsq, tmp_path: Path
) -> None:
    """nsqd is killed (-9), then restarted, then frozen while the tool archives: the tool
    connects again each time and exits 0 at the end; every message published after the
    kill is archived, and every archive is whole. (A kill -9 loses what nsqd had in
    flight itself: it keeps in-flight messages in memory only; and its clean stop may
    lose one it was handing out, which the tap tells.)"""
    nsqd = durable_nsq.nsqd("restarting", extra_args=[*DURABLE, "--msg-timeout=2s"])
    out = tmp_path / "out"
    survivors: list[bytes] = []  # published after the kill

    def publish(count: int) -> list[bytes]:
        start = len(survivors) + 1_000_000  # apart from the bodies before the kill
        batch = bodies(start, start + count)
        nsqd.publish_many(TOPIC, batch)
        return batch

    def some_archived() -> None:
        wait_until(lambda: finished_by_clients(nsqd) > 500, DEADLINE, "some archived")

    # Through a tap, which tells nsqd's own loss on its clean stop (Ledger.never_delivered).
    with (
        NsqTap(nsqd.tcp_address) as tap,
        running(
            nsqd, tmp_path / "run.stderr", f"--output-dir={out}", "--gzip", address=tap.address
        ) as run,
    ):
        nsqd.publish_many(TOPIC, bodies(0, 2000))
        some_archived()
        nsqd.kill()  # with messages in flight, held unsynced by the tool
        nsqd.start()
        survivors += publish(2000)
        some_archived()
        nsqd.restart()  # a clean stop: nsqd keeps what was in flight
        survivors += publish(2000)
        with nsqd.frozen():
            time.sleep(1.0)  # the fault: frozen this long, mid-stream
        # nsqd's counts start again at each start: "drained" is nothing left to give.
        wait_until(lambda: emptied(nsqd), 60, "every message FIN'd")
        assert run.stop() == 0, run.stderr
    lost_by_nsqd = tap.ledger.never_delivered(set(survivors))
    assert set(survivors) - set(archived_lines(out)) <= lost_by_nsqd
    assert len(lost_by_nsqd) <= MOST_NSQD_LOSES
    assert "Traceback" not in run.stderr


def test_a_slow_link_from_nsqd_delays_but_loses_nothing(nsqd: Nsqd, tmp_path: Path) -> None:
    """nsqd's messages reach the tool at 200 KB/s (seconds for these): all archived,
    exit 0."""
    published = bodies(0, 5000)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, published)
    out = tmp_path / "out"
    with LinkProxy(nsqd.tcp_address, downstream_rate=200_000) as proxy:
        options = [f"--output-dir={out}", "--gzip"]
        with running(nsqd, tmp_path / "run.stderr", *options, address=proxy.address) as run:
            wait_until(lambda: drained(nsqd, len(published)), 60, "all archived")
            assert run.stop() == 0, run.stderr
    assert set(archived_lines(out)) == set(published)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["cut link", "nsqd restart"])
def test_a_reconnect_keeps_the_rate_up(
    nsqd: Nsqd, local_nsq: LocalNsq, tmp_path: Path, fault: str
) -> None:
    """Two nsqds, messages on one. Messages held unsynced when its connection breaks are
    settled after the tool has reconnected: their FINs are dropped (nsqd gives them
    again), not sent on the new connection, whose in-flight count stays right; so the
    tool goes on flushing whenever that nsqd starves it. With a sync interval of an hour
    and half of --max-in-flight per nsqd, only those flushes FIN anything."""
    idle = local_nsq.nsqd("idle")
    first, then = bodies(0, 15), bodies(15, 55)
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, first)
    out = tmp_path / "out"
    options = [f"--output-dir={out}", "--max-in-flight=20", "--sync-interval=1h"]

    def in_flight() -> int:
        stats = channel(nsqd)
        return -1 if stats is None else stats.in_flight_count

    with LinkProxy(nsqd.tcp_address) as proxy:
        # The idle nsqd first: connected before the other, it halves the other's RDY.
        # The proxy holds the other's connection until then: the two connect at once,
        # and the proxied one, first under load, took all 15 on RDY 20 (seen in CI).
        proxy.pause()
        with running(
            nsqd,
            tmp_path / "run.stderr",
            f"--nsqd-tcp-address={proxy.address}",
            *options,
            address=idle.tcp_address,
        ) as run:
            wait_until(lambda: len(clients(idle)) == 1, DEADLINE, "the run on the idle nsqd")
            proxy.resume()
            # RDY 10 each: FIN'd at each starvation, the last few held, unsynced.
            wait_until(
                lambda: 0 < in_flight() < 8 and finished_by_clients(nsqd) + in_flight() == 15,
                DEADLINE,
                "the first messages archived but a few held",
            )
            held = in_flight()
            if fault == "cut link":
                proxy.cut()
            else:
                nsqd.restart()
            nsqd.publish_many(TOPIC, then)
            wait_until(lambda: finished_by_clients(nsqd) >= 30, DEADLINE, "30 more FIN'd")
            assert run.stop() == 0, run.stderr
    archived = archived_lines(out)
    assert len(archived) - len(set(archived)) <= held  # at most those held, given again
    assert_in_nsqd(nsqd, set(first + then) - set(archived))
    assert "E_FIN_FAILED" not in run.stderr


@pytest.mark.parametrize("program", ["nsq_to_file", "nsq_tail"])
def test_sigterm_while_connecting_exits_at_once(tmp_path: Path, program: str) -> None:
    """The only nsqd address answers nothing (a black hole: it accepts, never speaks):
    the first SIGTERM ends the start at once, exit 0, instead of waiting out the
    connection set-up (read_timeout, a minute)."""
    with socket.create_server(("127.0.0.1", 0)) as black_hole:
        host, port = black_hole.getsockname()[:2]
        argv = [
            *our_tool(program), f"--nsqd-tcp-address={host}:{port}", f"--topic={TOPIC}",
            *([f"--output-dir={tmp_path}"] if program == "nsq_to_file" else []),
        ]  # fmt: skip
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            black_hole.settimeout(DEADLINE)
            connection, _ = black_hole.accept()  # the tool waits for IDENTIFY's answer
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=5)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        connection.close()
    assert process.returncode == 0, stderr


def test_held_messages_are_synced_before_nsqd_times_them_out(nsqd: Nsqd, tmp_path: Path) -> None:
    """A trickle that never fills the in-flight window, a --sync-interval longer than
    nsqd's msg_timeout (2s here): the files are synced twice per msg_timeout all the
    same, so nsqd times nothing out and nothing is written twice (a3a5299, as Go's:
    every message held past 2s, sent again, written twice)."""
    out = tmp_path / "out"
    with running(nsqd, tmp_path / "run.stderr", f"--output-dir={out}", "--sync-interval=1m") as run:
        wait_until(lambda: "subscribed to" in run.stderr, DEADLINE, "the run to subscribe")
        for body in bodies(0, 5):
            nsqd.publish(TOPIC, body)
        wait_until(lambda: drained(nsqd, 5), DEADLINE, "every message FIN'd")
        assert run.stop() == 0, run.stderr
    stats = channel(nsqd)
    assert stats is not None and stats.timeout_count == 0
    assert sorted(archived_lines(out)) == bodies(0, 5)
