"""to_nsq run as a user runs it, side by side with the Go to_nsq on the same nsqd."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, find_binary, our_tool, run_go_tool, wait_until
from tests.conftest import Cluster

# This checkout's to_nsq (the one on PATH may come from another copy of nsqtools).
OURS = our_tool("to_nsq")


def to_nsq(*args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*OURS, *args], input=input, capture_output=True, timeout=30, check=False)


def bodies_of(nsqd: Nsqd, topic: str, count: int) -> list[bytes]:
    """Read `count` messages back with the Go nsq_tail (an independent consumer)."""
    args = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={topic}", f"-n={count}"]
    result = run_go_tool("nsq_tail", args, timeout=30)
    assert result.returncode == 0, result.stderr
    lines: list[bytes] = result.stdout.splitlines()
    return lines


INPUT = b'first\nsecond\n\n\nthird has spaces\n\xff\xfebinary\n{"json": 1}\n'


def test_same_messages_as_go_on_the_same_input(nsqd: Nsqd) -> None:
    go = run_go_tool(
        "to_nsq", [f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=go"], input=INPUT
    )
    ours = to_nsq(f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=ours", input=INPUT)
    assert go.returncode == ours.returncode == 0, ours.stderr
    expected = [record for record in INPUT.split(b"\n") if record]
    assert nsqd.topic_depth("go") == nsqd.topic_depth("ours") == len(expected)
    assert (
        bodies_of(nsqd, "ours", len(expected)) == bodies_of(nsqd, "go", len(expected)) == expected
    )


def test_the_last_record_without_a_delimiter_is_kept_whole(nsqd: Nsqd) -> None:
    """The Go to_nsq cuts the last byte of such a record; we publish it whole."""
    result = to_nsq(f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=t", input=b"a\nlast")
    assert result.returncode == 0, result.stderr
    assert bodies_of(nsqd, "t", 2) == [b"a", b"last"]


def test_every_record_goes_to_every_nsqd(cluster2: Cluster) -> None:
    addresses = [f"--nsqd-tcp-address={nsqd.tcp_address}" for nsqd in cluster2.nsqds]
    result = to_nsq(*addresses, "-topic", "fan", input=b"1\n2\n3\n")
    assert result.returncode == 0, result.stderr
    for nsqd in cluster2.nsqds:
        assert bodies_of(nsqd, "fan", 3) == [b"1", b"2", b"3"]


def test_delimiter_byte_and_escapes(nsqd: Nsqd) -> None:
    address = f"--nsqd-tcp-address={nsqd.tcp_address}"
    assert to_nsq(address, "--topic=comma", "--delimiter=,", input=b"a,b,,c").returncode == 0
    assert bodies_of(nsqd, "comma", 3) == [b"a", b"b", b"c"]
    assert to_nsq(address, "--topic=tab", "--delimiter", "\\t", input=b"x\ty\t").returncode == 0
    assert bodies_of(nsqd, "tab", 2) == [b"x", b"y"]


def test_files_as_arguments_and_dash_for_stdin(nsqd: Nsqd, tmp_path: Path) -> None:
    first, second = tmp_path / "one.txt", tmp_path / "two.txt"
    first.write_bytes(b"f1\nf2")  # no final delimiter: kept whole, not joined to the next file
    second.write_bytes(b"s1\n")
    result = to_nsq(
        f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=files", str(first), "-", str(second),
        input=b"stdin\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert bodies_of(nsqd, "files", 4) == [b"f1", b"f2", b"stdin", b"s1"]


def test_defer_publishes_deferred(nsqd: Nsqd) -> None:
    nsqd.create_channels("later", "c")
    result = to_nsq(
        f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=later", "--defer=1h", input=b"a\nb\n"
    )
    assert result.returncode == 0, result.stderr
    stats = nsqd.channel_stats("later", "c")
    assert (stats.deferred_count, stats.depth) == (2, 0)


def test_rate_publishes_everything(nsqd: Nsqd) -> None:
    result = to_nsq(
        f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=slow", "--rate=50", input=b"x\n" * 20
    )
    assert result.returncode == 0, result.stderr
    assert nsqd.topic_depth("slow") == 20


def test_unacknowledged_records_give_exit_1_and_a_count(nsqd: Nsqd) -> None:
    result = to_nsq(
        f"--nsqd-tcp-address={nsqd.tcp_address}", "--nsqd-tcp-address=127.0.0.1:1", "--topic=half",
        input=b"a\nb\nc\n",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "to_nsq: error: 3 of 3 records were not published to every nsqd: cannot connect to "
        "127.0.0.1:1: connection refused (3)"
    ]
    assert nsqd.topic_depth("half") == 3  # the live nsqd still has them


def test_sigterm_publishes_what_was_read_and_exits_0(nsqd: Nsqd) -> None:
    process = subprocess.Popen(
        [*OURS, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=sig"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write(b"".join(b"%d\n" % index for index in range(100)))
    process.stdin.flush()
    wait_until(lambda: depth_or_zero(nsqd, "sig") == 100, 10, "100 records published")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert nsqd.topic_depth("sig") == 100


def depth_or_zero(nsqd: Nsqd, topic: str) -> int:
    try:
        return nsqd.topic_depth(topic)
    except KeyError:  # not created yet
        return 0


def test_go_to_nsq_is_built() -> None:
    assert find_binary("to_nsq").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--nsqd-tcp-address=a:1"], 1, "--topic required"),
        (["--topic=t"], 1, "--nsqd-tcp-address required"),
        (["--topic=bad topic", "--nsqd-tcp-address=a:1"], 1, "invalid topic name"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "--delimiter=ab"], 1, "single byte"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "--defer=10"], 2, "missing unit"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "--producer-opt=nope,1"], 2, "unknown option"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "/no/such/file"], 2, "/no/such/file"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "--bogus"], 2, "not defined: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_the_right_exit(args: list[str], code: int, message: str) -> None:
    result = to_nsq(*args)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == code, lines
    assert len(lines) == 1 and lines[0].startswith("to_nsq: error: "), lines
    assert message in lines[0]


def test_version() -> None:
    result = to_nsq("-version")
    assert result.returncode == 0
    assert result.stdout.decode().startswith("to_nsq v")


def publishing_to_a_terminal(nsqd: Nsqd) -> tuple[subprocess.Popen[bytes], int]:
    """to_nsq reading a pipe, its stderr on a pseudo-terminal; the process and the
    terminal's controlling side."""
    import os
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*OURS, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=progress"],
        stdin=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    return process, controller


