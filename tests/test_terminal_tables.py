"""What a person at a terminal sees (issue 27): text from the cluster or a message shown
as text (markup never read, control characters escaped; piped and --json output exact),
tables that fit 80, 100 and 160 columns with their numbers whole, nsq_tail's prefix the
only dim part of its lines. Each program runs on a pseudo-terminal of a given size."""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import termios
from collections.abc import Iterator
from contextlib import contextmanager

from nsqtools.commands.fitting import Space, layout, space
from nsqtools.testing import Nsqd, our_tool, wait_until
from nsqtools.testing.httpserver import LocalHttpServer, Reply
from tests.conftest import Cluster

TOPIC = "terminal"
CHANNEL = "shown"
WAIT = 30.0

# What a client chooses to call itself: rich markup, and escape sequences a terminal would
# obey (blink on, a window title) and a newline that would break a table's row.
USER_AGENT = "evil/[/] [bold red]x\x1b[5mblink"
HOSTNAME = "host[/]\nnext\x1b]0;pwned\x07"
ESCAPED_USER_AGENT = "evil/[/] [bold red]x\\x1b[5mblink"
ESCAPED_HOSTNAME = "host[/]\\nnext\\x1b]0;pwned\\x07"
RAW_ESCAPES = ("\x1b[5m", "\x1b]0;", "\x07")
# rich's own sequences: colours, cursor moves, erasing (CSI ... letter).
_RICH_SEQUENCE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(
    argv: list[str],
    columns: int,
    env: dict[str, str] | None = None,
    status: int = 0,
    streams: tuple[str, ...] = ("stdout",),
) -> str:
    """Run argv with `streams` ("stdout", "stderr") on a pseudo-terminal `columns` wide
    (the other piped), colours on unless env says NO_COLOR: what it printed there, with
    \\r\\n as \\n. It must exit with `status`."""
    import pty

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    inherited = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    environment = {**inherited, **(env or {}), "COLUMNS": str(columns), "LINES": "50"}
    with subprocess.Popen(
        argv,
        stdout=terminal if "stdout" in streams else subprocess.PIPE,
        stderr=terminal if "stderr" in streams else subprocess.PIPE,
        env=environment,
    ) as process:
        os.close(terminal)
        output = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            output += chunk
        stderr = process.stderr.read() if process.stderr else b""
        process.wait(timeout=WAIT)
    os.close(controller)
    assert process.returncode == status, stderr.decode(errors="replace")
    return output.decode().replace("\r\n", "\n")


def without_styles(text: str) -> str:
    return _RICH_SEQUENCE.sub("", text)


def assert_shown_as_text(output: str, *escaped: str) -> None:
    shown = without_styles(output)
    for text in escaped:
        assert text in shown, shown
    for sequence in RAW_ESCAPES:
        assert sequence not in output


@contextmanager
def strange_client(nsqd: Nsqd) -> Iterator[None]:
    """A consumer of TOPIC/CHANNEL whose user agent and hostname are USER_AGENT and
    HOSTNAME, connected for the block."""
    nsqd.create_channels(TOPIC, CHANNEL)
    host, port = nsqd.tcp_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT) as connection:
        identify = json.dumps({"user_agent": USER_AGENT, "hostname": HOSTNAME}).encode()
        connection.sendall(b"  V2IDENTIFY\n" + struct.pack(">I", len(identify)) + identify)
        connection.sendall(f"SUB {TOPIC} {CHANNEL}\n".encode())
        wait_until(
            lambda: (
                [c.user_agent for c in nsqd.channel_stats(TOPIC, CHANNEL).clients] == [USER_AGENT]
            ),
            WAIT,
            "the client to subscribe",
        )
        yield


def nsq(*args: str) -> list[str]:
    return [*our_tool("nsq"), *args]


# -- text from the cluster is shown as text ----------------------------------------------


