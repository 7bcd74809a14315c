"""Every program ends quietly with exit 0 when its stdout's reader has gone
(`nsq topics | head -1`). Before, click caught the broken pipe and exited 1 (nsq topics,
every --help), and `nsq --version` ended in a BrokenPipeError traceback.

The reader is gone before the program starts: its first write finds the pipe broken,
whatever it writes and however (click, rich, a plain write, fd 1 itself).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from nsqtools.testing import Nsqd, our_tool

WAIT = 30.0

# name → (program, its arguments for the nsqd)
RUNS: dict[str, tuple[str, Callable[[Nsqd], list[str]]]] = {
    "nsq --version": ("nsq", lambda nsqd: ["--version"]),
    "nsq_tail -version": ("nsq_tail", lambda nsqd: ["-version"]),
    "nsq --help": ("nsq", lambda nsqd: ["--help"]),
    "nsq help topics": ("nsq", lambda nsqd: ["help", "topics"]),
    "nsq_to_file --help": ("nsq_to_file", lambda nsqd: ["--help"]),
    "nsq topics": ("nsq", lambda nsqd: ["topics", f"--nsqd-http-address={nsqd.http_address}"]),
    "nsq topics --json": (
        "nsq",
        lambda nsqd: ["topics", "--json", f"--nsqd-http-address={nsqd.http_address}"],
    ),
    "nsq nodes": ("nsq", lambda nsqd: ["nodes", f"--nsqd-http-address={nsqd.http_address}"]),
    "nsq channel": (
        "nsq",
        lambda nsqd: ["channel", "t", "c", f"--nsqd-http-address={nsqd.http_address}"],
    ),
    "nsq_stat": (
        "nsq_stat",
        lambda nsqd: [f"--nsqd-http-address={nsqd.http_address}", "--topic=t", "--count=1"],
    ),
    "nsq_tail": (
        "nsq_tail",
        lambda nsqd: [
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            "--topic=t",
            "--channel=c",
            "-n",
            "2",
        ],
    ),
}


def run_with_reader_gone(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(argv, stdout=writer, stderr=subprocess.PIPE, timeout=WAIT)
    finally:
        os.close(writer)


@pytest.mark.parametrize("name", list(RUNS))
def test_a_program_whose_stdout_reader_has_gone_ends_quietly_with_exit_0(
    nsqd: Nsqd, name: str
) -> None:
    nsqd.create_channels("t", "c")
    nsqd.publish_many("t", [b"one", b"two"])
    program, arguments = RUNS[name]
    result = run_with_reader_gone([*our_tool(program), *arguments(nsqd)])
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr
    assert "Traceback" not in stderr and "error" not in stderr.lower(), stderr
