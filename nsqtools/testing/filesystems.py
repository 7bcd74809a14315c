"""Filesystems for tests of tools that write files: a second one, a small one, a
read-only one, and a file size limit for a child process.

Moving a finished file from the work dir to the output dir takes a copy when the two are
on different filesystems (link(2) fails with EXDEV). other_filesystem() gives a folder
on a real other filesystem (a tmpfs such as /dev/shm) when the machine has one;
links_cross_filesystems() pretends, inside this process, so that the copy is tested on
any machine. small_filesystem() mounts a tmpfs of a few pages (a disk that fills up:
ENOSPC), which remount() makes read-only (EROFS); both need the right to mount (root),
and give None without it. file_size_limit() makes a child's writes fail past a size
(EFBIG), as a filesystem's or a quota's limit would, on any machine.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
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


@contextmanager
def small_filesystem(parent: Path, size: int) -> Iterator[Path | None]:
    """A new tmpfs of `size` bytes, mounted on a new folder under `parent` and unmounted
    afterwards; None where mounting is not permitted."""
    mount_point = Path(tempfile.mkdtemp(prefix="tmpfs-", dir=parent))
    if not _mount("-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(mount_point)):
        mount_point.rmdir()
        yield None
        return
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)
        mount_point.rmdir()


def remount(mount_point: Path, *, read_only: bool) -> None:
    """Make a filesystem small_filesystem() mounted read-only (writes fail with EROFS,
    even for root, whom file modes do not stop), or writable again."""
    if not _mount("-o", f"remount,{'ro' if read_only else 'rw'}", str(mount_point)):
        raise OSError(errno.EPERM, f"cannot remount {mount_point}")


def _mount(*args: str) -> bool:
    try:
        result = subprocess.run(["mount", *args], capture_output=True, check=False)
    except FileNotFoundError:  # no mount(8) here
        return False
    return result.returncode == 0


def file_size_limit(limit: int) -> Callable[[], None]:
    """A preexec_fn for subprocess: the child writes no file past `limit` bytes
    (RLIMIT_FSIZE); a write that would fails with EFBIG, as Python ignores SIGXFSZ."""

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_file_size
