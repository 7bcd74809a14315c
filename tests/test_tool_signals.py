"""Every long-running tool stopped by signals, run as a user runs it (our tool in a
process of its own, real nsqd), at any moment:

- a SIGINT or SIGTERM a few ms to 200 ms after start, while it imports its modules,
  once it is connected, and as it ends: exit 0, no traceback, nothing lost (what it did
  not output is back in nsqd's channel; what to_nsq did not publish is still in its
  input). Only before the program's first line runs (the interpreter's own start) has
  a signal Python's default effect: the process ends, having done nothing;
- GNU timeout around each tool, which sends its signal to the tool and then to its
  process group: one stop, exit 0, no open-file marker nor empty .gz left behind;
- SIGINT inherited ignored (a script's `tool &`): it stops the tool all the same;
- to_nsq --rate: what the rate held back when the signal came is published too.

(runtime.signals itself: tests/test_signals.py.)
"""

from __future__ import annotations

import array
import fcntl
import gzip
import os
import signal
import subprocess
import termios
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from nsqtools.runtime.signals import SAME_STOP
from nsqtools.testing import Nsqd, our_tool, wait_until

TOPIC, CHANNEL = "in", "sig"
MESSAGES = 200
WAIT = 30.0
STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM]
SIGNAL_NAMES = ["SIGINT", "SIGTERM"]
# Seconds after start; then while it imports (its first extension module is loaded);
# then once it is connected.
MOMENTS: list[float | str] = [0.003, 0.02, 0.05, 0.1, 0.2, "importing", "connected"]


