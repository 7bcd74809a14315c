"""stopped_by_signals, the signals of a blocking program (nsq_stat), in a process of its
own: the first stop signal ends the block quietly, a second exits at once, SIGHUP when
asked for stops it too and is ignored once stopping. (The trio tools' signals:
tests/test_runtime.py and each tool's tests.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAIT = 20.0

# Waits on stdin in the block, then again while the block unwinds.
PROGRAM = """
import signal, sys
from nsqtools.runtime.signals import stopped_by_signals
with stopped_by_signals(signal.SIGHUP):
    try:
        print("running", flush=True)
        sys.stdin.readline()
        print("not stopped", flush=True)
    finally:
        print("unwinding", flush=True)
        sys.stdin.readline()
print("after the block", flush=True)
"""


@contextmanager
def program() -> Iterator[subprocess.Popen[str]]:
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": pythonpath},
    )
    try:
        yield process
    finally:
        process.kill()
        process.communicate()


def next_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def test_the_first_signal_ends_the_block_quietly_and_sighup_is_then_ignored() -> None:
    with program() as process:
        assert next_line(process) == "running"
        process.send_signal(signal.SIGHUP)
        assert next_line(process) == "unwinding"
        process.send_signal(signal.SIGHUP)
        out, err = process.communicate("\n", timeout=WAIT)
    assert (process.returncode, out, err) == (0, "after the block\n", "")


def test_a_second_stop_signal_exits_at_once() -> None:
    with program() as process:
        assert next_line(process) == "running"
        process.send_signal(signal.SIGINT)
        assert next_line(process) == "unwinding"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=WAIT)
    assert (process.returncode, out, err) == (128 + signal.SIGTERM, "", "")
