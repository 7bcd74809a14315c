"""Finished files moved into the output dir without overwriting (archive.placing): by
link(2), and by a synced copy when the output dir is on another filesystem, really
(/dev/shm here) or pretended (links_cross_filesystems), up to a kill -9 mid-copy."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import suppress
from itertools import count
from pathlib import Path

import pytest

from nsqtools.archive import placing
from nsqtools.archive.placing import PARTIAL_PREFIX, move_without_overwrite
from nsqtools.testing import links_cross_filesystems, other_filesystem, wait_until


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture(params=["link", "copy"])
def way(request: pytest.FixtureRequest, work: Path) -> Iterator[str]:
    """Each test twice: by link(2), and by copy as when the work dir is elsewhere."""
    if request.param == "link":
        yield "link"
        return
    with links_cross_filesystems(work):
        yield "copy"


def revisions(folder: Path) -> Iterator[Path]:
    return (folder / f"topic.host-{rev:06d}.log" for rev in count())


def finished(work: Path, content: bytes = b"one\ntwo\n", name: str = "topic.log") -> Path:
    source = work / name
    source.write_bytes(content)
    return source


def test_a_file_is_linked_to_the_first_free_name(work: Path, out: Path) -> None:
    source = finished(work)
    inode = source.stat().st_ino
    placed = move_without_overwrite(source, revisions(out))
    assert placed == out / "topic.host-000000.log"
    assert (placed.read_bytes(), placed.stat().st_ino) == (b"one\ntwo\n", inode)
    assert not source.exists()


def test_a_copy_keeps_content_and_mode_and_leaves_no_temporary(work: Path, out: Path) -> None:
    source = finished(work)
    source.chmod(0o640)
    with links_cross_filesystems(work):
        placed = move_without_overwrite(source, revisions(out))
    assert placed == out / "topic.host-000000.log"
    assert (placed.read_bytes(), stat.S_IMODE(placed.stat().st_mode)) == (b"one\ntwo\n", 0o640)
    assert not source.exists()
    assert list(out.iterdir()) == [placed]


def test_a_file_is_copied_to_a_real_other_filesystem(work: Path) -> None:
    with other_filesystem(work) as elsewhere:
        if elsewhere is None:
            pytest.skip("no second filesystem here; the copy is tested by pretending only")
        source = finished(work)
        with pytest.raises(OSError, match="cross-device"):
            os.link(source, elsewhere / "probe")
        placed = move_without_overwrite(source, revisions(elsewhere / "out"))
        assert placed == elsewhere / "out" / "topic.host-000000.log"
        assert placed.read_bytes() == b"one\ntwo\n"
        assert not source.exists()
        assert list(placed.parent.iterdir()) == [placed]


def test_existing_names_are_skipped_never_overwritten(work: Path, out: Path, way: str) -> None:
    for rev in (0, 1, 3):
        (out / f"topic.host-{rev:06d}.log").write_bytes(b"theirs %d\n" % rev)
    placed = move_without_overwrite(finished(work), revisions(out))
    assert placed == out / "topic.host-000002.log"
    assert placed.read_bytes() == b"one\ntwo\n"
    for rev in (0, 1, 3):
        assert (out / f"topic.host-{rev:06d}.log").read_bytes() == b"theirs %d\n" % rev


def test_a_name_taken_as_it_is_chosen_is_skipped(work: Path, out: Path, way: str) -> None:
    def taken_by_another_process_first(candidates: Iterator[Path]) -> Iterator[Path]:
        for rev, candidate in enumerate(candidates):
            if rev < 2:  # it did not exist when the caller chose it, and now does
                candidate.write_bytes(b"theirs\n")
            yield candidate

    placed = move_without_overwrite(finished(work), taken_by_another_process_first(revisions(out)))
    assert placed == out / "topic.host-000002.log"
    assert [path.read_bytes() for path in sorted(out.iterdir())] == [b"theirs\n"] * 2 + [
        b"one\ntwo\n"
    ]


def test_movers_racing_for_the_same_names_each_get_their_own(
    work: Path, out: Path, way: str
) -> None:
    sources = [finished(work, b"file %d\n" % index, f"topic{index}.log") for index in range(8)]
    placed: list[Path] = []
    start = threading.Barrier(len(sources))

    def mover(source: Path) -> None:
        start.wait()
        placed.append(move_without_overwrite(source, revisions(out)))

    threads = [threading.Thread(target=mover, args=(source,)) for source in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    names = [out / f"topic.host-{rev:06d}.log" for rev in range(len(sources))]
    assert sorted(placed) == sorted(out.iterdir()) == names
    assert sorted(path.read_bytes() for path in placed) == [b"file %d\n" % i for i in range(8)]


def test_missing_directories_are_made_with_mode_0770(work: Path, out: Path, way: str) -> None:
    umask = os.umask(0o022)
    try:
        placed = move_without_overwrite(finished(work), revisions(out / "2026" / "11"))
    finally:
        os.umask(umask)
    assert placed == out / "2026" / "11" / "topic.host-000000.log"
    assert stat.S_IMODE((out / "2026").stat().st_mode) == 0o750
    assert stat.S_IMODE((out / "2026" / "11").stat().st_mode) == 0o750


def test_when_every_name_exists_the_source_stays(work: Path, out: Path, way: str) -> None:
    taken = [out / "a.log", out / "b.log"]
    for path in taken:
        path.write_bytes(b"theirs\n")
    source = finished(work)
    with pytest.raises(FileExistsError):
        move_without_overwrite(source, taken)
    assert source.read_bytes() == b"one\ntwo\n"
    assert sorted(out.iterdir()) == taken


def test_other_errors_are_raised_and_the_source_stays(work: Path, out: Path, way: str) -> None:
    (out / "not-a-folder").write_bytes(b"")
    source = finished(work)
    with pytest.raises(NotADirectoryError):
        move_without_overwrite(source, revisions(out / "not-a-folder"))
    assert source.read_bytes() == b"one\ntwo\n"
    assert [path.name for path in out.iterdir()] == ["not-a-folder"]


# A process placing one file as if across filesystems, with its file size capped (to
# make writing the copy fail): a real crash or a real I/O error in the middle of a copy.
MOVER = """
import resource, sys
from pathlib import Path
from nsqtools.archive.placing import move_without_overwrite
from nsqtools.testing import links_cross_filesystems