@dataclass(frozen=True)
class Tool:
    """A tool as these tests run it: its arguments, and how many messages a run output
    (into the run's own folder, or its own topic)."""

    program: str
    arguments: Callable[[Nsqd, Path], list[str]]
    output: Callable[[Nsqd, Path], int]


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def archived(folder: Path) -> int:
    """Messages in nsq_to_file's finished files (gzipped or not) under folder."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            data = path.read_bytes()
            total += (gzip.decompress(data) if path.suffix == ".gz" else data).count(b"\n")
    return total


def topic_depth(nsqd: Nsqd, topic: str) -> int:
    try:
        return nsqd.topic_depth(topic)
    except KeyError:  # never published to
        return 0


def relayed_topic(folder: Path) -> str:
    return f"out-{folder.name}"


def consumer(nsqd: Nsqd) -> list[str]:
    return [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", f"--channel={CHANNEL}"]


CONSUMERS = {
    "nsq_tail": Tool(
        "nsq_tail",
        lambda nsqd, folder: consumer(nsqd),
        lambda nsqd, folder: lines(folder / "stdout"),
    ),
    "nsq_to_file": Tool(
        "nsq_to_file",
        lambda nsqd, folder: [*consumer(nsqd), f"--output-dir={folder / 'out'}"],
        lambda nsqd, folder: archived(folder / "out"),
    ),
    "nsq_to_nsq": Tool(
        "nsq_to_nsq",
        lambda nsqd, folder: [
            *consumer(nsqd),
            f"--destination-nsqd-tcp-address={nsqd.tcp_address}",
            f"--destination-topic={relayed_topic(folder)}",
        ],
        lambda nsqd, folder: topic_depth(nsqd, relayed_topic(folder)),
    ),
    "nsq_to_http": Tool(
        "nsq_to_http",
        lambda nsqd, folder: [
            *consumer(nsqd),
            f"--post=http://{nsqd.http_address}/pub?topic={relayed_topic(folder)}",
        ],
        lambda nsqd, folder: topic_depth(nsqd, relayed_topic(folder)),
    ),
}  # fmt: skip
TO_NSQ = Tool(
    "to_nsq",
    lambda nsqd, folder: [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={folder.name}"],
    lambda nsqd, folder: topic_depth(nsqd, folder.name),
)
NSQ_STAT = Tool(
    "nsq_stat",
    lambda nsqd, folder: [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}",
                          "--interval=100ms"],
    lambda nsqd, folder: 0,
)  # fmt: skip
TOOLS = {**CONSUMERS, "to_nsq": TO_NSQ, "nsq_stat": NSQ_STAT}


def with_arguments(tool: Tool, *more: str) -> Tool:
    return replace(tool, arguments=lambda nsqd, folder: [*tool.arguments(nsqd, folder), *more])


def records(count: int) -> bytes:
    return b"".join(b"r%03d\n" % index for index in range(count))


@dataclass
class Started:
    """One run of a tool: its process, folder, and for to_nsq the pipe it reads."""

    tool: Tool
    nsqd: Nsqd
    folder: Path
    process: subprocess.Popen[bytes]
    input_copy: int | None  # to_nsq's input: our copy of the pipe's read end
    input_end: int | None  # and its write end (closed: end of input)
    input_records: int

    def give(self, data: bytes) -> None:
        assert self.input_end is not None
        os.write(self.input_end, data)
        self.input_records += data.count(b"\n")

    def end_input(self) -> None:
        assert self.input_end is not None
        os.close(self.input_end)
        self.input_end = None

    def unread_bytes(self) -> int:
        assert self.input_copy is not None
        count = array.array("i", [0])
        fcntl.ioctl(self.input_copy, termios.FIONREAD, count)
        return count[0]

    @property
    def stderr(self) -> str:
        return (self.folder / "stderr").read_text(errors="replace")

    def output(self) -> int:
        return self.tool.output(self.nsqd, self.folder)

    def unread_records(self) -> int:
        """What to_nsq left in its input."""
        assert self.input_copy is not None
        os.set_blocking(self.input_copy, False)
        left = b""
        while True:
            try:
                chunk = os.read(self.input_copy, 65536)
            except BlockingIOError:
                return left.count(b"\n")
            if not chunk:
                return left.count(b"\n")
            left += chunk

    def connected(self) -> bool:
        if self.tool.program == "to_nsq":
            return self.output() == self.input_records
        if self.tool.program == "nsq_stat":
            return (self.folder / "stdout").stat().st_size > 0
        return bool(self.nsqd.channel_stats(TOPIC, CHANNEL).clients)


@contextmanager
def started(
    tool: Tool,
    nsqd: Nsqd,
    folder: Path,
    *,
    wrapper: tuple[str, ...] = (),
    ignore_sigint: bool = False,
) -> Iterator[Started]:
    """The tool running (to_nsq reading a pipe of 100 records that stays open), stdout
    and stderr in folder; killed at the end if it still runs."""
    folder.mkdir()
    read_end = write_end = copy = None
    if tool.program == "to_nsq":
        read_end, write_end = os.pipe()
        copy = os.dup(read_end)
    with (folder / "stdout").open("wb") as stdout, (folder / "stderr").open("wb") as stderr:
        process = subprocess.Popen(
            [*wrapper, *our_tool(tool.program), *tool.arguments(nsqd, folder)],
            stdin=read_end if read_end is not None else subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            preexec_fn=sigint_ignored if ignore_sigint else sigint_default,
        )
    if read_end is not None:
        os.close(read_end)
    run = Started(tool, nsqd, folder, process, copy, write_end, 0)
    try:
        if write_end is not None:
            run.give(records(100))
        yield run
    finally:
        process.kill()
        process.wait()
        for fd in (run.input_end, copy):
            if fd is not None:
                os.close(fd)


def sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def sigint_default() -> None:
    """SIGINT as a terminal's program gets it, whatever pytest inherited: a shell's
    `cmd &` without job control (a CI script's) starts it with SIGINT ignored, and a
    SIGINT sent before the tool takes the signals would then be ignored, rightly."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_mask(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"\n{field}:")[1].split()[0], 16)


def ours_handles_sigterm(pid: int) -> bool:
    """Our handler is in place (Python itself never catches SIGTERM), or our last
    atexit callback ignores it."""
    try:
        handled = signal_mask(pid, "SigCgt") | signal_mask(pid, "SigIgn")
    except (FileNotFoundError, IndexError):  # ended already
        return True
    return bool(handled & 1 << (signal.SIGTERM - 1))


def importing(pid: int) -> bool:
    """The program imports its modules: the interpreter's start loads no extension
    module, our tools' imports soon do."""
    try:
        return "/lib-dynload/" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True


def reach(run: Started, moment: float | str) -> None:
    if moment == "importing":
        wait_until(lambda: importing(run.process.pid), WAIT, "the tool to import its modules")
    elif moment == "connected":
        wait_until(run.connected, WAIT, "the tool to connect")
    else:
        assert isinstance(moment, float)
        time.sleep(moment)  # the moment under test, not a wait for something


def channel_settled(nsqd: Nsqd) -> int:
    """The channel's depth once nothing is in flight (nsqd handles the requeues of a
    tool that ended as it reads them)."""
    wait_until(lambda: nsqd.channel_stats(TOPIC, CHANNEL).in_flight_count == 0, WAIT, "requeues")
    return nsqd.channel_stats(TOPIC, CHANNEL).depth


_IGNORED_INTERRUPT_END = "\nKeyboardInterrupt\n"


def _swallowed_interrupt(stderr: str) -> bool:
    """CPython's report of a KeyboardInterrupt raised where it cannot propagate (a
    weakref callback of the import machinery), the interpreter then going on: what a
    SIGINT before our handler may give, as the default handler's own doing."""
    return stderr.startswith("Exception ignored in") and _IGNORED_INTERRUPT_END in stderr


def _stop_again_if_ignored(run: Started, signum: int) -> None:
    """After a SIGINT CPython reported and dropped, a tool that runs until stopped goes
    on as if none came: once its handler is in place, a second one (a user's second
    Ctrl-C) must stop it."""
    pid = run.process.pid

    def ended_or_ignored() -> bool:
        if run.process.poll() is not None:
            return True
        return _swallowed_interrupt(run.stderr) and ours_handles_sigterm(pid)

    wait_until(ended_or_ignored, WAIT, "the tool to end, or to go on after the SIGINT dropped")
    if run.process.poll() is None:
        run.process.send_signal(signum)


def check_stop(run: Started, signum: int, strict: bool, before: int) -> None:
    """Exit 0 without a traceback (strict), or, for a signal sent before our handler was
    seen in place, Python's default (or ours: it may have come in between); and nothing
    lost either way."""
    if not strict and signum == signal.SIGINT:
        _stop_again_if_ignored(run, signum)
    run.process.wait(WAIT)
    code, stderr = run.process.returncode, run.stderr
    if not strict and code == 0 and _swallowed_interrupt(stderr):
        # Python's default handler's KeyboardInterrupt, raised in a callback, ignored;
        # what follows the report is the tool's own clean stop.
        assert "Traceback" not in stderr.split(_IGNORED_INTERRUPT_END, 1)[1], stderr
    elif strict or code == 0:
        assert (code, "Traceback" not in stderr) == (0, True), stderr
    else:  # the interpreter's start: killed by the signal, or its own KeyboardInterrupt
        interrupted = signum == signal.SIGINT and "KeyboardInterrupt" in stderr
        assert code == -signum or (interrupted and code == 1), (code, stderr)
        assert run.output() == 0
    if run.tool.program == "to_nsq":
        assert run.output() + run.unread_records() == run.input_records
    elif run.tool.program != "nsq_stat":
        assert channel_settled(run.nsqd) + run.output() == before


@pytest.fixture
def published(nsqd: Nsqd) -> Nsqd:
    """MESSAGES waiting in the channel the consuming tools read."""
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, [b"m%04d" % index for index in range(MESSAGES)])
    return nsqd


