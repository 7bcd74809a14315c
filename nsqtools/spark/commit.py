"""Compacted partitions published whole, on any storage Hadoop reaches.

A job writes its output under a hidden staging directory inside the output directory
(Spark's readers skip names starting with "."), checks it, then writes a journal there
(every partition it publishes, and the files that partition is to hold) and moves the
partitions into place. The journal makes the move resumable: the next job into the same
directory finishes a killed job's move (roll forward) before anything else, and removes
what killed jobs staged without a journal. Every step of a move can be done again
harmlessly, so a move finished twice ends the same.

How a partition is replaced depends on what the store's rename gives:
- a new partition is one directory rename: atomic on a local disk and on HDFS;
- an existing partition on a local disk is exchanged with the new one in one step
  (Linux renameat2 RENAME_EXCHANGE): a reader sees the old partition or the new;
- elsewhere (HDFS, object stores such as S3, where a rename copies object by object) the
  new files are moved in, then the old ones removed: a reader listing the partition
  meanwhile may see old and new rows together (never fewer rows), until the move ends.
One job at a time per directory: on a local disk a lock file says which; elsewhere that
is the user's to ensure (as for any Spark job writing there).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from nsqtools.errors import NsqError
from nsqtools.spark.storage import Storage, is_local, joined, shown

STAGING_PREFIX = ".staging-"
_JOURNAL = "publishing.json"
_LOCK_NAME = ".nsq-archive.lock"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class OutputBusy(NsqError):
    """Another job writes into the same output directory."""


@contextlib.contextmanager
def staging_directory(store: Storage, out: str) -> Iterator[str]:
    """A fresh staging directory inside out, removed at the end, with out locked for
    the job (on a local disk); a killed job's move is finished first, and what killed
    jobs left staged is removed."""
    store.make_directories(out)
    with _locked(out):
        finish_unfinished(store, out)
        staging = joined(out, f"{STAGING_PREFIX}{uuid.uuid4().hex}")
        try:
            yield staging
        finally:
            store.delete(staging)


def partitions(store: Storage, directory: str) -> dict[str, list[str]]:
    """The partition directories under directory (those holding data files), relative
    to it, each with its data files' names; hidden ones (staging, markers) aside."""
    found: dict[str, list[str]] = defaultdict(list)
    for relative in store.files_under(directory):
        partition, _, name = relative.rpartition("/")
        found[partition].append(name)
    return dict(sorted(found.items()))


def publish(store: Storage, staging: str, out: str, written: Sequence[str]) -> list[str]:
    """Move every partition written under the staging subdirectories `written` into
    out, replacing the partition of the same name; their names relative to out."""
    journal = {
        partition: {"from": part, "files": files}
        for part in written
        for partition, files in partitions(store, joined(staging, part)).items()
    }
    store.write_json(joined(staging, _JOURNAL), journal)
    _finish(store, staging, out, journal)
    return sorted(journal)


def finish_unfinished(store: Storage, out: str) -> None:
    """Finish the moves killed jobs left journaled in out, and remove what they staged."""
    for entry in store.children(out, hidden=True):
        if not (entry.is_directory and entry.name.startswith(STAGING_PREFIX)):
            continue
        leftover = joined(out, entry.name)
        journal = joined(leftover, _JOURNAL)
        if store.exists(journal):
            _finish(store, leftover, out, store.read_json(journal))
        store.delete(leftover)


def _finish(store: Storage, staging: str, out: str, journal: dict[str, Any]) -> None:
    for partition, entry in journal.items():
        source = joined(joined(staging, entry["from"]), partition)
        _move(store, source, joined(out, partition), entry["files"])


def _move(store: Storage, source: str, target: str, files: list[str]) -> None:
    """Make target hold exactly `files`, moved from source; repeatable at any point."""
    if not store.exists(target):
        store.make_directories(target.rsplit("/", 1)[0])
        if store.rename(source, target):
            return
    elif is_local(target) and _names(store, source) == sorted(files):
        _exchange(shown(source), shown(target))  # the old partition, now staged, goes with it
        return
    for name in files:
        if store.exists(joined(source, name)):
            store.rename(joined(source, name), joined(target, name))
    for name in set(_names(store, target)) - set(files):
        store.delete(joined(target, name))


def _names(store: Storage, directory: str) -> list[str]:
    return [entry.name for entry in store.children(directory) if not entry.is_directory]


def _exchange(first: str, second: str) -> None:
    """Swap two local directories atomically; where the system cannot, with two renames
    (the partition is then absent for the instant between them)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        done = renameat2(
            _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
        )
        if done == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), second)
    aside = first + ".old"
    os.rename(second, aside)
    os.rename(first, second)
    os.rename(aside, first)


@contextlib.contextmanager
def _locked(out: str) -> Iterator[None]:
    if not is_local(out):
        yield
        return
    with open(os.path.join(shown(out), _LOCK_NAME), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusy(f"{shown(out)}: another nsq archive job is writing there") from None
        yield
