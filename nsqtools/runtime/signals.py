"""Signals, in one place for every tool: the first SIGINT/SIGTERM stops cleanly (each
tool says what that means), a second exits at once, SIGHUP goes to whoever wants it.

trio delivers a signal to a task; a signal that arrives again before the first was
handled is delivered once, so "second" means a second one after the first was handled.
A blocking program (nsq_stat) has stopped_by_signals instead; trio is imported where
used, so that such a program loads none.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignal(BaseException):
    """The first stop signal, raised in the main thread inside stopped_by_signals().

    A BaseException, as KeyboardInterrupt is: no `except Exception` on its way (a
    logging handler's, say) takes it for an error to report."""


@contextmanager
def stop_signals(*more: signal.Signals) -> Iterator[AsyncIterator[int]]:
    """SIGINT and SIGTERM (and any more given), as trio delivers them.

    Ignored once the block ends: a signal that came as the work ended and was not
    handled would otherwise be raised again with the default disposition, killing a
    process that has done its work (SIGTERM) or ending it in a traceback (SIGINT).
    """
    import trio

    wanted = (*STOP_SIGNALS, *more)
    for signum in wanted:
        signal.signal(signum, signal.SIG_IGN)  # what trio restores when the block ends
    with trio.open_signal_receiver(*wanted) as signals:
        yield signals


async def watch_signals(
    stop: Callable[[], None],
    *,
    before_exit: Callable[[], None] | None = None,
    hangup: Callable[[], None] | None = None,
) -> None:
    """Run until cancelled: the first SIGINT/SIGTERM calls stop(); a second calls
    before_exit() (say what is lost, in a line), then exits at once with 128+signal.
    SIGHUP, when hangup is given, calls it each time."""
    extra = (signal.SIGHUP,) if hangup is not None else ()
    with stop_signals(*extra) as signals:
        stopping = False
        async for signum in signals:
            if signum == signal.SIGHUP and hangup is not None:
                hangup()
            elif not stopping:
                stopping = True
                stop()
            else:
                if before_exit is not None:
                    before_exit()
                sys.stderr.flush()
                os._exit(128 + signum)


@contextmanager
def stopped_by_signals(*more: signal.Signals) -> Iterator[None]:
    """For blocking code: the first SIGINT/SIGTERM (or one of `more`) raises StopSignal in
    the main thread, wherever it runs or waits (a sleep, a thread's join, a write), and
    the block ends there, quietly: its own with-blocks unwind, the code after it runs.
    While they unwind, a second SIGINT/SIGTERM exits at once with 128+signal. Ignored
    once the block ends, as stop_signals() leaves them."""
    wanted = (*STOP_SIGNALS, *more)
    stopping = ended = False

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if ended:
            return
        if not stopping:
            stopping = True
            raise StopSignal
        if signum in STOP_SIGNALS:
            sys.stderr.flush()
            os._exit(128 + signum)

    for signum in wanted:
        signal.signal(signum, handle)
    try:
        try:
            yield
        finally:  # a signal from here on is too late to stop anything: ignored
            ended = True
    except StopSignal:
        pass
    finally:
        for signum in wanted:
            signal.signal(signum, signal.SIG_IGN)
