"""Writing to stdout from trio: whole lines, one write per batch, without stalling.

A write to a pipe or terminal can block for as long as the reader pleases; done on
trio's thread it would stop heartbeats, so those writes go to a worker thread. Regular
files and /dev/null never block for long and are written directly. Writes hold a lock,
so lines from several topics never interleave. A closed pipe (`nsq_tail | head`) is
reported as PipeClosed, which commands treat as a normal end.
"""

from __future__ import annotations

import os
import stat

import trio


class PipeClosed(Exception):
    """The reader of stdout went away."""


class StdoutWriter:
    def __init__(self, fd: int = 1) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self.blocks = not (stat.S_ISREG(mode) or _is_devnull(fd))
        self._lock = trio.Lock()

    async def write(self, data: bytes) -> None:
        """Write all of `data`; raise PipeClosed if the reader has gone."""
        async with self._lock:
            try:
                if self.blocks:
                    await trio.to_thread.run_sync(self._write_all, data)
                else:
                    self._write_all(data)
            except BrokenPipeError:
                raise PipeClosed from None

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]


def _is_devnull(fd: int) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(os.devnull))
    except OSError:
        return False


def silence_stdout() -> None:
    """After a closed pipe: point fd 1 at /dev/null so nothing at exit complains."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
