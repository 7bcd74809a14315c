"""Moving a finished file into the output directory without ever overwriting one.

A candidate name is taken by link(2) only, which fails when the name exists, so two
processes choosing the same name at the same moment never clobber each other; then the
source goes (Go's exclusiveRename). Across filesystems link(2) fails with EXDEV, where
Go's nsq_to_file gives up: the content is first copied to a hidden temporary beside the
candidates (named PARTIAL_PREFIX...) and synced, and the temporary is linked instead, so a
crash mid-copy leaves that temporary, never part of a file under a candidate name.
Directory entries are synced too: a placed file survives a power loss.

Synchronous and blocking: the archive sink calls it from a worker thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from itertools import chain
from pathlib import Path

PARTIAL_PREFIX = ".nsqtools-partial-"
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


def fsync_directory(directory: Path) -> None:
    """Make the entries of `directory` (files created, linked or removed) durable."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class _OnOtherFilesystem(OSError):
    """link(2) failed with EXDEV: the candidate is on another filesystem."""

    def __init__(self, candidate: Path) -> None:
        super().__init__(errno.EXDEV, os.strerror(errno.EXDEV), str(candidate))
        self.candidate = candidate


def _link_first_free(target: Path, candidates: Iterator[Path]) -> Path:
    for candidate in candidates:
        _make_directories(candidate.parent)
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
    try:
        copy = _synced_copy(source, first.parent)
    except OSError as error:
        # Named as a move (a failed write names no file, mkstemp a hidden temporary):
        # a full or read-only output dir is then plain to see.
        raise OSError(error.errno, error.strerror, str(source), None, str(first)) from error
    try:
        return _link_first_free(copy, chain([first], rest))
    finally:
        copy.unlink()


def _synced_copy(source: Path, directory: Path) -> Path:
    """A copy of `source` (content and mode) under a new hidden name in `directory`,
    on disk; removed again if the copy fails."""
    descriptor, name = tempfile.mkstemp(prefix=PARTIAL_PREFIX, dir=directory)
    copy = Path(name)
    try:
        with open(descriptor, "wb") as written, source.open("rb") as original:
            os.fchmod(descriptor, stat.S_IMODE(os.fstat(original.fileno()).st_mode))
            shutil.copyfileobj(original, written)
            written.flush()
            os.fsync(descriptor)
    except BaseException:
        copy.unlink()
        raise
    return copy


def _make_directories(directory: Path) -> None:
    """Make `directory` and its missing parents, each with DIRECTORY_MODE (os.makedirs
    gives the parents the default mode) and each entry synced."""
    if directory.is_dir():
        return
    _make_directories(directory.parent)
    with suppress(FileExistsError):  # made by another process meanwhile
        directory.mkdir(DIRECTORY_MODE)
        fsync_directory(directory.parent)