def test_progress_line_on_a_terminal(nsqd: Nsqd) -> None:
    """With stderr on a terminal, to_nsq shows how many records were published."""
    import os
    import select
    import time

    process, controller = publishing_to_a_terminal(nsqd)
    assert process.stdin is not None
    process.stdin.write(b"line\n" * 1000)
    process.stdin.flush()
    shown, deadline = b"", time.monotonic() + 10
    while b"1,000 published" not in shown:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no progress line on the terminal: {shown!r}"
        if select.select([controller], [], [], remaining)[0]:
            shown += os.read(controller, 4096)
    process.stdin.close()
    assert process.wait(timeout=15) == 0
    os.close(controller)
    assert b"0 failed" in shown


def read_terminal(controller: int) -> bytes:
    """What was written to the terminal, until every process holding it has ended."""
    import os

    shown = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: nobody holds the terminal any more
            return shown
        if not chunk:
            return shown
        shown += chunk


def test_the_progress_line_ends_with_the_final_count(nsqd: Nsqd) -> None:
    """It was erased at the end (main printed nothing that stayed)."""
    import os

    process, controller = publishing_to_a_terminal(nsqd)
    process.communicate(b"one\ntwo\nsix\n", timeout=30)
    shown = read_terminal(controller)
    os.close(controller)
    assert process.returncode == 0
    assert shown.endswith(b"\r\x1b[K3 published, 0 failed\r\n"), shown


def test_no_progress_line_when_the_records_are_typed_at_the_terminal(nsqd: Nsqd) -> None:
    """It mixed with what was typed (main drew it)."""
    import os
    import pty

    controller, terminal = pty.openpty()
    argv = [*OURS, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=typed"]
    process = subprocess.Popen(argv, stdin=terminal, stderr=terminal)
    os.close(terminal)
    os.write(controller, b"one\ntwo\n\x04")  # typed, then Ctrl-D
    shown = read_terminal(controller)
    os.close(controller)
    assert process.wait(timeout=30) == 0
    assert b"published" not in shown and b"\x1b[K" not in shown, shown
    wait_until(lambda: nsqd.topic_depth("typed") == 2, 10, "both records published")


def test_a_log_line_starts_on_a_line_of_its_own_under_the_progress_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    from nsqtools.commands.logs import configure_logging
    from nsqtools.commands.to_nsq import _ProgressLine

    logger = logging.getLogger("nsqtools")
    before = (logger.handlers[:], logger.level, logger.propagate)
    configure_logging("info", "[to_nsq] ")
    try:
        progress = _ProgressLine()
        for handler in logger.handlers:
            handler.addFilter(progress.before_log)
        progress.show(5, 10.0, 0)
        logging.getLogger("nsqtools.producer").warning("an nsqd went away")
        progress.show(6, 10.0, 0)
        progress.end(7, 0)
    finally:
        logger.handlers[:], logger.level, logger.propagate = before
    drawn, log_line, redrawn, final = capsys.readouterr().err.split("\r\x1b[K")[1:]
    assert drawn == "5 published, 10/s, 0 failed"  # erased before the log line
    assert log_line.startswith("[to_nsq] ") and log_line.endswith("WARNING: an nsqd went away\n")
    assert redrawn == "6 published, 10/s, 0 failed"
    assert final == "7 published, 0 failed\n"


def test_every_failure_reason_is_named() -> None:
    """Main named the commonest, then "(and 1 other reasons)"."""
    from collections import Counter

    from nsqtools.runtime.publishing import unpublished

    reasons = Counter({"nsqd 127.0.0.1:4150 refused it: E_BAD_MESSAGE": 1, "timed out": 2})
    assert unpublished(3, 5, reasons) == (
        "3 of 5 records were not published to every nsqd: "
        "timed out (2); nsqd 127.0.0.1:4150 refused it: E_BAD_MESSAGE (1)"
    )
