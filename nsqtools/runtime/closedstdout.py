"""Stdout whose reader went away (`nsq topics | head -1`): the program ends quietly, exit 0.

Every program's entry point puts a QuietStdout in sys.stdout before anything else. A
write or flush that finds the reader gone points fd 1 at /dev/null (so nothing written
later, nor the flush at exit, complains) and raises StdoutClosed: a SystemExit with
status 0, which click, the commands' `except Exception` and front.run let through.
Without it, click catches the broken pipe and exits 1, and the interpreter's last flush
says "Exception ignored" and exits 120.

Programs that write fd 1 themselves (nsq_tail's sink, nsq_stat's lines) see PipeClosed
(runtime.stdio) instead and end the same way once they have settled what they hold.

Imported first thing by every program: it imports only what the interpreter has loaded.
"""

from __future__ import annotations

import io
import os
import sys


class StdoutClosed(SystemExit):
    """The reader of stdout has gone: the program ends, with status 0 and no message."""

    def __init__(self) -> None:
        super().__init__(0)


def silence_stdout() -> None:
    """After a closed pipe: point fd 1 at /dev/null so nothing at exit complains."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


class QuietStdout(io.TextIOWrapper):
    """sys.stdout, ending the program quietly once its reader has gone."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)  # at exit only: nobody is left to read it

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        silence_stdout()
        if not sys.is_finalizing():  # the interpreter's last flush: the program has ended
            raise StdoutClosed


def quiet_stdout() -> None:
    """Make sys.stdout a QuietStdout over the same buffer, keeping its settings."""
    stdout = sys.stdout
    if not isinstance(stdout, io.TextIOWrapper) or isinstance(stdout, QuietStdout):
        return  # replaced by whoever runs the program (a test's capture): theirs to keep
    stdout.flush()
    sys.stdout = QuietStdout(
        stdout.buffer,
        encoding=stdout.encoding,
        errors=stdout.errors,
        newline="\n",
        line_buffering=stdout.line_buffering,
        write_through=stdout.write_through,
    )
