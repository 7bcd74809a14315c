"""The fault harness itself: schedules replay from their seed, the tap reads NSQ's
protocol in any slicing, the tally tells nsqd's losses from a tool's and lying exit
statuses from true ones, and a tool that FINs without writing is caught."""

from __future__ import annotations

import itertools
import os
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from nsqtools.testing import wait_until
from nsqtools.testing.binaries import PACKAGE_ROOT
from nsqtools.testing.faults import FaultKind, Harness, Schedule, TailTarget
from nsqtools.testing.faults.harness import CHANNEL, TOPIC, Target
from nsqtools.testing.faults.runs import Run, ToolRuns
from nsqtools.testing.faults.schedule import Fault
from nsqtools.testing.faults.tally import Tally
from nsqtools.testing.faults.tap import MAGIC, Ledger, _Connection
from nsqtools.testing.faults.targets_pub import PubCountTarget

ALL_KINDS = tuple(FaultKind)


def test_a_seed_replays_its_schedule_and_faults_never_overlap() -> None:
    first = Schedule.random(7, ALL_KINDS, 10.0, 5)
    assert first == Schedule.random(7, ALL_KINDS, 10.0, 5)
    assert first != Schedule.random(8, ALL_KINDS, 10.0, 5)
    for seed in range(200):
        faults = Schedule.random(seed, ALL_KINDS, 8.0, 4).faults
        assert all(fault.at > 0 and fault.ends < 8.0 for fault in faults)
        assert all(one.ends < two.at for one, two in itertools.pairwise(faults))
        stops = [fault for fault in faults if fault.kind is FaultKind.TOOL_STOP]
        assert all(fault.signal in ("SIGINT", "SIGTERM") for fault in stops)
        assert all(0 <= fault.early_delay <= 0.1 for fault in stops)


def _frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">II", len(data) + 4, kind) + data


def _message(message_id: bytes, body: bytes) -> bytes:
    return _frame(2, struct.pack(">QH", 1, 1) + message_id + body)


COMMANDS = (
    MAGIC
    + b"IDENTIFY\n"
    + struct.pack(">I", 9)
    + b'{"a":"\n"}'
    + b"SUB faults harness\nRDY 10\nFIN 0000000000000001\nREQ 0000000000000002 100\n"
)
# A publish whose body holds what looks like a command: the tap must skip it whole.
PUBLISH = b"MPUB faults\n" + struct.pack(">I", 12) + b"\x00\x00\x00\x01\x00\x00\x00\x04FIN "
FRAMES = (
    _frame(0, b'{"max_rdy_count":2500}')
    + _frame(0, b"OK")
    + _message(b"0000000000000001", b"m-1")
    + _message(b"0000000000000002", b"m-2")
    + _frame(0, b"_heartbeat_")
)
PUBLISH_ANSWER = _frame(0, b"OK")


@given(st.lists(st.integers(1, len(FRAMES)), max_size=8))
def test_the_tap_reads_the_protocol_however_the_bytes_are_cut(cuts: list[int]) -> None:
    ledger = Ledger()
    connection = _Connection(ledger)
    for data, direction in (
        (COMMANDS, connection.upstream),
        (FRAMES, connection.downstream),
        (PUBLISH, connection.upstream),
        (PUBLISH_ANSWER, connection.downstream),
    ):
        for piece in _pieces(data, sorted(cuts)):
            direction(piece)
    # m-1 FIN'd: the FIN came first, but it names an id only a delivery maps to a body.
    assert ledger.deliveries == Counter({b"m-1": 1, b"m-2": 1})
    assert ledger.unfinished == {b"0000000000000001", b"0000000000000002"}
    assert len(ledger.progress) == 2  # the FIN, and the MPUB's OK
    ledger.fin(b"0000000000000001")
    assert set(ledger.finished) == {b"m-1"}
    ledger.nsqd_killed()
    assert ledger.at_risk == {b"m-2"} and not ledger.unfinished


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *(cut for cut in cuts if cut < len(data)), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(edges)]