@pytest.mark.slow
@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=SIGNAL_NAMES)
@pytest.mark.parametrize("name", list(TOOLS))
def test_a_signal_at_any_early_moment_stops_cleanly(
    published: Nsqd, tmp_path: Path, name: str, signum: signal.Signals
) -> None:
    for index, moment in enumerate(MOMENTS):
        before = channel_settled(published)
        with started(TOOLS[name], published, tmp_path / f"run{index}") as run:
            reach(run, moment)
            strict = ours_handles_sigterm(run.process.pid)
            if isinstance(moment, str):
                assert strict, f"{moment}: the stop signals are not ours yet"
            run.process.send_signal(signum)
            check_stop(run, signum, strict, before)


def archive_leftovers(folder: Path) -> list[Path]:
    """What a clean stop of nsq_to_file never leaves: an open-file marker, an empty .gz,
    a file in its work dir."""
    markers = [path for path in folder.rglob(".nsq_to_file-open/*")]
    empty = [path for path in folder.rglob("*.gz") if path.stat().st_size == 0]
    work = [path for path in (folder / "work").glob("*") if path.is_file()]
    return markers + empty + work


TO_FILE = CONSUMERS["nsq_to_file"]
TIMED = {
    **CONSUMERS,
    "nsq_to_file --gzip": with_arguments(TO_FILE, "--gzip"),
    "to_nsq": TO_NSQ,
    "nsq_stat": NSQ_STAT,
}


def at_work(run: Started, before: int) -> bool:
    """Connected, and (a consumer) holding or done with some messages."""
    if not run.connected():
        return False
    return run.tool.program in ("to_nsq", "nsq_stat") or (
        run.nsqd.channel_stats(TOPIC, CHANNEL).depth < before
    )


