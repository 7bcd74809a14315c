"""The standard streams from trio: whole writes, chunked reads, never stalling heartbeats.

A read from or write to a pipe or terminal can block for as long as the other side
pleases; on trio's thread that would stop heartbeats, so reads wait for the fd to be
readable first and writes go to a worker thread. Regular files and /dev/null never
block for long and are used directly. Writes hold a lock, so lines from several topics
never interleave. A closed pipe
(`nsq_tail | head`) is reported as PipeClosed, which commands treat as a normal end.
A write to a pipe nobody reads can be cancelled: its thread is abandoned, still
blocked, so how much of it was written is unknown and the writer must not be used again.
Blocking code (nsq_stat) writes with write_all; trio is imported where used, so that
such code loads none.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator

from nsqtools.runtime.closedstdout import silence_stdout

__all__ = ["PipeClosed", "StdoutWriter", "read_chunks", "silence_stdout", "write_all"]

READ_SIZE = 1024 * 1024


class PipeClosed(Exception):
    """The reader of stdout went away."""


def may_block(fd: int) -> bool:
    """False for regular files and /dev/null, which never make a caller wait long."""
    status = os.fstat(fd)
    if stat.S_ISREG(status.st_mode):
        return False
    try:
        return not os.path.samestat(status, os.stat(os.devnull))
    except OSError:
        return True


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`, waiting as long as the reader makes it; raise PipeClosed if
    the reader has gone."""
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except BrokenPipeError:
        raise PipeClosed from None


class StdoutWriter:
    def __init__(self, fd: int = 1) -> None:
        import trio

        self.fd = fd
        self.blocks = may_block(fd)
        self._lock = trio.Lock()

    async def write(self, data: bytes) -> None:
        """Write all of `data`; raise PipeClosed if the reader has gone."""
        import trio

        if not self.blocks:
            write_all(self.fd, data)  # no await: nothing can interleave, no lock needed
            return
        async with self._lock:
            await trio.to_thread.run_sync(write_all, self.fd, data, abandon_on_cancel=True)


async def read_chunks(fd: int) -> AsyncIterator[bytes]:
    """The bytes of `fd` until its end, in chunks of up to READ_SIZE.

    A pipe or terminal is waited on until readable, then read: a cancelled wait has
    taken nothing from it (a read in a worker thread, abandoned, would take a chunk and
    drop it). No checkpoint comes between a read and the yield, so a caller that does
    not checkpoint before it uses the chunk loses none to a cancellation.
    """
    import trio

    blocks = may_block(fd)
    while True:
        if blocks:
            await trio.lowlevel.wait_readable(fd)
        else:
            await trio.lowlevel.checkpoint()
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            return
        yield chunk