def _run(
    sent: list[str],
    exit_code: int,
    stderr: str = "",
    kept: int = 0,
    early: bool = False,
    number: int = 0,
) -> Run:
    process = subprocess.Popen(["true"])
    process.wait()
    run = Run(number, process, 0.0, Path("out"), Path("err"), sent=sent, exit_code=exit_code)
    run.stderr, run.kept, run.before_handler = stderr, kept, early
    return run


def _tally(**changes: object) -> Tally:
    published = {b"m-1", b"m-2", b"m-3", b"m-4"}
    fields: dict[str, object] = {
        "tool": "nsq_tail",
        "implementation": "ours",
        "schedule": Schedule(1, 1.0, ()),
        "published": published,
        "output": Counter(published),
        "kept": Counter(),
        "finished": set(published),
        "at_risk": set(),
        "seen": set(published),
        "nsqd_killed": False,
        "runs": [],
        "recoveries": [],
    }
    fields.update(changes)
    return Tally(**fields)  # type: ignore[arg-type]


def test_the_tally_tells_nsqds_losses_from_the_tools() -> None:
    tally = _tally(
        output=Counter({b"m-1": 2, b"m-5": 1}),
        kept=Counter({b"m-2": 1}),
        at_risk={b"m-3"},
        seen={b"m-1", b"m-2", b"m-3"},
        nsqd_killed=True,
    )
    # m-3 was in nsqd's memory when it was killed; m-4 never reached the tool.
    assert tally.lost_by_nsqd == {b"m-3", b"m-4"}
    assert not tally.lost
    assert tally.duplicates == 1 and tally.garbage == {b"m-5"}
    # Without a kill, nsqd loses nothing: the same bodies missing are the tool's.
    assert _tally(output=Counter({b"m-1": 1}), nsqd_killed=False).lost == {b"m-2", b"m-3", b"m-4"}


def test_the_tally_says_which_exit_statuses_lie() -> None:
    error = "nsq_to_file: error: no space left on device\n"
    truthful = [
        _run(["SIGTERM"], 0),
        _run(["SIGINT twice"], 0),
        _run(["SIGKILL"], -9),
        _run([], 1, error),
        _run(["SIGTERM"], 1, error, kept=3),
        # Before the program's first line: Python's start, not judged.
        _run(["SIGINT twice"], 1, "Traceback (most recent call last):\n", early=True),
        _run(["SIGTERM"], -15, early=True),
    ]
    lying = [
        _run(["SIGINT twice"], 130),
        _run(["SIGTERM"], -15),
        _run(["SIGTERM"], 0, kept=2),
        _run([], 1),
        _run(["SIGTERM"], 0, "Traceback (most recent call last):\n"),
    ]
    assert not _tally(runs=truthful).run_problems()
    assert len(_tally(runs=lying).run_problems()) == len(lying)


def test_nsq_pub_count_runs_are_held_to_what_they_say_they_made(tmp_path: Path) -> None:
    """All of a run that exits 0 by itself; as many as `interrupted: N of M` says; T of
    `F of T records were not published` (the F in its failed file); of a SIGKILLed run,
    only what the topic holds (allowed, not required)."""
    target = PubCountTarget(messages=8)  # 4 bodies a run
    target.directory = tmp_path
    (tmp_path / "failed-2.txt").write_bytes(b"run2-000003\n")
    not_published = "nsq: error: 1 of 3 records were not published to every nsqd: x (1)\n"
    for run in (
        _run([], 0, number=0),
        _run(["SIGTERM"], 0, "[to_nsq] INFO: interrupted: 2 of 4 published\n", number=1),
        _run([], 1, not_published, number=2),
        _run(["SIGKILL"], -9, number=3),
    ):
        target.run_ended(run)
        assert run.kept == (1 if run.number == 2 else 0)
    target.topic_read = Counter([b"run0-000001", b"run3-000002"])
    made = {(0, 1), (0, 2), (0, 3), (0, 4), (1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2)}
    assert target.published == {b"run%d-%06d" % pair for pair in made}
    assert target.kept() == Counter([b"run2-000003"])