@pytest.mark.parametrize("name", [*TIMED, "nsq_to_file --work-dir"])
def test_gnu_timeouts_two_signals_are_one_stop(published: Nsqd, tmp_path: Path, name: str) -> None:
    """timeout, signalled (as when its time is up), sends the signal to the tool, then
    to its process group, which the tool is in: a tool that had seen the first could
    take the second for one that exits at once (130 or 143, nsq_to_file's open-file
    marker left, once an empty .gz). It passes the tool's exit status on."""
    folder = tmp_path / "run"
    tool = TIMED[name] if name in TIMED else with_arguments(TO_FILE, f"--work-dir={folder}/work")
    before = channel_settled(published)
    with started(tool, published, folder, wrapper=("timeout", "60")) as run:
        wait_until(lambda: at_work(run, before), WAIT, "the tool at work")
        run.process.send_signal(signal.SIGTERM)
        check_stop(run, signal.SIGTERM, True, before)
    assert archive_leftovers(folder) == []


def test_gnu_timeout_when_its_time_is_up(published: Nsqd, tmp_path: Path) -> None:
    """The cron job's way: `timeout 3 nsq_to_file --gzip ...` (--preserve-status: the
    tool's exit status rather than timeout's 124)."""
    before = channel_settled(published)
    tool = with_arguments(TO_FILE, "--gzip")
    wrapper = ("timeout", "--preserve-status", "3")
    with started(tool, published, tmp_path / "run", wrapper=wrapper) as run:
        check_stop(run, signal.SIGTERM, True, before)
    assert archive_leftovers(tmp_path / "run") == []


def test_to_nsq_takes_the_same_signal_again_while_stopping_for_the_same_stop(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    """GNU timeout's pair on a busy machine: the second comes once the first is seen at
    work (nsqd frozen: to_nsq waits for its answers)."""
    with started(TO_NSQ, nsqd, tmp_path / "run") as run:
        wait_until(run.connected, WAIT, "the first records published")
        with nsqd.frozen():
            run.give(records(100))
            wait_until(lambda: run.unread_bytes() == 0, WAIT, "to_nsq to read them")
            first = time.monotonic()
            run.process.send_signal(signal.SIGTERM)
            wait_until(lambda: "stopping:" in run.stderr, WAIT, "the first signal at work")
            run.process.send_signal(signal.SIGTERM)
            assert time.monotonic() - first < SAME_STOP, "the test itself stalled"
        check_stop(run, signal.SIGTERM, True, 0)
    assert run.output() == 200


@pytest.mark.parametrize("name", list(TOOLS))
def test_sigint_inherited_ignored_stops_the_tool(
    published: Nsqd, tmp_path: Path, name: str
) -> None:
    """A script's `tool &` starts it with SIGINT ignored; Go's signal.Notify takes it
    back (the Go tool stops), and so do we, from our first line on."""
    for moment in ("importing", "connected"):
        before = channel_settled(published)
        with started(TOOLS[name], published, tmp_path / moment, ignore_sigint=True) as run:
            reach(run, moment)
            assert ours_handles_sigterm(run.process.pid)
            run.process.send_signal(signal.SIGINT)
            check_stop(run, signal.SIGINT, True, before)


def test_to_nsq_rate_publishes_what_it_held_back_on_the_first_signal(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    """100 records read in one go, --rate=10: the signal comes while most wait for the
    rate; the first signal publishes what was read (at once: the rate paces reading)."""
    with started(with_arguments(TO_NSQ, "--rate=10"), nsqd, tmp_path / "run") as run:
        wait_until(lambda: run.output() >= 5, WAIT, "the rate at work")
        run.process.send_signal(signal.SIGINT)
        check_stop(run, signal.SIGINT, True, 0)
        assert (run.output(), run.unread_records()) == (100, 0)


SWEPT = {
    "to_nsq": TO_NSQ,
    "nsq_tail -n": with_arguments(CONSUMERS["nsq_tail"], "-n", "20"),
    "nsq_stat --count": with_arguments(NSQ_STAT, "--count=3"),
}


@pytest.mark.slow
@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=SIGNAL_NAMES)
@pytest.mark.parametrize("name", list(SWEPT))
def test_a_signal_at_any_moment_of_a_short_run_never_ends_in_a_traceback(
    published: Nsqd, tmp_path: Path, name: str, signum: signal.Signals
) -> None:
    """Runs that end by themselves (to_nsq's input ends, -n, --count), each given one
    signal at a later moment, up to after it has ended: starting, running, stopping,
    exiting."""
    for step in range(15):
        before = channel_settled(published)
        with started(SWEPT[name], published, tmp_path / f"run{step}") as run:
            if run.input_end is not None:
                run.end_input()
            time.sleep(0.1 * step)  # the moment under test, not a wait for something
            strict = ours_handles_sigterm(run.process.pid)
            run.process.send_signal(signum)
            check_stop(run, signum, strict, before)
