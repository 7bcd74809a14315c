"""Signals, in one place for every tool: the first SIGINT/SIGTERM stops cleanly (each
tool says what that means), a second exits at once, SIGHUP goes to whoever wants it.

One handler takes SIGINT and SIGTERM from a program's first line to its end (the entry
point calls catch_stop_signals() before any slow import) and sorts each as it arrives:

- the first is the stop. Whoever watches acts on it (watch_signals for the trio tools,
  run_until_stopped for a blocking one, nsq_stat; StopCalls for work another thread
  can stop, nsq archive's Spark jobs); one that came before anyone watched is
  remembered and acted on as soon as someone does.
- one within SAME_STOP of the first is that stop again: GNU timeout signals the tool
  and then its process group, a supervisor may signal a process and its group.
- a later one exits at once with 128+signal, once the watcher has said what is lost.

It is installed even over a signal inherited ignored (a script's `tool &` ignores
SIGINT), as Go's signal.Notify does. Once the work is done a stop has nothing left to
stop; a later, separate one still exits at once. Python puts the default dispositions
back as it finalizes, so the last atexit callback ignores both signals: a process that
has done its work is not then killed by one.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

# This module is imported first thing by every program, so it imports only what the
# interpreter has loaded already: the signal module's C half (`signal` itself first
# imports enum, ~6 ms in which a SIGINT would end in a KeyboardInterrupt traceback), and
# no typing (~5 ms; the type checker knows TYPE_CHECKING by its name).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Callable
    from types import FrameType

    import trio
else:
    import _signal

STOP_SIGNALS = (_signal.SIGINT, _signal.SIGTERM)
# A stop signal this soon after the first is the same stop sent again, not a second that
# exits at once. Sending the same signal twice takes microseconds, or a few milliseconds
# on a busy machine; a person who means "now" sends it again once the first is seen at
# work, well after a second.
SAME_STOP = 1.0


class StopSignal(BaseException):
    """The first stop signal, raised in the main thread inside run_until_stopped().

    A BaseException, as KeyboardInterrupt is: no `except Exception` on its way (a
    logging handler's, say) takes it for an error to report."""


class _Stops:
    """The stop signals the process has received, sorted by the handler as they come."""

    def __init__(self) -> None:
        self.first_at: float | None = None  # when the stop came (time.monotonic())
        self.pending = False  # it came, and no watcher has acted on it yet
        self.on_stop: Callable[[], None] | None = None  # the watcher's, while one watches
        self.on_exit: Callable[[int], None] | None = None
        self.for_life = False  # installed by catch_stop_signals(): never given back

    def arrive(self, signum: int, frame: FrameType | None) -> None:
        """The handler. Re-entered if a signal comes while it runs: each step leaves a
        state the next arrival reads rightly."""
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
            self.pending = True
            if self.on_stop is not None:
                self.on_stop()
        elif signum in STOP_SIGNALS and now - self.first_at >= SAME_STOP:
            (self.on_exit or exit_at_once)(signum)

    def take_pending(self) -> bool:
        """True once for a stop that came: the watcher acts on it now."""
        pending, self.pending = self.pending, False
        return pending

    def watch(self, on_stop: Callable[[], None], on_exit: Callable[[int], None]) -> bool:
        """Make on_stop and on_exit act on what comes; True if a stop came before."""
        if self.first_at is not None and not self.pending:
            self.first_at = None  # the stop of a run that has ended: this is a new run
        self.on_stop, self.on_exit = on_stop, on_exit
        return self.take_pending()

    def unwatch(self) -> None:
        self.on_stop = self.on_exit = None


_stops = _Stops()


def catch_stop_signals() -> None:
    """From now to the program's end, SIGINT and SIGTERM are sorted by the handler: the
    entry point's first act, so that no stop signal is lost or ends in a traceback."""
    for signum in STOP_SIGNALS:
        _signal.signal(signum, _stops.arrive)
    _stops.for_life = True
    atexit.register(_ignore_stop_signals)  # registered first: called last


def _ignore_stop_signals() -> None:
    for signum in STOP_SIGNALS:
        _signal.signal(signum, _signal.SIG_IGN)


def _take_stop_signals() -> Callable[[], None]:
    """Install the handler unless the program has for its life (a library caller, a
    test); return what gives the signals back."""
    if _stops.for_life:
        return lambda: None
    previous = {signum: _signal.signal(signum, _stops.arrive) for signum in STOP_SIGNALS}

    def give_back() -> None:
        for signum, handler in previous.items():
            _signal.signal(signum, handler)

    return give_back


def exit_at_once(signum: int) -> None:
    """End the process now with 128+signum, as a second stop signal asks."""
    # sys.stderr itself, not a console: this may run in the signal handler, in the
    # middle of whatever the program was writing (a console's lock held, its buffer
    # half full); the flush hands on what the watcher said last.
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nothing to say it on
        pass
    os._exit(128 + signum)


async def watch_signals(
    stop: Callable[[], None],
    *,
    before_exit: Callable[[], None] | None = None,
    hangup: Callable[[], None] | None = None,
    task_status: trio.TaskStatus[None] | None = None,
) -> None:
    """Run until cancelled: the stop calls stop() (a stop that came before at once,
    before `nursery.start` returns); a second calls before_exit() (say what is lost, in
    a line), then exits at once with 128+signal. SIGHUP, when hangup is given, calls it
    each time (ignored once the watch ends). Runs in the main thread's trio run."""
    import contextlib

    import trio

    token = trio.lowlevel.current_trio_token()
    send, receive = trio.open_memory_channel[int | None](float("inf"))

    def tell(signum: int | None) -> None:
        """From the handler, to this task: None for the stop, else the signal to exit with
        or SIGHUP."""
        with contextlib.suppress(trio.RunFinishedError):  # over: nothing left to act on
            token.run_sync_soon(send.send_nowait, signum, idempotent=True)

    give_back = _take_stop_signals()
    if hangup is not None:
        _signal.signal(_signal.SIGHUP, lambda signum, frame: tell(signum))
    try:
        if _stops.watch(lambda: tell(None), tell):
            stop()
        if task_status is not None:
            task_status.started()
        async for signum in receive:
            if signum == _signal.SIGHUP and hangup is not None:
                hangup()
            elif signum is None:
                if _stops.take_pending():
                    stop()
            else:
                if before_exit is not None:
                    before_exit()
                exit_at_once(signum)
    finally:
        _stops.unwatch()
        give_back()
        if hangup is not None:
            _signal.signal(_signal.SIGHUP, _signal.SIG_IGN)


def run_until_stopped(work: Callable[[], None], *, hangup_stops: bool = False) -> None:
    """Run blocking work() in the main thread until it returns or the stop comes
    (SIGINT/SIGTERM, and SIGHUP with hangup_stops): the stop raises StopSignal wherever
    work() runs or waits (a sleep, a thread's join, a write) and work() unwinds quietly,
    its with-blocks ending. While they unwind, a second SIGINT/SIGTERM exits at once with
    128+signal. A stop that came before (from the program's start) skips work(). Once
    work() has ended, a stop is too late to stop anything and SIGHUP is ignored."""
    ended = False

    def stop() -> None:
        if not ended and _stops.take_pending():
            raise StopSignal

    give_back = _take_stop_signals()
    if hangup_stops:
        _signal.signal(_signal.SIGHUP, _stops.arrive)
    try:
        try:
            if not _stops.watch(stop, exit_at_once):
                work()
        finally:
            ended = True
    except StopSignal:
        pass
    finally:
        _stops.unwatch()
        give_back()
        if hangup_stops:
            _signal.signal(_signal.SIGHUP, _signal.SIG_IGN)


class StopCalls:
    """For the body of the block, the stop calls on_stop() (it must not block; it may
    start a thread that stops the work, as cancelling a Spark job does), at once if the
    stop came before; a second exits at once with 128+signal.

    The body may wait in a call that no signal interrupts. Python runs a handler in the
    main thread only, and the kernel gives a process's signal to any thread not blocking
    it (PySpark's accumulator server, a progress bar's): the main thread, asleep in a
    call to the JVM, would act on it only once the job had ended. So for the block the
    signals are sorted by a thread of ours: Python's own handler writes each signal's
    number to a wakeup fd, whichever thread took it, and that thread reads them. (No
    signal mask: the JVM started meanwhile would inherit it.)"""

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self.on_stop = on_stop
        self._give_back: Callable[[], None] = lambda: None
        self._wakeup: tuple[int, int] = (-1, -1)  # the pipe the handler writes to
        self._previous_wakeup = -1

    def _stop(self) -> None:
        if _stops.take_pending():
            self.on_stop()

    def _sort(self, read_end: int) -> None:
        """Each stop signal's number, as the wakeup fd gives it, to the sorting."""
        while data := os.read(read_end, 64):  # ends when __exit__ closes the write end
            for signum in data:
                if signum in STOP_SIGNALS:
                    _stops.arrive(signum, None)
        os.close(read_end)

    def __enter__(self) -> None:
        import threading

        previous = {signum: _signal.signal(signum, _ignore) for signum in STOP_SIGNALS}

        def give_back() -> None:
            for signum, handler in previous.items():
                _signal.signal(signum, handler)

        self._give_back = give_back
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # the handler never waits on the pipe
        self._wakeup = (read_end, write_end)
        self._previous_wakeup = _signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(
            target=self._sort, args=(read_end,), name="stop-signals", daemon=True
        ).start()
        if _stops.watch(self._stop, exit_at_once):
            self.on_stop()

    def __exit__(self, *exc_info: object) -> None:
        _stops.unwatch()
        # The handlers first: a signal between the two steps is then sorted twice at
        # once, which is the same stop, rather than by no one.
        self._give_back()
        _signal.set_wakeup_fd(self._previous_wakeup)
        os.close(self._wakeup[1])


def _ignore(signum: int, frame: FrameType | None) -> None:
    """StopCalls' Python handler: the signal is sorted from the wakeup fd instead."""
