"""nsq_to_file run as a user runs it: real nsqd, files on disk, exit status.

Side by side with Go's nsq_to_file on the same messages and options: the same file names
(with --host-identifier fixed) and the same bytes once decompressed.
"""

from __future__ import annotations

import gzip
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, find_binary, our_tool, wait_until

OURS = our_tool("nsq_to_file")
TOPIC = "archive"
# Fixed for the length of a test, so both tools compute the same names; a short sync
# interval, as Go FINs the last messages of a run only at its next tick.
NAMING = ["--host-identifier=host", "--datetime-format=%Y", "--sync-interval=200ms"]


def go_tool() -> list[str]:
    return [str(find_binary("nsq_to_file"))]


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    """Our nsq_to_file expected to stop at once (a check of its options)."""
    return subprocess.run([*OURS, *args], capture_output=True, text=True, timeout=30, check=False)


def drained(nsqd: Nsqd, topic: str, channel: str) -> bool:
    """Every message of the channel FIN'd (none waiting, none in flight)."""
    try:
        stats = nsqd.channel_stats(topic, channel)
    except KeyError:
        return False
    return stats.depth == 0 and stats.in_flight_count == 0 and stats.message_count > 0


@contextmanager
def running(
    tool: list[str], nsqd: Nsqd, channel: str, *args: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The tool consuming `channel`; SIGTERM at the end of the block, then exit 0."""
    process = subprocess.Popen(
        [*tool, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--channel={channel}", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr.decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def archive_tree(directory: Path) -> dict[str, bytes]:
    """Every file under directory (hidden ones aside): relative path → content, gunzipped."""
    tree = {}
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            data = path.read_bytes()
            tree[str(relative)] = gzip.decompress(data) if path.suffix == ".gz" else data
    return tree


def side_by_side(nsqd: Nsqd, tmp_path: Path, bodies: list[bytes], *args: str) -> None:
    """Both tools archive the same messages with the same options: same trees."""
    nsqd.create_channels(TOPIC, "go", "ours")
    nsqd.publish_many(TOPIC, bodies)
    trees = []
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        out = tmp_path / name
        options = [a.replace("{dir}", str(tmp_path / f"{name}-")) for a in args]
        with running(
            tool, nsqd, name, f"--topic={TOPIC}", f"--output-dir={out}", *NAMING, *options
        ):
            wait_until(lambda: drained(nsqd, TOPIC, name), 20, f"{name} drained")  # noqa: B023
        trees.append(archive_tree(out))
    go, ours = trees
    assert list(ours) == list(go)
    assert ours == go
    assert b"".join(ours.values()).count(b"\n") == len(bodies)


def bodies(count: int, size: int = 40) -> list[bytes]:
    return [f"{index:08d}".encode().ljust(size, b"x") for index in range(count)]


def test_plain_files_as_go_names_and_fills_them(nsqd: Nsqd, tmp_path: Path) -> None:
    side_by_side(nsqd, tmp_path, bodies(1000))


def test_gzip_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    side_by_side(nsqd, tmp_path, bodies(1000), "--gzip", "--gzip-level=1")


def test_rotate_size_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    side_by_side(nsqd, tmp_path, bodies(300), "--rotate-size=1000")


def test_work_dir_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    side_by_side(nsqd, tmp_path, bodies(500), "--work-dir={dir}work", "--gzip")


def test_subdirectories_and_pid_free_format_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    side_by_side(
        nsqd, tmp_path, bodies(200), "--filename-format=<TOPIC>/<HOST>/<DATETIME><REV>.log",
        "--rotate-size=2000",
    )  # fmt: skip


# -- checks before anything starts ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "extra"], "unknown arguments: [extra]"),
        (["--nsqd-tcp-address=127.0.0.1:4150"], "--topic or --topic-pattern required"),
        (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address"),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--gzip-level=10"],
            "invalid --gzip-level value (10), should be 1-9",
        ),
        (
            ["--topic-pattern=x", "--nsqd-tcp-address=127.0.0.1:4150"],
            "--lookupd-http-address must be specified when no --topic specified",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--gzip",
             "--filename-format=<TOPIC>.log"],
            "<REV>",
        ),
        (
            ["--topic-pattern=(", "--lookupd-http-address=127.0.0.1:4161"],
            "--topic-pattern",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--consumer-opt=nope,1"],
            "nope",
        ),
        (["--topic=bad topic", "--nsqd-tcp-address=127.0.0.1:4150"], "bad topic"),
        (
            ["--topic=..", "--nsqd-tcp-address=127.0.0.1:4150",
             "--filename-format=<TOPIC>/<DATETIME>.log"],
            "..",
        ),
    ],
)  # fmt: skip
def test_bad_options_stop_with_one_line_and_exit_1(args: list[str], message: str) -> None:
    result = run_check(*args)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr
