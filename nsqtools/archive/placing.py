"""Moving a finished file into the output directory without ever overwriting one.

A candidate name is taken by link(2) only, which fails when the name exists, so two
processes choosing the same name at the same moment never clobber each other; then the
source goes (Go's exclusiveRename). Across filesystems link(2) fails with EXDEV, where
Go's nsq_to_file gives up: the content is first copied to a hidden temporary beside the
candidates (named PARTIAL_PREFIX...) and synced, and the temporary is linked instead, so a
crash mid-copy leaves that temporary, never part of a file under a candidate name. The
temporary is locked (flock) while in use: remove_abandoned_copies() removes only those
of processes that died.
Directory entries are synced too: a placed file survives a power loss, and so does a
directory made here or a file created beside others (make_directories here, and
nsqtools.durable's fsync_directory: the archive's modules use them for every file and
directory they make).

Synchronous and blocking: the archive sink calls it from a worker thread.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from itertools import chain
from pathlib import Path

from nsqtools.durable import fsync_directory

PARTIAL_PREFIX = ".nsqtools-partial-"
ABANDONED_AFTER = 10.0  # seconds since a temporary last changed before it may be removed
DIRECTORY_MODE = 0o770  # as Go's MkdirAll(dir, 0770)

# link(2), through a name tests can replace to fail with EXDEV on a single filesystem.
_link: Callable[[Path, Path], None] = os.link


def move_without_overwrite(source: Path, candidates: Iterable[Path]) -> Path:
    """Move `source` to the first candidate that does not exist, making its missing
    directories; return that candidate. FileExistsError if every candidate exists."""
    remaining = iter(candidates)
    try:
        placed = _link_first_free(source, remaining)
    except _OnOtherFilesystem as crossing:
        placed = _copy_in(source, crossing.candidate, remaining)
    fsync_directory(placed.parent)
    source.unlink()
    # Else a power loss could bring the source back, to be placed a second time.
    fsync_directory(source.parent)
    return placed


class _OnOtherFilesystem(OSError):
    """link(2) failed with EXDEV: the candidate is on another filesystem."""

    def __init__(self, candidate: Path) -> None:
        super().__init__(errno.EXDEV, os.strerror(errno.EXDEV), str(candidate))
        self.candidate = candidate


def _link_first_free(target: Path, candidates: Iterator[Path]) -> Path:
    for candidate in candidates:
        make_directories(candidate.parent)
        try:
            _link(target, candidate)
        except FileExistsError:
            continue
        except OSError as error:
            if error.errno == errno.EXDEV:
                raise _OnOtherFilesystem(candidate) from error
            raise
        return candidate
    raise FileExistsError(errno.EEXIST, "every candidate name exists", str(target))


def _copy_in(source: Path, first: Path, rest: Iterator[Path]) -> Path:
    """Place a synced copy of `source`, made beside `first`, at the first free name."""
    descriptor, name = tempfile.mkstemp(prefix=PARTIAL_PREFIX, dir=first.parent)
    copy = Path(name)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # ours while it exists: see remove_abandoned_copies
        try:
            _copy_synced(source, descriptor)
        except OSError as error:
            # Named as a move (a failed write names no file, mkstemp a hidden temporary):
            # a full or read-only output dir is then plain to see.
            raise OSError(error.errno, error.strerror, str(source), None, str(first)) from error
        return _link_first_free(copy, chain([first], rest))
    finally:
        copy.unlink()
        os.close(descriptor)


def _copy_synced(source: Path, descriptor: int) -> None:
    """Copy `source` (content and mode) into the open file `descriptor`, and sync it."""
    with source.open("rb") as original:
        os.fchmod(descriptor, stat.S_IMODE(os.fstat(original.fileno()).st_mode))
        with open(descriptor, "wb", closefd=False) as written:
            shutil.copyfileobj(original, written)
    os.fsync(descriptor)


def remove_abandoned_copies(directory: Path) -> list[Path]:
    """Remove the temporaries of copies whose process died mid-copy: unlocked, and not
    just made (a live copy locks its temporary a moment after making it). Those of live
    copies stay. The paths removed."""
    return [path for path in directory.glob(f"{PARTIAL_PREFIX}*") if _remove_if_abandoned(path)]


def _remove_if_abandoned(path: Path) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # placed, or removed, meanwhile
    try:
        if time.time() - os.fstat(descriptor).st_mtime < ABANDONED_AFTER:
            return False
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
        return True
    except BlockingIOError:
        return False  # a live copy holds it
    finally:
        os.close(descriptor)


def make_directories(directory: Path) -> None:
    """Make `directory` and its missing parents, each with DIRECTORY_MODE (os.makedirs
    gives the parents the default mode) and each entry synced."""
    if directory.is_dir():
        return
    make_directories(directory.parent)
    with suppress(FileExistsError):  # made by another process meanwhile
        directory.mkdir(DIRECTORY_MODE)
        fsync_directory(directory.parent)
