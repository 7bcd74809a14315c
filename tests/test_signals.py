"""nsqtools.runtime.signals in processes of their own: the stop, for a blocking program
(run_until_stopped, nsq_stat's) and a trio one (watch_signals); a stop that came before
anyone watched; the same signal twice (GNU timeout's pair) as one stop; a separate
second that exits at once; SIGINT inherited ignored. (Each tool's signals: its tests,
tests/test_tool_signals.py and tests/test_runtime.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nsqtools.runtime.signals import SAME_STOP
from nsqtools.testing import wait_until

ROOT = Path(__file__).resolve().parents[1]
WAIT = 20.0

# Says "caught", then waits for a line: a signal sent then comes before anyone watches.
CATCH = """
import sys
from nsqtools.runtime.signals import catch_stop_signals, run_until_stopped, watch_signals
catch_stop_signals()
print("caught", flush=True)
sys.stdin.readline()
"""

# Waits on stdin in the work, then again while the work unwinds.
BLOCKING = """
def work():
    try:
        print("running", flush=True)
        sys.stdin.readline()
        print("not stopped", flush=True)
    finally:
        print("unwinding", flush=True)
        sys.stdin.readline()
run_until_stopped(work, hangup_stops=True)
print("after the work", flush=True)
"""

# Says "stopping" on the stop, then stops once it reads a line.
TRIO = """
import functools, trio
async def main():
    stopping = trio.Event()
    def stop():
        print("stopping", flush=True)
        stopping.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(watch_signals, stop, before_exit=lambda: print("exiting"))
        )
        print("watching", flush=True)
        await stopping.wait()
        await trio.to_thread.run_sync(sys.stdin.readline)
        nursery.cancel_scope.cancel()
trio.run(main)
print("stopped", flush=True)
"""


@contextmanager
def program(
    source: str, preexec_fn: Callable[[], None] | None = None
) -> Iterator[subprocess.Popen[str]]:
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-c", CATCH + source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": pythonpath},
        preexec_fn=preexec_fn,
    )
    try:
        assert next_line(process) == "caught"
        yield process
    finally:
        process.kill()
        process.communicate()


def next_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def say(process: subprocess.Popen[str], line: str = "") -> None:
    assert process.stdin is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()


def a_second_apart(first_seen: float) -> None:
    """Wait until a signal sent now comes SAME_STOP after the first arrived: a second
    one, not the same one again. `first_seen`: when the program was seen acting on the
    first, so after its handler ran (from before the first was sent, a handler run late
    on a busy machine left the second less than SAME_STOP after it: the same stop)."""
    wait_until(lambda: time.monotonic() > first_seen + SAME_STOP, 2 * SAME_STOP, "SAME_STOP")


def test_the_first_signal_ends_the_work_quietly_and_sighup_is_then_ignored() -> None:
    with program(BLOCKING) as process:
        say(process)
        assert next_line(process) == "running"
        process.send_signal(signal.SIGHUP)
        assert next_line(process) == "unwinding"
        process.send_signal(signal.SIGHUP)
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "after the work\n", "")


def test_a_stop_before_the_work_skips_it() -> None:
    with program(BLOCKING) as process:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "after the work\n", "")


def test_the_same_signal_again_while_unwinding_is_the_same_stop() -> None:
    with program(BLOCKING) as process:
        say(process)
        assert next_line(process) == "running"
        process.send_signal(signal.SIGTERM)
        assert next_line(process) == "unwinding"
        process.send_signal(signal.SIGTERM)  # as GNU timeout sends it: again, to the group
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "after the work\n", "")


def test_a_separate_second_stop_signal_exits_at_once() -> None:
    with program(BLOCKING) as process:
        say(process)
        assert next_line(process) == "running"
        process.send_signal(signal.SIGINT)
        assert next_line(process) == "unwinding"
        a_second_apart(time.monotonic())
        process.send_signal(signal.SIGTERM)
        # stdin stays open until it exits: at its end (communicate closes it) the unwinding
        # would read a line and end by itself, and a busy machine may let it.
        process.wait(timeout=WAIT)
        out, err = process.communicate()
    assert (process.returncode, out, err) == (128 + signal.SIGTERM, "", "")


def test_a_stop_before_the_watch_is_acted_on_as_it_starts() -> None:
    with program(TRIO) as process:
        process.send_signal(signal.SIGINT)
        say(process)
        assert next_line(process) == "stopping"
        assert next_line(process) == "watching"
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "stopped\n", "")


def test_the_same_signal_twice_is_one_stop_for_a_trio_program() -> None:
    with program(TRIO) as process:
        say(process)
        assert next_line(process) == "watching"
        process.send_signal(signal.SIGTERM)
        assert next_line(process) == "stopping"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "stopped\n", "")


def test_a_separate_second_signal_says_what_is_lost_and_exits_at_once() -> None:
    with program(TRIO) as process:
        say(process)
        assert next_line(process) == "watching"
        process.send_signal(signal.SIGINT)
        assert next_line(process) == "stopping"
        a_second_apart(time.monotonic())
        process.send_signal(signal.SIGINT)
        process.wait(timeout=WAIT)  # stdin open till then, as above
        out, err = process.communicate()
    assert (process.returncode, out, err) == (128 + signal.SIGINT, "exiting\n", "")


def test_sigint_inherited_ignored_still_stops() -> None:
    """A script's `tool &` starts it with SIGINT ignored; Go's signal.Notify takes it
    back, and so do we."""
    with program(TRIO, ignore_sigint) as process:
        process.send_signal(signal.SIGINT)
        say(process)
        assert next_line(process) == "stopping"
        # Read here, not by communicate(): it reads the pipe itself, and would miss a
        # line that came with "stopping" and waits in the stdout reader's buffer.
        assert next_line(process) == "watching"
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "stopped\n", "")


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_stop_once_the_work_has_ended_is_too_late_to_stop_anything() -> None:
    with program(BLOCKING + "sys.stdin.readline()\nprint('exiting', flush=True)\n") as process:
        say(process)
        assert next_line(process) == "running"
        say(process)
        assert [next_line(process), next_line(process)] == ["not stopped", "unwinding"]
        say(process)
        assert next_line(process) == "after the work"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "exiting\n", "")


# StopCalls around a main thread asleep in a call no handler interrupts (as nsq archive
# waits on the JVM): a SIGTERM that another thread takes (sent to it alone here; the
# kernel may choose any thread not blocking it) is acted on all the same.
STOP_CALLS = """
import signal, threading, time
from nsqtools.runtime.signals import StopCalls
def signal_this_thread():
    time.sleep(0.1)  # the main thread in readline() by then, most likely; either way
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
with StopCalls(lambda: print("stopping", flush=True)):
    threading.Thread(target=signal_this_thread).start()
    sys.stdin.readline()
print("stopped", flush=True)
"""


def test_a_stop_another_thread_takes_is_acted_on_while_the_main_one_sleeps() -> None:
    with program(STOP_CALLS) as process:
        say(process)
        assert next_line(process) == "stopping"  # the main thread still in readline()
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "stopped\n", "")