class _FinsWithoutWriting(TailTarget):
    """A consumer that FINs every message and outputs nothing: what the harness is for."""

    def argv(self, implementation: str, run: int) -> list[str]:
        code = (
            f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
            "import trio\n"
            "from nsqtools.config import ClientConfig\n"
            "from nsqtools.consumer import ConsumerOptions, open_consumer\n"
            "async def main():\n"
            f"    async with open_consumer({TOPIC!r}, {CHANNEL!r}, ClientConfig(),"
            f" ConsumerOptions(nsqd_tcp_addresses=[{self.world.address!r}])) as consumer:\n"
            "        async for batch in consumer:\n"
            "            batch.finish()\n"
            "trio.run(main)\n"
        )
        return [sys.executable, "-c", code]


def test_the_harness_catches_a_tool_that_fins_without_writing(tmp_path: Path) -> None:
    target = _FinsWithoutWriting(messages=50)
    tally = Harness(target, Schedule(0, 2.0, ()), tmp_path).run()
    assert tally.lost == tally.fin_unwritten == target.published
    try:
        tally.check()
    except AssertionError as failure:
        assert "LOST 50" in str(failure)
    else:
        raise AssertionError("the harness let a tool lose every message")


# Takes its time to stop, as a Spark job does: the stop is still under way at the next.
_SLOW_STOP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(0)))\n"
    "print('ready', flush=True)\n"
    "signal.pause()\n"
)


def test_a_run_already_stopping_gets_no_second_stop(tmp_path: Path) -> None:
    """The harness's end stops the running tool with SIGTERM: one still stopping from a
    fault is left to end, not told to exit at once (exit 143, judged a lie)."""
    runs = ToolRuns(lambda number: [sys.executable, "-c", _SLOW_STOP], tmp_path)
    run = runs.start()
    wait_until(lambda: run.stdout.read_text() == "ready\n", 10, "the handler")
    runs.send("SIGTERM")
    runs.send("SIGTERM")
    ended = runs.wait()
    assert ended is not None
    assert (ended.sent, ended.exit_code) == (["SIGTERM"], 0)


def test_a_signal_in_a_slow_interpreter_start_is_not_the_tools(tmp_path: Path) -> None:
    """However long the interpreter's own start takes (a loaded machine: site's imports
    took more than half a second in CI), a stop signal before the program caught
    SIGTERM is Python's to handle: not judged (the tally's part:
    test_the_tally_says_which_exit_statuses_lie). Here site imports a sitecustomize that
    sleeps, and the SIGINT comes a second after the start."""
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(5)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    argv = [sys.executable, "-c", "pass"]
    runs = ToolRuns(lambda number: argv, tmp_path / "runs", env=env)
    run = runs.start()
    wait_until(lambda: time.monotonic() - run.started > 1, 5, "a second of start")
    runs.send("SIGINT")
    ended = runs.wait()
    assert ended is not None
    assert (ended.before_handler, ended.exit_code) == (True, 1)
    assert ended.stderr.rstrip().endswith("KeyboardInterrupt")  # as CI saw it


class _EndsByItself(Target):
    name = "ends by itself"
    kinds = ()

    def argv(self, implementation: str, run: int) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(0.2)"]


def test_the_last_run_gets_no_early_stop_left_from_the_schedule(tmp_path: Path) -> None:
    """An early stop signal is for the next start; when the run before it was slow to stop
    until the schedule ended, that start is the last run's, which is to end by itself
    (a CI run once SIGTERMed to_nsq's last run at 28 ms, and nothing was published)."""
    harness = Harness(_EndsByItself(), Schedule(0, 1.0, ()), tmp_path)
    harness.early_stop = Fault(
        FaultKind.TOOL_STOP, 0.5, 0.5, "SIGTERM", doubled=True, early=True, early_delay=0.0
    )
    harness.last_run()
    ended = harness.runs.wait()
    assert ended is not None
    assert (ended.sent, ended.exit_code) == ([], 0)
