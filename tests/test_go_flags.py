"""Go's flag rules at the front: parsing stops at the first word that is not a flag (or
`--`); the values Go accepts mean what they mean in Go; a flag the tool does not have is
named as typed, with the closest one suggested."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from nsqtools.commands.front import go_flags_to_click
from nsqtools.commands.nsq_tail import command as nsq_tail
from nsqtools.commands.nsq_to_file import command as nsq_to_file
from nsqtools.commands.nsq_to_nsq import command as nsq_to_nsq
from nsqtools.commands.options import build_config
from nsqtools.commands.to_nsq import command as to_nsq
from nsqtools.testing import Nsqd, run_go_tool

BIN = Path(sys.executable).parent
TOPIC = "goflags"


def ours(tool: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / tool), *args], capture_output=True, timeout=30, check=False, input=b""
    )


def parsed(command: click.Command, *args: str) -> dict[str, Any]:
    """The options a command line gives the command, as its function receives them."""
    with command.make_context(command.name, list(args)) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize(
    ("args", "rewritten"),
    [
        (["-topic=t", "false", "-n", "1"], ["--topic", "t", "--", "false", "-n", "1"]),
        (["-topic", "t", "--", "-n=1"], ["--topic", "t", "--", "-n=1"]),
        (["-print-topic", "-", "-n=1"], ["--print-topic", "--", "-", "-n=1"]),
    ],
)
def test_flags_end_at_the_first_word_that_is_not_a_flag(
    args: list[str], rewritten: list[str]
) -> None:
    assert go_flags_to_click(nsq_tail, args) == rewritten


def test_the_words_after_the_flags_are_ignored_with_a_warning_as_go_ignores_them(
    nsqd: Nsqd,
) -> None:
    """`-print-topic false`, a common slip: Go prints the topic and ignores the rest."""
    nsqd.create_channels(TOPIC, "go", "ours")
    nsqd.publish_many(TOPIC, [b"one", b"two"])
    common = [f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={TOPIC}", "-n=2"]
    go = run_go_tool("nsq_tail", [*common, "-channel=go", "-print-topic", "false", "-n=1"])
    mine = ours("nsq_tail", *common, "-channel=ours", "-print-topic", "false", "-n=1")
    assert go.returncode == mine.returncode == 0, mine.stderr
    assert mine.stdout == go.stdout == b"goflags | one\ngoflags | two\n"
    assert mine.stderr.decode().splitlines()[0] == (
        "nsq_tail: warning: ignoring 'false -n=1': flags end at the first word that is "
        "not a flag, as in Go"
    )


def test_nsq_to_file_refuses_the_words_after_the_flags_as_go_does() -> None:
    result = ours("nsq_to_file", "-topic=t", "extra", "-nsqd-tcp-address=127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr == (
        b"nsq_to_file: error: unknown arguments: [extra -nsqd-tcp-address=127.0.0.1:1]\n"
    )


def test_a_flag_after_to_nsqs_file_is_said_to_go_before_it(tmp_path: Path) -> None:
    """to_nsq reads its arguments as files: `-topic` after one would be a missing file."""
    records = tmp_path / "records"
    records.write_bytes(b"r\n")
    result = ours("to_nsq", "-nsqd-tcp-address=127.0.0.1:1", str(records), "-topic", "t")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        f"to_nsq: error: flag -topic after the argument {str(records)!r}: flags go before "
        "arguments, as in Go"
    ]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("-bogus", "flag provided but not defined: -bogus (see -help)"),
        ("--bogus=1", "flag provided but not defined: --bogus (see --help)"),
        (
            "-nsqd-tcp-addres=127.0.0.1:4150",
            "flag provided but not defined: -nsqd-tcp-addres (did you mean -nsqd-tcp-address?)",
        ),
        ("--chanel", "flag provided but not defined: --chanel (did you mean --channel?)"),
        ("-n5", "flag provided but not defined: -n5 (did you mean -n?)"),
        ("---topic=t", "bad flag syntax: ---topic=t"),
        ("-=t", "bad flag syntax: -=t"),
    ],
)
def test_a_flag_the_tool_does_not_have_is_named_as_typed(flag: str, message: str) -> None:
    with pytest.raises(click.UsageError) as raised:
        go_flags_to_click(nsq_tail, ["-topic=t", flag])
    assert raised.value.format_message() == message


def test_a_last_flag_without_its_value_is_named_as_typed() -> None:
    with pytest.raises(click.UsageError, match=r"^flag needs an argument: -channel$"):
        go_flags_to_click(nsq_tail, ["-topic=t", "-channel"])


def test_completion_leaves_what_it_cannot_read() -> None:
    assert go_flags_to_click(nsq_tail, ["-bogus", "-channel"], resilient=True) == [
        "-bogus",
        "--channel",
    ]


def test_a_negative_rate_is_no_throttle_as_in_go() -> None:
    assert parsed(to_nsq, "-topic=t", "-rate=-1")["rate"] == 0


def test_a_negative_rotate_size_is_no_rotation_as_in_go() -> None:
    assert parsed(nsq_to_file, "-topic=t", "-rotate-size=-5")["rotate_size"] == 0


def test_a_negative_status_every_is_no_status_as_in_go() -> None:
    assert parsed(nsq_to_nsq, "-topic=t", "-status-every=-1")["status_every"] == 0


def test_max_in_flight_0_is_accepted_as_go_nsq_accepts_it() -> None:
    options = parsed(nsq_to_file, "-topic=t", "-max-in-flight=0")
    assert build_config("nsq_to_file", options, max_in_flight=0).max_in_flight == 0


def test_read_timeout_equal_to_the_default_heartbeat_is_accepted() -> None:
    options = parsed(nsq_tail, "-topic=t", "--consumer-opt=read_timeout,30s")
    assert build_config("nsq_tail", options).read_timeout == 30.0
