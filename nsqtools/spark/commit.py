"""Compacted partitions made visible whole, or not at all.

A job writes its output under a hidden staging directory inside the output directory
(Spark's readers skip names starting with "."), then moves each partition directory
into place with one rename: where the partition exists, the two directories are
exchanged atomically (Linux renameat2 RENAME_EXCHANGE) and the old one removed. A job
killed at any point leaves each partition whole, old or new; the next job into the same
directory removes what the killed one staged. One job at a time per directory: a lock
file says which.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from nsqtools.errors import NsqError

STAGING_PREFIX = ".staging-"
_LOCK_NAME = ".nsq-archive.lock"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class OutputBusy(NsqError):
    """Another job writes into the same output directory."""


@contextlib.contextmanager
def staging_directory(out: Path) -> Iterator[Path]:
    """A fresh staging directory inside out, removed at the end, with out locked for
    the job; what killed jobs left there is removed first."""
    out.mkdir(parents=True, exist_ok=True)
    with _locked(out):
        for leftover in out.glob(STAGING_PREFIX + "*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = out / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, out: Path) -> list[str]:
    """Move every partition directory written under staging into out, each in one step,
    replacing the partition of the same name; their names relative to out."""
    published = []
    for relative in partitions(staging):
        partition, target = staging / relative, out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            _exchange(partition, target)
            shutil.rmtree(partition)  # the old partition, now at the staging path
        else:
            partition.rename(target)
        published.append(relative)
    return published


def partitions(directory: Path) -> list[str]:
    """The partition directories under directory (those holding data files), relative
    to it; hidden ones (staging) aside."""
    found = []
    for root, directories, files in os.walk(directory):
        directories[:] = [name for name in directories if not name.startswith((".", "_"))]
        if any(not name.startswith((".", "_")) for name in files):
            found.append(Path(root).relative_to(directory).as_posix())
    return sorted(found)


def _exchange(first: Path, second: Path) -> None:
    """Swap two directories atomically; where the system cannot, with two renames (the
    partition is then absent for the instant between them)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        done = renameat2(
            _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
        )
        if done == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(second))
    aside = first.with_name(first.name + ".old")
    second.rename(aside)
    first.rename(second)
    aside.rename(first)


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    with (out / _LOCK_NAME).open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusy(f"{out}: another nsq archive job is writing there") from None
        yield