source, destination, size_limit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (size_limit, size_limit))
with links_cross_filesystems(source.parent):
    move_without_overwrite(source, [destination])
"""


def start_mover(source: Path, destination: Path, size_limit: int) -> subprocess.Popen[bytes]:
    arguments = [str(source), str(destination), str(size_limit)]
    return subprocess.Popen(
        [sys.executable, "-c", MOVER, *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def partial_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.glob(PARTIAL_PREFIX + "*"))


def test_a_kill_mid_copy_leaves_no_file_under_a_candidate_name(work: Path, out: Path) -> None:
    """The source is a pipe fed until the copy has begun, then the mover is killed."""
    source = work / "topic.log"
    os.mkfifo(source)
    pipe = os.open(source, os.O_RDWR | os.O_NONBLOCK)  # Linux: opens without a reader
    mover = start_mover(source, out / "topic.host-000000.log", -1)

    def fed_until_copying() -> bool:
        with suppress(BlockingIOError):
            os.write(pipe, b"line\n" * 4096)
        return partial_bytes(out) > 0

    try:
        wait_until(fed_until_copying, 30, "the copy to begin")
    finally:
        mover.kill()
        mover.communicate()
        os.close(pipe)
    (left,) = out.iterdir()
    assert left.name.startswith(PARTIAL_PREFIX)
    assert placing.remove_abandoned_copies(out) == []  # too fresh: a live copy's, maybe
    os.utime(left, (0, 0))
    assert placing.remove_abandoned_copies(out) == [left]
    assert list(out.iterdir()) == []


def test_a_live_copy_keeps_its_temporary(out: Path) -> None:
    temporary = out / f"{PARTIAL_PREFIX}live"
    temporary.write_bytes(b"being copied\n")
    os.utime(temporary, (0, 0))
    with temporary.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert placing.remove_abandoned_copies(out) == []
    assert placing.remove_abandoned_copies(out) == [temporary]


def test_a_copy_that_fails_is_removed_and_the_source_stays(work: Path, out: Path) -> None:
    source = finished(work, b"line\n" * 100_000)
    mover = start_mover(source, out / "topic.host-000000.log", 64 * 1024)
    _, stderr = mover.communicate(timeout=30)
    assert mover.returncode != 0
    assert b"File too large" in stderr
    assert list(out.iterdir()) == []
    assert source.read_bytes() == b"line\n" * 100_000
