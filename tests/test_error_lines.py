"""Error lines that name what the user wrote and what it is: a mistyped subcommand gets
the closest one; an address that is a URL, or the port of another service or protocol,
is said for what it is."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, Nsqlookupd, wait_until
from tests.conftest import Cluster

BIN = Path(sys.executable).parent


def ours(tool: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / tool), *args], capture_output=True, timeout=30, check=False, input=b""
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["chanel"], "nsq: error: no such command 'chanel': did you mean 'channel'?"),
        (["topcs"], "nsq: error: no such command 'topcs': did you mean 'topics'?"),
        (["to_file"], "nsq: error: no such command 'to_file': did you mean 'to-file'?"),
        (["help", "tial"], "nsq: error: no such command 'tial': did you mean 'tail'?"),
        (["xyzzy"], "nsq: error: no such command 'xyzzy': see `nsq help`"),
    ],
)
def test_a_mistyped_subcommand_gets_the_closest_one(args: list[str], line: str) -> None:
    result = ours("nsq", *args)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [line]


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("nsq_tail", ["-topic=t", "-nsqd-tcp-address=http://127.0.0.1:4150/"]),
        ("to_nsq", ["-topic=t", "-nsqd-tcp-address=http://127.0.0.1:4150/"]),
        ("nsq", ["topics", "--nsqd-http-address=http://127.0.0.1:4150/"]),
    ],
)
def test_a_url_given_as_an_address_is_named_as_a_url(tool: str, args: list[str]) -> None:
    result = ours(tool, *args)
    assert result.returncode == 1
    [line] = result.stderr.decode().splitlines()
    assert line.endswith(
        "invalid address 'http://127.0.0.1:4150/': a URL, where host:port is wanted "
        "(give 127.0.0.1:4150)"
    )


LOOKUPD_TCP = "nsqlookupd's TCP port (it answered E_BAD_PROTOCOL as nsqlookupd does)"


def test_nsqlookupds_tcp_port_given_as_nsqds_is_said_for_what_it_is(lookupd: Nsqlookupd) -> None:
    result = ours("nsq_tail", "-topic=t", f"-nsqd-tcp-address={lookupd.tcp_address}")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"nsq_tail: error: {lookupd.tcp_address} is {LOOKUPD_TCP}, not nsqd's TCP port"
    ]


def test_nsqds_tcp_port_given_to_nsq_stat_is_said_for_what_it_is(nsqd: Nsqd) -> None:
    """nsq_stat asks on the standard library's sockets (nsqtools.httpapi.blocking)."""
    result = ours("nsq_stat", "-topic=t", "-channel=c", f"-nsqd-http-address={nsqd.tcp_address}")
    assert result.returncode == 1
    [line] = result.stderr.decode().splitlines()
    assert line.endswith(
        f"nsqd {nsqd.tcp_address}: GET /stats: the address is nsqd's TCP port, not an HTTP "
        "port (it answered in NSQ's TCP protocol)"
    )


def test_tcp_ports_given_as_http_ones_to_nsq_are_said_for_what_they_are(
    nsqd: Nsqd, lookupd: Nsqlookupd
) -> None:
    """The inspection commands ask through httpx, which keeps the bytes it cannot read."""
    by_nsqd = ours("nsq", "topics", f"--nsqd-http-address={nsqd.tcp_address}")
    assert by_nsqd.returncode == 1
    assert by_nsqd.stderr.decode().splitlines() == [
        f"nsq: error: nsqd {nsqd.tcp_address}: GET /stats: the address is nsqd's TCP port, "
        "not an HTTP port (it answered in NSQ's TCP protocol)"
    ]
    by_lookupd = ours("nsq", "nodes", f"--lookupd-http-address={lookupd.tcp_address}")
    assert by_lookupd.returncode == 1
    assert by_lookupd.stderr.decode().splitlines() == [
        f"nsq: error: nsqlookupd {lookupd.tcp_address}: GET /nodes: the address is "
        f"{LOOKUPD_TCP}, not an HTTP port"
    ]


def started(tool: str, *args: str, stderr: Path) -> subprocess.Popen[bytes]:
    with stderr.open("wb") as written:
        return subprocess.Popen([str(BIN / tool), *args], stdout=subprocess.DEVNULL, stderr=written)


def wait_for_line(process: subprocess.Popen[bytes], stderr: Path, text: str) -> None:
    try:
        wait_until(lambda: text in stderr.read_text(), 20, repr(text))
    finally:
        process.kill()
        process.wait()


def closed_port() -> int:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return int(unused.getsockname()[1])


def test_nsq_to_nsq_says_why_a_destination_cannot_be_reached(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.publish("relayed", b"one")
    destination = f"127.0.0.1:{closed_port()}"
    stderr = tmp_path / "stderr"
    process = started(
        "nsq_to_nsq",
        f"-nsqd-tcp-address={nsqd.tcp_address}",
        "-topic=relayed",
        f"-destination-nsqd-tcp-address={destination}",
        stderr=stderr,
    )
    wait_for_line(process, stderr, f"requeued: cannot connect to {destination}: connection refused")


@pytest.mark.parametrize("tool", ["nsq_tail", "nsq_to_file"])
def test_a_topic_no_nsqd_has_is_said_at_start(cluster: Cluster, tmp_path: Path, tool: str) -> None:
    stderr = tmp_path / "stderr"
    process = started(
        tool,
        f"-lookupd-http-address={cluster.lookupd.http_address}",
        "-topic=nosuchtopic",
        f"-output-dir={tmp_path}" if tool == "nsq_to_file" else "-n=1",
        stderr=stderr,
    )
    wait_for_line(
        process, stderr, "topic nosuchtopic: no nsqd has it (nsqlookupd lists none); looking again"
    )


def test_nsq_to_http_says_a_destination_is_an_nsqd_tcp_port(nsqd: Nsqd, tmp_path: Path) -> None:
    """nsq_to_http posts through nsqtools.httpclient's pool."""
    nsqd.publish("posted", b"one")
    stderr = tmp_path / "stderr"
    process = started(
        "nsq_to_http",
        f"-nsqd-tcp-address={nsqd.tcp_address}",
        "-topic=posted",
        f"-post=http://{nsqd.tcp_address}/",
        stderr=stderr,
    )
    wait_for_line(
        process,
        stderr,
        f"POST http://{nsqd.tcp_address}: the address is nsqd's TCP port, not an HTTP port",
    )
