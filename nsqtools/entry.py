"""Console-script entry points. Each program, before anything else:

- gives a standard stream closed at start (`2>&-`) /dev/null, as Go's runtime does;
  else the first file or socket the program opens takes its number, and what is meant
  for stderr goes into a connection to nsqd;
- answers `-version`/`--version` without importing click or anything else;
- if it watches for SIGINT/SIGTERM (every Go tool's, and those subcommands of nsq),
  takes them at once: one that comes while it starts is then remembered, never lost nor
  a traceback (nsqtools.runtime.signals). A command that does not watch them keeps
  Python's defaults: the first signal interrupts it;
- ends quietly with exit 0 once stdout's reader has gone (`nsq topics | head -1`),
  whatever was writing (nsqtools.runtime.closedstdout);
- leaves OpenSSL unloaded until a run uses it, and runs the garbage collector's young
  passes less often (nsqtools.runtime.startup);
- ends, once its command has, as sys.exit would but without the interpreter's teardown
  of every module (tens of milliseconds after trio and click): exit handlers run and
  the standard streams are flushed, then the process exits with the command's status;

then hands over to its command module.

Start-up is part of the experience: `nsq_tail --version` should cost an interpreter
start and no more. So this module and what it imports before the signals are taken
load nothing the interpreter has not loaded already (no typing, importlib or
collections).
"""

from __future__ import annotations

import atexit
import os
import sys

from nsqtools import version_line
from nsqtools.runtime.closedstdout import quiet_stdout
from nsqtools.runtime.signals import catch_stop_signals

TYPE_CHECKING = False  # not typing's: importing it costs ~5 ms of every start
if TYPE_CHECKING:
    from typing import NoReturn

VERSION_FLAGS = (["-version"], ["--version"])
# The standard streams: fd, mode, name in sys.
STDIO = ((0, "r", "stdin"), (1, "w", "stdout"), (2, "w", "stderr"))
# nsq's subcommands that watch the stop signals: the Go tools', bench and archive's jobs.
NSQ_WATCHING = frozenset(
    {"pub", "stat", "tail", "to-file", "to-http", "to-nsq", "bench", "archive"}
)


class EntryPoint:
    """A program: `program` run by the `main()` of `module`."""

    def __init__(self, program: str, module: str) -> None:
        self.program = program
        self.module = module

    def __call__(self) -> None:
        open_closed_stdio()
        quiet_stdout()
        if sys.argv[1:] in VERSION_FLAGS:
            sys.stdout.write(version_line(self.program) + "\n")
            return
        if self.watches_signals(sys.argv[1:]):
            catch_stop_signals()
        import importlib

        from nsqtools.runtime.startup import prepare_process

        prepare_process()
        try:
            importlib.import_module(self.module).main()
        except SystemExit as end:
            exit_without_teardown(end.code)
        exit_without_teardown(0)

    def watches_signals(self, args: list[str]) -> bool:
        """Every Go tool does; nsq when its subcommand does."""
        return self.program != "nsq" or (bool(args) and args[0] in NSQ_WATCHING)


def exit_without_teardown(code: object) -> NoReturn:
    """End as `sys.exit(code)` would once the command has ended, less the teardown of
    every module and object, which nothing needs once the exit handlers have run."""
    if code is None or isinstance(code, int):
        status = code or 0
    else:  # a message, as sys.exit prints it
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()  # logging's flush, temporary files, the signals' last word
    import contextlib  # not loaded at start

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, SystemExit):  # a closed pipe or file
            stream.flush()
    os._exit(status)


def open_closed_stdio() -> None:
    """Open /dev/null as each standard stream that was closed at start."""
    for fd, mode, name in STDIO:
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            # Python found it closed and left sys.stdin (or stdout, stderr) None. The new
            # one lives as long as the program, as the one Python makes does.
            stream = open(fd, mode, errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)


nsq = EntryPoint("nsq", "nsqtools.commands")
nsq_tail = EntryPoint("nsq_tail", "nsqtools.commands.nsq_tail")
to_nsq = EntryPoint("to_nsq", "nsqtools.commands.to_nsq")
nsq_to_file = EntryPoint("nsq_to_file", "nsqtools.commands.nsq_to_file")
nsq_to_nsq = EntryPoint("nsq_to_nsq", "nsqtools.commands.nsq_to_nsq")
nsq_to_http = EntryPoint("nsq_to_http", "nsqtools.commands.nsq_to_http")
nsq_stat = EntryPoint("nsq_stat", "nsqtools.commands.nsq_stat")
