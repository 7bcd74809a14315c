"""Drop-in fixes of the front, each run side by side with Go's tool on the same nsqd:
the same command line must mean the same thing to ours and to Go's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, find_binary, run_go_tool, wait_until
from tests.conftest import Cluster

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


CHECKS_THAT_FAIL = [
    ("nsq_tail", [], 1),
    ("nsq_tail", ["-topic=t"], 1),
    ("nsq_tail", ["{nsqd}"], 1),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-lookupd-http-address=127.0.0.1:1"], 1),
    ("nsq_tail", ["{nsqd}", "-topic=bad topic"], 1),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-channel=bad channel"], 1),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-n=x"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-max-in-flight=0x"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-bogus"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-nsqd-tcp-addres=127.0.0.1:1"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "---topic=t"], 2),
    ("nsq_tail", ["{nsqd}", "-topic"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-max-in-flight=-1"], 1),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-consumer-opt=read_timeout,29s"], 1),
    # Integers Go does not read; the invalid topic makes any we misread exit 1 at once.
    ("nsq_tail", ["{nsqd}", "-topic=bad!", "-n=08"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=bad!", "-n=1__0"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=bad!", "-n=_1"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=bad!", "-n= 5"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=bad!", "-n=9223372036854775808"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-print-topic=maybe"], 2),
    ("nsq_tail", ["{nsqd}", "-topic=t", "-consumer-opt=nope,1"], 2),
    ("to_nsq", [], 1),
    ("to_nsq", ["-topic=t"], 1),
    ("to_nsq", ["{nsqd}"], 1),
    ("to_nsq", ["{nsqd}", "-topic=bad!"], 1),  # Go: E_BAD_TOPIC from nsqd
    ("to_nsq", ["{nsqd}", "-topic=t", "-delimiter=ab"], 1),
    ("to_nsq", ["{nsqd}", "-topic=t", "-rate=x"], 2),
    ("to_nsq", ["{nsqd}", "-topic=t", "-producer-opt=nope,1"], 2),
    ("nsq_to_file", ["{nsqd}", "-topic=t", "extra", "-topic=u"], 1),
    ("nsq_to_nsq", [], 1),
    ("nsq_to_nsq", ["{nsqd}"], 1),
    ("nsq_to_nsq", ["{nsqd}", "-topic=t"], 1),  # no destination
    ("nsq_to_nsq", ["{nsqd}", "-topic=bad!", "-destination-nsqd-tcp-address=127.0.0.1:1"], 1),
    ("nsq_to_nsq", ["{nsqd}", "-topic=t", "-destination-topic=bad!"], 1),
    ("nsq_to_nsq", ["{nsqd}", "-topic=t", "-status-every=x"], 2),
    ("nsq_to_nsq", ["{nsqd}", "-topic=t", "-consumer-opt=nope,1"], 2),
    ("nsq_to_nsq", ["{nsqd}", "-topic=t", "-producer-opt=nope,1"], 2),
    ("nsq_to_http", [], 1),
    ("nsq_to_http", ["{nsqd}", "-topic=t"], 1),  # no --get or --post
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-post=http://h/", "-get=http://h/%s"], 1),
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-get=http://h/"], 1),
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-get=http://h/%s", "-content-type=a/b"], 1),
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-post=http://h/", "-sample=2"], 1),
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-post=http://h/", "-header=k=v"], 1),
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-post=http://h/", "-n=x"], 2),
    ("nsq_to_http", ["{nsqd}", "-topic=t", "-post=http://h/", "-consumer-opt=nope,1"], 2),
]


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    CHECKS_THAT_FAIL,
    ids=[f"{tool} {' '.join(args)}" for tool, args, _ in CHECKS_THAT_FAIL],
)
def test_exit_status_as_go(nsqd: Nsqd, tool: str, args: list[str], code: int) -> None:
    """A flag that does not parse: 2. A check of values that fails (log.Fatal): 1."""
    args = [arg.format(nsqd=f"-nsqd-tcp-address={nsqd.tcp_address}") for arg in args]
    go = run_go_tool(tool, args, input=b"record\n")
    mine = ours(tool, *args, input=b"record\n")
    assert go.returncode == code, go.stderr
    lines = mine.stderr.decode().splitlines()
    assert mine.returncode == code, lines
    assert len(lines) == 1 and lines[0].startswith(f"{tool}: error: "), lines


@pytest.mark.parametrize(
    ("spelling", "value"),
    [("010", 8), ("0x0a", 10), ("0o7", 7), ("0B11", 3), ("1_1", 11), ("0x_c", 12), ("+5", 5)],
)
def test_integers_as_go_reads_them(nsqd: Nsqd, spelling: str, value: int) -> None:
    nsqd.create_channels(TOPIC, "go", "ours")
    nsqd.publish_many(TOPIC, [b"%d" % index for index in range(20)])
    common = [f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={TOPIC}", "-n", spelling]
    go = run_go_tool("nsq_tail", [*common, "-channel=go"])
    mine = ours("nsq_tail", *common, "-channel=ours")
    assert go.returncode == mine.returncode == 0, mine.stderr
    assert len(mine.stdout.splitlines()) == len(go.stdout.splitlines()) == value


def test_max_in_flight_in_hex_is_the_rdy_count(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "go", "ours")
    common = [f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={TOPIC}", "-max-in-flight=0x10"]
    go = start_quietly(find_binary("nsq_tail"), *common, "-channel=go")
    mine = start_quietly(BIN / "nsq_tail", *common, "-channel=ours")
    try:
        nsqd.publish_many(TOPIC, [b"%d" % index for index in range(50)])  # ours starts at RDY 1
        wait_until(lambda: ready_count(nsqd, "go") == 16, 10, "RDY 16 from Go's")
        wait_until(lambda: ready_count(nsqd, "ours") == 16, 10, "RDY 16 from ours")
    finally:
        for process in (go, mine):
            process.kill()
            process.wait()


def start_quietly(program: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(program), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def ready_count(nsqd: Nsqd, channel: str) -> int:
    clients = nsqd.channel_stats(TOPIC, channel).clients
    return clients[0].ready_count if clients else -1


@pytest.mark.parametrize(
    ("environment", "flag"),
    [
        ("NSQ_NSQD_TCP_ADDRESS", "-lookupd-http-address={lookupd}"),
        ("NSQ_LOOKUPD_HTTP_ADDRESS", "-nsqd-tcp-address={nsqd}"),
        ("NSQ_NSQD_TCP_ADDRESS", "-nsqd-tcp-address={nsqd}"),
    ],
)
def test_address_flags_replace_environment_addresses_of_both_kinds(
    cluster: Cluster, environment: str, flag: str
) -> None:
    """Go reads no environment: given the same flags, ours must do what Go's does, even
    with an address of the other kind (here a dead one) in the environment."""
    nsqd = cluster.nsqd
    nsqd.create_channels(TOPIC, "go", "ours")
    cluster.publish_many(TOPIC, lambda _: [b"one", b"two"])
    address = flag.format(lookupd=cluster.lookupd.http_address, nsqd=nsqd.tcp_address)
    common = [address, f"-topic={TOPIC}", "-n=2"]
    go = run_go_tool("nsq_tail", [*common, "-channel=go"])
    env = {**os.environ, environment: "127.0.0.1:1"}
    mine = subprocess.run(
        [str(BIN / "nsq_tail"), *common, "-channel=ours"],
        env=env, capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert go.returncode == mine.returncode == 0, mine.stderr
    assert mine.stdout == go.stdout == b"one\ntwo\n"


OUR_HEADINGS = ["TLS, compression and AUTH:", "Output and delivery:"]
YOUZAN = ["The Youzan fork (partitioned and ordered topics):"]


@pytest.mark.parametrize(
    ("tool", "more_headings"),
    [
        ("nsq_tail", [*YOUZAN, "Logging:", "Other options:"]),
        ("to_nsq", [*YOUZAN, "Logging:", "Other options:"]),
        ("nsq_to_nsq", ["Logging:", "Other options:"]),
        ("nsq_to_http", ["Logging:", "Other options:"]),
    ],
)
def test_help_names_the_go_tool_and_shows_its_options_first(
    tool: str, more_headings: list[str]
) -> None:
    go = run_go_tool(tool, ["-h"])
    mine = ours(tool, "-h")
    assert go.returncode == mine.returncode == 0
    help_text = mine.stdout.decode()
    assert f"Drop-in replacement for Go's {tool}" in help_text
    sections = re.split(r"^(\S.*:)$", help_text, flags=re.MULTILINE)
    headings = sections[1::2]
    assert headings == [f"Options of Go's {tool}:", *OUR_HEADINGS, *more_headings]
    gos_own = set(re.findall(r"^  --?([\w-]+)", sections[2], re.MULTILINE)) - {"h"}
    assert gos_own == set(re.findall(r"^  -([\w-]+)", go.stderr.decode(), re.MULTILINE))


def test_nsq_alone_lists_its_commands_with_the_go_tools_they_replace() -> None:
    result = ours("nsq")
    assert result.returncode == 0, result.stderr
    listed = result.stdout.decode().split("Commands:\n")[1]
    inspection = ["channel", "channels", "nodes", "topic", "topics"]
    admin = ["create", "delete", "empty", "pause", "tombstone", "unpause"]
    own = ["archive", "bench", "completion", "context", "help", "man"]
    no_go_name = [(name, "") for name in [*own, *inspection, *admin]]
    assert re.findall(r"^  (\w+) +(?:(\w+): )?", listed, re.MULTILINE) == sorted(
        [*no_go_name, ("pub", "to_nsq"), ("stat", "nsq_stat"), ("tail", "nsq_tail")]
    )


def test_nsq_help_command_is_the_commands_help() -> None:
    for command in ("pub", "tail"):
        result = ours("nsq", "help", command)
        assert result.returncode == 0, result.stderr
        assert result.stdout == ours("nsq", command, "--help").stdout
        assert result.stdout.startswith(f"Usage: nsq {command} ".encode())
    assert ours("nsq", "help").stdout == ours("nsq", "--help").stdout
    unknown = ours("nsq", "help", "xyzzy")
    assert unknown.returncode == 2
    assert unknown.stderr.decode().splitlines() == [
        "nsq: error: no such command 'xyzzy': see `nsq help`"
    ]
