"""Drop-in fixes of the front, each run side by side with Go's tool on the same nsqd:
the same command line must mean the same thing to ours and to Go's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, run_go_tool

BIN = Path(sys.executable).parent
TOPIC = "dropin"


def ours(tool: str, *args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / tool), *args], input=input, capture_output=True, timeout=30, check=False
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["-print-topic", "-print-topic=false"], b"one\ntwo\n"),
        (["-print-topic=false", "--print-topic"], b"dropin | one\ndropin | two\n"),
        (["-print-topic=0", "-print-topic=T"], b"dropin | one\ndropin | two\n"),
    ],
)
def test_the_last_boolean_occurrence_wins(nsqd: Nsqd, flags: list[str], expected: bytes) -> None:
    nsqd.create_channels(TOPIC, "go", "ours")
    nsqd.publish_many(TOPIC, [b"one", b"two"])
    common = [f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={TOPIC}", "-n=2"]
    go = run_go_tool("nsq_tail", [*common, "-channel=go", *flags])
    mine = ours("nsq_tail", *common, "-channel=ours", *flags)
    assert go.returncode == mine.returncode == 0, mine.stderr
    assert mine.stdout == go.stdout == expected


def test_a_value_that_looks_like_a_flag_is_taken_as_the_value(nsqd: Nsqd) -> None:
    """Go gives `-log-prefix -print-topic` the prefix "-print-topic", not a flag."""
    nsqd.publish(TOPIC, b"one")
    args = [f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={TOPIC}", "-n=1"]
    mine = ours("nsq_tail", *args, "-log-prefix", "-print-topic")
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == b"one\n"
    assert mine.stderr.startswith(b"-print-topic")
