"""Which archive files are being written, so that a crashed run's files are repaired.

Before a file is opened, a marker for it is written (and synced) in the work dir's
`.nsq_to_file-open/` directory and locked (flock) for as long as the file is open; a
clean close removes it, and the directory with the last one: no empty directory is left
in the output dir (the work dir by default). At start, every marker that nobody holds
locked belongs to a run that died (kill -9, power loss): its file is cut back to its
last complete record or gzip member (what was cut was never FIN'd, so nsqd sends it
again), moved to the output directory like any finished file (or removed, if nothing in
it was whole: gzip -d refuses an empty file), and the marker removed. A marker still
locked belongs to a live run (another nsq_to_file on the same directory) and is left
alone, as are files without a marker (never ours to touch: the default output directory
is /tmp).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from nsqtools.archive.names import FilenameFormat
from nsqtools.archive.placing import (
    make_directories,
    move_without_overwrite,
    remove_abandoned_copies,
)
from nsqtools.archive.recovery import cut_back
from nsqtools.durable import fsync_directory

log = logging.getLogger("nsqtools.archive")

MARKERS = ".nsq_to_file-open"
_serial = itertools.count()


@dataclass(frozen=True)
class OpenFile:
    """Where an open archive file lives, and how to name it again if its name is taken."""

    stem: str  # the file's name with <REV> still in it (see FilenameFormat.stem)
    rev: int
    relative_path: PurePosixPath  # under the work dir; under the output dir once moved
    gzip: bool


class Marker:
    """The mark of one open file: held (locked) until the file is closed and placed."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def create(cls, work_dir: Path, opened: OpenFile) -> Marker:
        directory = work_dir / MARKERS
        path = directory / f"{os.getpid()}-{next(_serial)}"
        while True:
            make_directories(directory)  # synced: a power loss must not take every marker
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o660)
                break
            except FileNotFoundError:  # another run removed it, empty, meanwhile
                continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        record = {
            "stem": opened.stem,
            "rev": opened.rev,
            "path": str(opened.relative_path),
            "gzip": opened.gzip,
        }
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)
        fsync_directory(directory)
        return cls(path, fd)

    def remove(self) -> None:
        """The file is closed and where it belongs: nothing to repair any more."""
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        _remove_if_empty(self.path.parent)

    def release(self) -> None:
        """Stop holding the marker but leave it: the file needs repair (a failed write)."""
        os.close(self._fd)


def recover_crashed_files(work_dir: Path, output_dir: Path, names: FilenameFormat) -> list[Path]:
    """Repair and place the files of runs that died; the paths where they now are."""
    directory = work_dir / MARKERS
    if not directory.is_dir():
        return []
    placed = []
    for marker in sorted(directory.iterdir()):
        opened = _claim(marker)
        if opened is None:
            continue
        fd, record = opened
        try:
            path = _repair(work_dir, output_dir, names, record)
            if path is not None:
                placed.append(path)
            marker.unlink()
        finally:
            os.close(fd)
    _remove_if_empty(directory)
    return placed


def _remove_if_empty(directory: Path) -> None:
    """The markers' directory, once no file is open: not left behind, empty, in the
    output dir. One that still holds a marker (a file open here or in another run)
    stays. Unsynced: should a power loss bring it back, it is empty and harmless."""
    try:
        directory.rmdir()
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise


def _claim(marker: Path) -> tuple[int, OpenFile | None] | None:
    """The marker, locked, and what it records; None if a live run holds it."""
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # removed by its run meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd, _read_marker(fd)


def _read_marker(fd: int) -> OpenFile | None:
    try:
        record = json.loads(os.read(fd, 1 << 16))
        return OpenFile(
            str(record["stem"]),
            int(record["rev"]),
            PurePosixPath(record["path"]),
            bool(record["gzip"]),
        )
    except (ValueError, KeyError, TypeError):
        return None  # torn by the crash before the file was opened: nothing to repair


def _repair(
    work_dir: Path, output_dir: Path, names: FilenameFormat, opened: OpenFile | None
) -> Path | None:
    if opened is None or not _inside(opened.relative_path):
        return None
    source = work_dir / opened.relative_path
    if not source.exists():
        return None  # it was moved out before the crash
    if work_dir != output_dir:
        # A copy to another filesystem that the crash cut short leaves a temporary there.
        remove_abandoned_copies((output_dir / opened.relative_path).parent)
        placed = _placed_before(source, destinations(output_dir, names, opened))
        if placed is not None:
            source.unlink()  # the crash came between the link and the unlink
            fsync_directory(source.parent)  # before the marker goes: else it comes back
            return placed
    recovered = cut_back(source, gzip=opened.gzip)
    if recovered.kept == 0:
        # Nothing in it was synced, so nothing was FIN'd: no file is better than an
        # empty one.
        source.unlink()
        fsync_directory(source.parent)  # else a power loss brings it back, unmarked
        log.warning("removed %s, left empty by a run that stopped abruptly", source)
        return None
    log.warning(
        "recovered %s from a run that stopped abruptly: kept %d bytes, cut %d",
        source,
        recovered.kept,
        recovered.cut,
    )
    if work_dir == output_dir:
        return source
    return move_without_overwrite(source, destinations(output_dir, names, opened))


def destinations(output_dir: Path, names: FilenameFormat, opened: OpenFile) -> Iterator[Path]:
    """Where a finished file may go in the output dir: the name it had, then the next
    revisions (as Go does when the name is taken)."""
    yield output_dir / opened.relative_path
    if "<REV>" in opened.stem:
        for rev in itertools.count(opened.rev + 1):
            yield output_dir / names.relative_path(opened.stem, rev)


def _placed_before(source: Path, places: Iterator[Path]) -> Path | None:
    """The place among the taken ones that is the source itself (a link to it), if any."""
    for place in places:
        if not place.exists():
            return None  # names are taken in order: it would be before the first free one
        if place.samefile(source):
            return place
    return None


def _inside(relative_path: PurePosixPath) -> bool:
    return not relative_path.is_absolute() and ".." not in relative_path.parts
