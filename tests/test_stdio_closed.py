"""Each tool started with stdin, stdout or stderr closed (`<&-`, `>&-`, `2>&-`), side by
side with Go's.

Go's runtime (since Go 1.22; these binaries are built with a later Go) opens /dev/null
for any of fds 0, 1 and 2 closed at start, so Go's tools, measured here:
- to_nsq with stdin closed reads nothing, publishes nothing, exits 0; with stdout or
  stderr closed publishes its input and exits 0;
- nsq_tail -n, nsq_to_file, nsq_to_nsq, nsq_to_http and nsq_stat --count consume (or
  poll) as usual and exit 0 (on SIGTERM for the ones that run until stopped); what
  they would print on a closed stdout or stderr goes nowhere.
Ours must do the same. Before, the closed descriptor's number went to the first file or
socket ours opened, or a write to it failed: to_nsq with stderr closed published
nothing and exited 1, with stdin closed said `[Errno 22]`; nsq_tail with stdout closed
hung; nsq_stat said `[Errno 9]`; nsq_to_file and nsq_to_http with stderr closed never
FIN'd or exited 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, find_binary, our_tool, wait_until

WAIT = 30.0
STREAMS = {"stdin": 0, "stdout": 1, "stderr": 2}


@dataclass(frozen=True)
class Case:
    """A tool's arguments for a run named `name`, what it is given beforehand, whether
    it runs until stopped, and the run's effect to compare (published, output)."""

    tool: str
    arguments: Callable[[Nsqd, str, Path], list[str]]
    effect: Callable[[Nsqd, str, Path, bytes], int]
    runs_until_stopped: bool = False


def depth(nsqd: Nsqd, topic: str) -> int:
    try:
        return nsqd.topic_depth(topic)
    except KeyError:  # never published to
        return 0


def archived(folder: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in folder.glob("*.log"))


def consuming(nsqd: Nsqd, name: str) -> list[str]:
    return [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={name}", "--channel=c"]


CASES = {
    "to_nsq": Case(
        "to_nsq",
        lambda nsqd, name, out: [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={name}"],
        lambda nsqd, name, out, stdout: depth(nsqd, name),
    ),
    "nsq_tail": Case(
        "nsq_tail",
        lambda nsqd, name, out: [*consuming(nsqd, name), "-n", "3"],
        lambda nsqd, name, out, stdout: len(stdout),
    ),
    "nsq_to_file": Case(
        "nsq_to_file",
        lambda nsqd, name, out: [
            *consuming(nsqd, name),
            f"--output-dir={out}",
            "--sync-interval=100ms",
        ],
        lambda nsqd, name, out, stdout: archived(out),
        runs_until_stopped=True,
    ),
    "nsq_to_nsq": Case(
        "nsq_to_nsq",
        lambda nsqd, name, out: [
            *consuming(nsqd, name),
            f"--destination-nsqd-tcp-address={nsqd.tcp_address}",
            f"--destination-topic={name}-out",
        ],
        lambda nsqd, name, out, stdout: depth(nsqd, f"{name}-out"),
        runs_until_stopped=True,
    ),
    "nsq_to_http": Case(
        "nsq_to_http",
        lambda nsqd, name, out: [
            *consuming(nsqd, name),
            f"--post=http://{nsqd.http_address}/pub?topic={name}-out",
        ],
        lambda nsqd, name, out, stdout: depth(nsqd, f"{name}-out"),
        runs_until_stopped=True,
    ),
    "nsq_stat": Case(
        "nsq_stat",
        lambda nsqd, name, out: [
            f"--nsqd-http-address={nsqd.http_address}",
            f"--topic={name}",
            "--channel=c",  # Go's needs one
            "--count=2",
            "--interval=100ms",
        ],
        lambda nsqd, name, out, stdout: int(bool(stdout)),
    ),
}


def run(
    argv: list[str], closed: int, case: Case, nsqd: Nsqd, name: str
) -> subprocess.CompletedProcess[bytes]:
    """Run with fd `closed` closed: to_nsq given two records, a consumer three
    messages (stopped by SIGTERM once every one is FIN'd, if it runs until stopped)."""
    nsqd.create_channels(name, "c")
    if case.tool != "to_nsq":
        nsqd.publish_many(name, [b"one", b"two", b"six"])
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(closed),
    )
    if case.runs_until_stopped:
        wait_until(lambda: nsqd.drained(name, "c"), WAIT, "every message FIN'd")
        process.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = process.communicate(b"a\nb\n", timeout=WAIT)
    finally:
        process.kill()
        process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("name", list(CASES))
def test_a_standard_stream_closed_at_start_is_handled_as_go_does(
    nsqd: Nsqd, tmp_path: Path, name: str, stream: str
) -> None:
    case, closed = CASES[name], STREAMS[stream]
    outcomes = []
    for who, argv in (("go", [str(find_binary(case.tool))]), ("ours", our_tool(case.tool))):
        out = tmp_path / who
        out.mkdir()
        topic = f"{who}-{stream}"
        result = run([*argv, *case.arguments(nsqd, topic, out)], closed, case, nsqd, topic)
        outcomes.append((result.returncode, case.effect(nsqd, topic, out, result.stdout)))
    go, ours = outcomes
    assert ours == go, result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr and b"error" not in result.stderr
