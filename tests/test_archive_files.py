"""Unit tests of where nsq_to_file's FIN-after-fsync is decided on disk, without nsqd:
archive/files.py (records reach the file only at a sync, one gzip member per sync, a
failed file cut back to its last sync) and archive/inprogress.py (the open-file markers,
and what recovery at start does with a dead run's file)."""

from __future__ import annotations

import fcntl
import gzip
import os
import zlib
from pathlib import Path, PurePosixPath

import pytest

from nsqtools.archive.files import ArchiveWriter, gzip_member
from nsqtools.archive.inprogress import (
    MARKERS,
    Marker,
    OpenFile,
    recover_crashed_files,
)
from nsqtools.archive.names import FilenameFormat

STEM = "orders.host<REV>.2026-11-27_01.log"


# -- archive/files.py ----------------------------------------------------------------


def test_records_reach_the_file_only_at_a_sync(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    archive = ArchiveWriter.open(path, exclusive=True, gzip_level=None)
    archive.add(b"one\n")
    archive.add(b"two\n")
    assert archive.has_unsynced
    assert path.read_bytes() == b""  # a process killed now leaves nothing unFIN'd
    archive.sync()
    assert not archive.has_unsynced
    assert path.read_bytes() == b"one\ntwo\n"
    archive.close()


def test_each_gzip_sync_is_one_whole_member(tmp_path: Path) -> None:
    path = tmp_path / "a.log.gz"
    archive = ArchiveWriter.open(path, exclusive=True, gzip_level=6)
    archive.add(b"one\n")
    archive.sync()
    first_member = path.read_bytes()
    assert gzip.decompress(first_member) == b"one\n"  # whole on its own
    archive.add(b"two\n")
    archive.add(b"three\n")
    archive.sync()
    archive.close()
    data = path.read_bytes()
    assert data.startswith(first_member)
    assert gzip.decompress(data[len(first_member) :]) == b"two\nthree\n"
    assert gzip.decompress(data) == b"one\ntwo\nthree\n"


@pytest.mark.parametrize(("level", "extra_flags"), [(1, 4), (6, 0), (9, 2)])
def test_a_gzip_member_has_gos_header(level: int, extra_flags: int) -> None:
    member = gzip_member(b"body\n", level)
    # magic, deflate, no flags, mtime 0, XFL as Go sets it, OS unknown (255)
    assert member[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes([extra_flags, 255])
    assert gzip.decompress(member) == b"body\n"
    assert member[-8:-4] == zlib.crc32(b"body\n").to_bytes(4, "little")


def test_a_gzip_file_that_got_no_record_holds_an_empty_member(tmp_path: Path) -> None:
    path = tmp_path / "a.log.gz"
    ArchiveWriter.open(path, exclusive=True, gzip_level=6).close()
    assert path.stat().st_size > 0  # gzip -d refuses a file of zero bytes
    assert gzip.decompress(path.read_bytes()) == b""


def test_an_empty_plain_file_stays_empty(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    ArchiveWriter.open(path, exclusive=True, gzip_level=None).close()
    assert path.read_bytes() == b""


def test_abandon_cuts_back_to_the_last_sync_and_drops_what_was_gathered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.log"
    archive = ArchiveWriter.open(path, exclusive=True, gzip_level=None)
    archive.add(b"synced\n")
    archive.sync()
    archive.add(b"never written\n")
    with path.open("ab") as torn:  # what a write that failed halfway leaves
        torn.write(b"half a rec")
    archive.abandon()
    assert path.read_bytes() == b"synced\n"
    archive.abandon()  # a second call does nothing


def test_an_exclusive_open_refuses_a_name_taken(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"someone else's\n")
    with pytest.raises(FileExistsError):
        ArchiveWriter.open(path, exclusive=True, gzip_level=None)
    assert path.read_bytes() == b"someone else's\n"


def test_appending_counts_what_was_there_for_rotate_size(tmp_path: Path) -> None:
    path = tmp_path / "topic" / "day" / "a.log"  # its directories are made
    path.parent.mkdir(parents=True)
    path.write_bytes(b"old\n")
    archive = ArchiveWriter.open(path, exclusive=False, gzip_level=None)
    assert archive.size == 4
    archive.add(b"new one\n")
    assert archive.size == 12  # counted as added, before any sync
    archive.close()
    assert path.read_bytes() == b"old\nnew one\n"


def test_the_size_counts_uncompressed_bytes_as_go_does(tmp_path: Path) -> None:
    archive = ArchiveWriter.open(tmp_path / "a.log.gz", exclusive=True, gzip_level=9)
    archive.add(b"x" * 10_000)
    archive.close()
    assert archive.size == 10_000
    assert (tmp_path / "a.log.gz").stat().st_size < 10_000


def test_opening_makes_missing_directories(tmp_path: Path) -> None:
    path = tmp_path / "orders" / "2026-11-27" / "a.log"
    archive = ArchiveWriter.open(path, exclusive=True, gzip_level=None)
    archive.close()
    assert path.exists()


# -- archive/inprogress.py -----------------------------------------------------------


def _names(gzip_on: bool = False) -> FilenameFormat:
    return FilenameFormat.build(
        "<TOPIC>.<HOST><REV>.<DATETIME>.log",
        datetime_format="%Y-%m-%d_%H",
        host_identifier="host",
        gzip=gzip_on,
        rev_required=True,
        hostname="host",
    )


def _opened(rev: int = 0, gzip_on: bool = False) -> OpenFile:
    stem = STEM + (".gz" if gzip_on else "")
    return OpenFile(stem, rev, _names(gzip_on).relative_path(stem, rev), gzip_on)


def _dead_run(work_dir: Path, opened: OpenFile, content: bytes) -> Path:
    """A run that died with this file open: its marker left, no longer locked."""
    path = work_dir / opened.relative_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    Marker.create(work_dir, opened).release()
    return path


def test_a_clean_close_leaves_no_marker(tmp_path: Path) -> None:
    marker = Marker.create(tmp_path, _opened())
    assert marker.path.parent == tmp_path / MARKERS
    marker.remove()
    assert not (tmp_path / MARKERS).exists()  # nor their directory, empty
    assert recover_crashed_files(tmp_path, tmp_path, _names()) == []


def test_the_markers_directory_stays_while_a_file_is_open_and_goes_with_the_last(
    tmp_path: Path,
) -> None:
    """It was left, empty, in every output dir (the work dir by default)."""
    first, second = Marker.create(tmp_path, _opened()), Marker.create(tmp_path, _opened())
    first.remove()
    assert list((tmp_path / MARKERS).iterdir()) == [second.path]
    second.remove()
    assert not (tmp_path / MARKERS).exists()
    again = Marker.create(tmp_path, _opened())  # made again for the next file
    assert again.path.exists()


def test_a_dead_runs_file_is_cut_back_to_its_last_whole_record(tmp_path: Path) -> None:
    opened = _opened()
    path = _dead_run(tmp_path, opened, b"one\ntwo\nhalf a rec")
    assert recover_crashed_files(tmp_path, tmp_path, _names()) == [path]
    assert path.read_bytes() == b"one\ntwo\n"
    assert not (tmp_path / MARKERS).exists()  # repaired once, not at every start


def test_a_dead_runs_gzip_file_keeps_its_whole_members(tmp_path: Path) -> None:
    opened = _opened(gzip_on=True)
    whole = gzip_member(b"one\n", 6) + gzip_member(b"two\n", 6)
    torn = gzip_member(b"three\n", 6)[:-5]
    path = _dead_run(tmp_path, opened, whole + torn)
    recover_crashed_files(tmp_path, tmp_path, _names(gzip_on=True))
    assert path.read_bytes() == whole


def test_a_dead_runs_file_with_nothing_whole_is_removed(tmp_path: Path) -> None:
    path = _dead_run(tmp_path, _opened(), b"no newline yet")
    assert recover_crashed_files(tmp_path, tmp_path, _names()) == []
    assert not path.exists()


def test_a_dead_runs_file_moves_to_the_output_dir_under_a_free_name(tmp_path: Path) -> None:
    work_dir, output_dir = tmp_path / "work", tmp_path / "out"
    opened = _opened(rev=0)
    _dead_run(work_dir, opened, b"recovered\n")
    taken = output_dir / opened.relative_path
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"another run's\n")
    [placed] = recover_crashed_files(work_dir, output_dir, _names())
    assert placed == output_dir / _names().relative_path(opened.stem, 1)
    assert placed.read_bytes() == b"recovered\n"
    assert taken.read_bytes() == b"another run's\n"  # never overwritten
    assert not (work_dir / opened.relative_path).exists()


def test_a_file_already_moved_before_the_crash_is_left_where_it_is(tmp_path: Path) -> None:
    work_dir, output_dir = tmp_path / "work", tmp_path / "out"
    opened = _opened()
    source = _dead_run(work_dir, opened, b"moved\n")
    destination = output_dir / opened.relative_path
    destination.parent.mkdir(parents=True)
    os.link(source, destination)  # the crash came between the link and the unlink
    assert recover_crashed_files(work_dir, output_dir, _names()) == [destination]
    assert destination.read_bytes() == b"moved\n"
    assert not source.exists()


def test_a_marker_a_live_run_holds_is_left_alone(tmp_path: Path) -> None:
    opened = _opened()
    path = tmp_path / opened.relative_path
    path.write_bytes(b"being written, half a rec")
    marker = Marker.create(tmp_path, opened)  # held: its run is alive
    assert recover_crashed_files(tmp_path, tmp_path, _names()) == []
    assert path.read_bytes() == b"being written, half a rec"
    assert marker.path.exists()
    marker.remove()


def test_a_marker_naming_a_path_outside_the_work_dir_repairs_nothing(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    outside = tmp_path / "precious.log"
    outside.write_bytes(b"not ours, half a rec")
    opened = OpenFile(STEM, 0, PurePosixPath("../precious.log"), False)
    Marker.create(work_dir, opened).release()
    assert recover_crashed_files(work_dir, work_dir, _names()) == []
    assert outside.read_bytes() == b"not ours, half a rec"


def test_markers_are_locked_while_held(tmp_path: Path) -> None:
    marker = Marker.create(tmp_path, _opened())
    fd = os.open(marker.path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
        marker.remove()