def test_a_clients_user_agent_and_hostname_are_shown_as_text_by_nsq_channel(nsqd: Nsqd) -> None:
    with strange_client(nsqd):
        address = f"--nsqd-http-address={nsqd.http_address}"
        output = on_terminal(nsq("channel", TOPIC, CHANNEL, address), columns=200)
        assert_shown_as_text(output, ESCAPED_USER_AGENT, ESCAPED_HOSTNAME)
        document = json.loads(
            subprocess.run(
                nsq("channel", TOPIC, CHANNEL, address, "--json"),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        piped = subprocess.run(
            nsq("channel", TOPIC, CHANNEL, address), capture_output=True, text=True, check=True
        ).stdout
    [client] = document["clients"]
    assert (client["user_agent"], client["hostname"]) == (USER_AGENT, HOSTNAME)
    assert USER_AGENT in piped  # piped: the exact text


def test_the_other_inspection_commands_draw_with_such_a_client_connected(nsqd: Nsqd) -> None:
    with strange_client(nsqd):
        address = f"--nsqd-http-address={nsqd.http_address}"
        for argv in (
            nsq("topics", address),
            nsq("topic", TOPIC, address),
            nsq("channels", TOPIC, address),
            nsq("nodes", address),
        ):
            output = on_terminal(argv, columns=160)
            assert nsqd.http_address in output or TOPIC in output
            assert_shown_as_text(output)


def test_an_error_text_is_shown_as_text_by_nsq_nodes_and_nsq_stat(nsqd: Nsqd) -> None:
    message = "[/] [bold]bad\x1b[5m\nnews"
    body = json.dumps({"message": message}).encode()
    with LocalHttpServer(lambda path, query, headers: Reply(500, body)) as server:
        broken = f"--nsqd-http-address={server.address}"
        nodes = subprocess.run(
            nsq("nodes", broken), capture_output=True, text=True, check=False
        )  # piped: the exact text, as one line
        assert "[/] [bold]bad\x1b[5m news" in nodes.stdout
        output = on_terminal(nsq("nodes", broken), columns=160, status=1)
        assert_shown_as_text(output, "[bold]bad\\x1b[5m")
        stat = [
            *our_tool("nsq_stat"), f"--topic={TOPIC}", f"--channel={CHANNEL}", "--count=2",
            "--interval=100ms", f"--nsqd-http-address={nsqd.http_address}", broken,
        ]  # fmt: skip
        with strange_client(nsqd):
            output = on_terminal(stat, columns=160)
    assert_shown_as_text(output, "[bold]bad\\x1b[5m")


def test_warnings_and_error_lines_on_a_terminal_show_an_error_text_as_text(nsqd: Nsqd) -> None:
    message = "bad\x1b[5m\x1b]0;pwned\x07"
    body = json.dumps({"message": message}).encode()
    with LocalHttpServer(lambda path, query, headers: Reply(500, body)) as server:
        broken = f"--nsqd-http-address={server.address}"
        failed = on_terminal(nsq("topics", broken), 160, status=1, streams=("stdout", "stderr"))
        stat = [
            *our_tool("nsq_stat"), f"--topic={TOPIC}", f"--channel={CHANNEL}", "--count=2",
            "--interval=100ms", f"--nsqd-http-address={nsqd.http_address}", broken,
        ]  # fmt: skip
        with strange_client(nsqd):
            warned = on_terminal(stat, columns=160, streams=("stderr",))  # | tee stat.log
    assert "nsq: error: " in failed and "WARNING: " in warned
    for output in (failed, warned):
        assert_shown_as_text(output, "bad\\x1b[5m\\x1b]0;pwned\\x07")


def test_nsq_tail_shows_a_body_as_text_and_dims_only_its_prefix(nsqd: Nsqd) -> None:
    bodies = [b"plain [bold]x\x1b[5mblink\x07", b'{"key": "value", "n": 1}']
    nsqd.create_channels(TOPIC, "color", "plain", "piped")
    nsqd.publish_many(TOPIC, bodies)
    tail = [
        *our_tool("nsq_tail"), f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}",
        "-n", "2", "--print-topic",
    ]  # fmt: skip
    colored = on_terminal([*tail, "--channel=color"], columns=100)
    assert_shown_as_text(colored, "plain [bold]x\\x1b[5mblink\\x07")
    dim, reset = "\x1b[2m", "\x1b[0m"
    for line in colored.splitlines():
        assert line.startswith(f"{dim}{TOPIC} | {reset}")
        assert line.count(dim) == 1
    assert "\x1b[1;34m" in colored  # the JSON's keys still highlighted
    plain = on_terminal([*tail, "--channel=plain"], columns=100, env={"NO_COLOR": "1"})
    assert plain == (
        f'{TOPIC} | plain [bold]x\\x1b[5mblink\\x07\n{TOPIC} | {{"key": "value", "n": 1}}\n'
    )
    piped = subprocess.run([*tail, "--channel=piped"], capture_output=True, check=True).stdout
    assert piped == b"".join(f"{TOPIC} | ".encode() + body + b"\n" for body in bodies)


# -- tables fit the terminal -------------------------------------------------------------

WIDTHS = (80, 100, 160)
BIG = 123_456  # messages on each nsqd: six digits, seven in the totals


def test_nsq_channels_and_channel_keep_counts_and_addresses_whole(cluster2: Cluster) -> None:
    publish_big(cluster2, CHANNEL)
    lookupd = f"--lookupd-http-address={cluster2.lookupd.http_address}"
    addresses = [nsqd.http_address for nsqd in cluster2.nsqds]
    for columns in WIDTHS:
        channels = fitting(on_terminal(nsq("channels", TOPIC, lookupd), columns), columns)
        channel = fitting(on_terminal(nsq("channel", TOPIC, CHANNEL, lookupd), columns), columns)
        assert str(2 * BIG) in channels and str(BIG) in channel  # a total, an nsqd's
        for shown in (channels, channel):
            assert all(address in shown for address in addresses), shown
    assert "memory" in channels and "timed-out" in channels  # at 160 nothing gave way


def test_nsq_stat_keeps_its_numbers_whole_and_gives_up_the_sparklines_first(
    cluster2: Cluster,
) -> None:
    publish_big(cluster2, CHANNEL)
    stat = [
        *our_tool("nsq_stat"), f"--topic={TOPIC}", "--count=2", "--interval=100ms",
        f"--lookupd-http-address={cluster2.lookupd.http_address}",
    ]  # fmt: skip
    headings = {}
    for columns in WIDTHS:
        shown = fitting(on_terminal(stat, columns), columns)
        assert f"{2 * BIG:,}" in shown and f"{BIG:,}" in shown
        assert all(
            nsqd.tcp_address in shown or nsqd.http_address in shown for nsqd in cluster2.nsqds
        )
        # the heading of the last drawing (the live table is drawn once a poll)
        heading = [line.split() for line in shown.splitlines() if "in/s" in line.split()][-1]
        assert heading[:3] == ["in/s", "out/s", "depth"] and "inflt" in heading
        headings[columns] = heading
    assert "history" not in headings[80] and "history" not in headings[100]
    assert headings[160][-4:] == ["in/s", "history", "out/s", "history"]


def publish_big(cluster: Cluster, *channels: str) -> None:
    """BIG messages on each nsqd of the cluster, in each of its channels."""
    for nsqd in cluster.nsqds:
        nsqd.create_channels(TOPIC, *channels)
    cluster.publish_many(TOPIC, lambda nsqd: [b"m"] * BIG)
    for nsqd in cluster.nsqds:
        for channel in channels:
            wait_until(
                lambda: nsqd.channel_stats(TOPIC, channel).depth == BIG,  # noqa: B023
                WAIT,
                f"{BIG} messages in {channel} on {nsqd.name}",
            )


def fitting(output: str, columns: int) -> str:
    """The output without its styles, checked to fit `columns` with nothing cut."""
    shown = without_styles(output)
    assert "…" not in shown, shown
    assert all(len(line) <= columns for line in shown.splitlines()), shown
    return shown


def test_columns_give_way_highest_first_and_words_wrap_before_any_is_cut() -> None:
    name, count, words, spark = Space(10, 10), Space(7, 7), Space(30, 15), Space(16, 16, 2)
    rate = Space(7, 7, 1)
    spaces = [name, count, rate, words, spark]
    gaps = 3 * 4
    assert layout(spaces, 10 + 7 + 7 + 30 + 16 + gaps, gap=3) == [10, 7, 7, 30, 16]
    # the words wrap, down to their longest, before a column gives way
    assert layout(spaces, 10 + 7 + 7 + 15 + 16 + gaps, gap=3) == [10, 7, 7, 15, 16]
    assert layout(spaces, 10 + 7 + 7 + 30 + gaps - 4, gap=3) == [10, 7, 7, 30 - 1, None]
    assert layout(spaces, 10 + 7 + 15 + 6, gap=3) == [10, 7, None, 15, None]
    assert layout(spaces, 20, gap=3) == [10, 7, None, 15, None]  # too narrow: none cut
    assert space(["nsqds", "127.0.0.1:4151 127.0.0.1:4152"], wraps=True) == Space(29, 14)
