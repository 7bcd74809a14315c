"""A second filesystem for tests of nsq_to_file's --work-dir: a real one, or a pretended one.

Moving a finished file from the work dir to the output dir takes a copy when the two are
on different filesystems (link(2) fails with EXDEV). other_filesystem() gives a folder
on a real other filesystem (a tmpfs such as /dev/shm) when the machine has one;
links_cross_filesystems() pretends, inside this process, so that the copy is tested on
any machine.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nsqtools.archive import placing

# Where a filesystem other than the one under test is likely mounted.
_LIKELY_ELSEWHERE = ("/dev/shm", "/run/user", "/var/tmp", tempfile.gettempdir())


@contextmanager
def other_filesystem(than: Path) -> Iterator[Path | None]:
    """A new folder on a filesystem other than that of `than`, removed afterwards; None
    when no writable one is found."""
    device = than.stat().st_dev
    for root in map(Path, _LIKELY_ELSEWHERE):
        if root.is_dir() and os.access(root, os.W_OK) and root.stat().st_dev != device:
            folder = Path(tempfile.mkdtemp(prefix="nsqtools-", dir=root))
            try:
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
    yield None


@contextmanager
def links_cross_filesystems(work_dir: Path) -> Iterator[None]:
    """In this process, placing a file from under `work_dir` finds link(2) failing with
    EXDEV, as when the output dir is on another filesystem."""
    real_link = placing._link

    def link(source: Path, destination: Path) -> None:
        if source.is_relative_to(work_dir):
            raise OSError(
                errno.EXDEV, os.strerror(errno.EXDEV), str(source), None, str(destination)
            )
        real_link(source, destination)

    placing._link = link
    try:
        yield
    finally:
        placing._link = real_link
