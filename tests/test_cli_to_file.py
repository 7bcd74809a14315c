"""nsq_to_file run as a user runs it: real nsqd, files on disk, exit status.

Side by side with Go's nsq_to_file on the same messages and options: the same file names
(with --host-identifier fixed) and the same bytes once decompressed.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, find_binary, imported_packages, our_tool, running, wait_until
from tests.conftest import Cluster

OURS = our_tool("nsq_to_file")
TOPIC = "archive"
# Fixed for the length of a test, so both tools compute the same names; a short sync
# interval, as Go FINs the last messages of a run only at its next tick.
# How long a wait for the tool may take: its closes fsync, and beside the suite's
# fsync-heavy tests (a million publishes, each synced) a sync can take seconds.
WAIT = 60
NAMING = ["--host-identifier=host", "--datetime-format=%Y", "--sync-interval=200ms"]


def go_tool() -> list[str]:
    return [str(find_binary("nsq_to_file"))]


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    """Our nsq_to_file expected to stop at once (a check of its options)."""
    return subprocess.run([*OURS, *args], capture_output=True, text=True, timeout=30, check=False)


def archive_tree(directory: Path) -> dict[str, bytes]:
    """Every file under directory (hidden ones aside): relative path → content, gunzipped."""
    tree = {}
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            data = path.read_bytes()
            tree[str(relative)] = gzip.decompress(data) if path.suffix == ".gz" else data
    return tree


def side_by_side(
    nsqd: Nsqd, tmp_path: Path, bodies: list[bytes], *args: str, topics: tuple[str, ...] = (TOPIC,)
) -> dict[str, bytes]:
    """Both tools archive the same messages with the same options: the same trees, ours
    returned."""
    for topic in topics:
        nsqd.create_channels(topic, "go", "ours")
        nsqd.publish_many(topic, bodies)
    trees = []
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        out = tmp_path / name
        options = [a.replace("{dir}", str(tmp_path / f"{name}-")) for a in args]
        topic_options = [f"--topic={topic}" for topic in topics]
        common = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--channel={name}", *topic_options]
        with running([*tool, *common, f"--output-dir={out}", *NAMING, *options]):
            for topic in topics:
                wait_until(lambda: nsqd.drained(topic, name), 20, f"{name} drained")  # noqa: B023
        trees.append(archive_tree(out))
    go, ours = trees
    assert list(ours) == list(go)
    assert ours == go
    assert b"".join(ours.values()).count(b"\n") == len(bodies) * len(topics)
    return ours


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


def test_several_topics_each_in_its_files_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    ours = side_by_side(nsqd, tmp_path, bodies(300), "--gzip", topics=("left", "right"))
    assert sorted(ours) == ["left.host-000000.2026.log.gz", "right.host-000000.2026.log.gz"]


def open_files(process: subprocess.Popen[bytes], directory: Path) -> set[Path]:
    """The files under `directory` the process holds open."""
    held = set()
    for fd in Path(f"/proc/{process.pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue  # closed meanwhile
        if target.is_relative_to(directory):
            held.add(target)
    return held


def fin_d(nsqd: Nsqd, topic: str, channel: str, count: int) -> bool:
    """`count` messages came to the channel and the tool, connected, FIN'd every one."""
    return (
        nsqd.drained(topic, channel)
        and nsqd.channel_stats(topic, channel).message_count == count
        and nsqd.finished_by_clients(topic, channel) == count
    )


def test_sighup_closes_the_files_and_the_next_message_opens_the_next_rev_as_go(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    trees = []
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        out = tmp_path / name
        nsqd.create_channels(TOPIC, name)  # the other tool's channel has had its messages
        common = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--channel={name}", f"--topic={TOPIC}"]
        with running([*tool, *common, f"--output-dir={out}", "--gzip", *NAMING]) as run:
            nsqd.publish(TOPIC, f"{name} before".encode())
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 1), WAIT, "the first FIN'd")  # noqa: B023
            run.process.send_signal(signal.SIGHUP)
            # The first file, not every file: the sync tick after the close opens the
            # next rev already (Go's needsRotation is true with no file open).
            first = out / "archive.host-000000.2026.log.gz"
            wait_until(lambda: first not in open_files(run.process, out), WAIT, "the file closed")  # noqa: B023
            nsqd.publish(TOPIC, f"{name} after".encode())
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 2), WAIT, "the second FIN'd")  # noqa: B023
        tree = archive_tree(out)
        trees.append({path: data.replace(name.encode(), b"") for path, data in tree.items()})
    go, ours = trees
    assert (
        ours
        == go
        == {
            "archive.host-000000.2026.log.gz": b" before\n",
            "archive.host-000001.2026.log.gz": b" after\n",
        }
    )


def test_rotate_interval_makes_the_next_rev_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    """Files by time differ from run to run in number (an empty one each tick past the
    interval, as Go's); the first holds what came first, and all hold all, in order."""
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        out = tmp_path / name
        nsqd.create_channels(TOPIC, name)
        common = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--channel={name}", f"--topic={TOPIC}"]
        second = out / "archive.host-000001.2026.log"
        with running([*tool, *common, f"--output-dir={out}", "--rotate-interval=200ms", *NAMING]):
            nsqd.publish(TOPIC, f"{name} one".encode())
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 1), WAIT, "the first FIN'd")  # noqa: B023
            wait_until(second.exists, WAIT, "a rotation on the sync tick")
            nsqd.publish(TOPIC, f"{name} two".encode())
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 2), WAIT, "the second FIN'd")  # noqa: B023
        tree = archive_tree(out)
        assert tree["archive.host-000000.2026.log"] == f"{name} one\n".encode()
        assert b"".join(tree.values()) == f"{name} one\n{name} two\n".encode()


def test_json_lines_carry_the_envelope_of_nsq_tail(nsqd: Nsqd, tmp_path: Path) -> None:
    out = tmp_path / "out"
    published = [b"plain", b"multi\nline", b"\xff\xfe binary"]
    for body in published:
        nsqd.publish(TOPIC, body)
    common = [f"--nsqd-tcp-address={nsqd.tcp_address}", "--channel=ours", f"--topic={TOPIC}"]
    with running([*OURS, *common, f"--output-dir={out}", "--format=json", *NAMING]):
        wait_until(lambda: fin_d(nsqd, TOPIC, "ours", 3), WAIT, "every message FIN'd")
    (data,) = archive_tree(out).values()
    envelopes = [json.loads(line) for line in data.splitlines()]
    assert len({envelope["id"] for envelope in envelopes}) == 3
    assert {envelope["topic"] for envelope in envelopes} == {TOPIC}
    decoded = [
        base64.b64decode(e["body"]) if e["encoding"] == "base64" else e["body"].encode()
        for e in envelopes
    ]
    assert decoded == published


def test_with_topics_given_it_imports_neither_httpx_nor_rich(nsqd: Nsqd, tmp_path: Path) -> None:
    """httpx (which imports rich) is for finding topics through nsqlookupd: ~120 ms of
    start-up and ~10 MiB that a run with --topic never needs."""
    nsqd.publish(TOPIC, b"one")
    python, *code = OURS
    common = [f"--nsqd-tcp-address={nsqd.tcp_address}", "--channel=ours", f"--topic={TOPIC}"]
    argv = [python, "-X", "importtime", *code, *common, f"--output-dir={tmp_path}", *NAMING]
    with running(argv) as tool:
        wait_until(lambda: fin_d(nsqd, TOPIC, "ours", 1), WAIT, "the message FIN'd")
    assert imported_packages(tool.stderr).isdisjoint({"httpx", "httpcore", "rich"})


def test_topics_are_found_at_once_and_as_they_appear(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    nsqd = cluster.nsqd
    cluster.publish_many("found-1", lambda nsqd: [b"first"])
    cluster.publish_many("other", lambda nsqd: [b"not wanted"])
    args = [
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        "--topic-pattern=^found-",
        "--topic-refresh=300ms",
        f"--output-dir={out}",
        *NAMING,
    ]
    with running([*OURS, *args]):
        wait_until(lambda: fin_d(nsqd, "found-1", "nsq_to_file", 1), WAIT, "found-1 consumed")
        cluster.publish_many("found-2", lambda nsqd: [b"second"])
        wait_until(lambda: fin_d(nsqd, "found-2", "nsq_to_file", 1), WAIT, "found-2 consumed")
    assert archive_tree(out) == {
        "found-1.host.2026.log": b"first\n",
        "found-2.host.2026.log": b"second\n",
    }


def test_a_pattern_against_a_topic_named_to_freeze_it_matches_at_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A pattern that backtracks without end in Python's re, and a topic named to make
    it (anyone who can publish can name one): RE2 matches in linear time, as Go's
    regexp does, so the topic is skipped, the one that matches is archived, and SIGTERM
    stops the tool (a frozen match ignored it)."""
    out = tmp_path / "out"
    adversarial = "a" * 63 + "b"  # the longest topic name nsqd takes
    cluster.publish_many(adversarial, lambda nsqd: [b"not wanted"])
    cluster.publish_many("aaaa", lambda nsqd: [b"wanted"])
    args = [
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        "--topic-pattern=^(a+)+$",
        f"--output-dir={out}",
        *NAMING,
    ]
    with running([*OURS, *args]) as tool:
        wait_until(lambda: fin_d(cluster.nsqd, "aaaa", "nsq_to_file", 1), WAIT, "aaaa archived")
    assert archive_tree(out) == {"aaaa.host.2026.log": b"wanted\n"}
    assert f"skipping topic {adversarial} (doesn't match pattern ^(a+)+$)" in tool.stderr


def test_status_line_shows_rates_and_counts(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.publish_many(TOPIC, bodies(100))
    common = [f"--nsqd-tcp-address={nsqd.tcp_address}", "--channel=ours", f"--topic={TOPIC}"]
    process = subprocess.Popen(
        [*OURS, *common, f"--output-dir={tmp_path}", "--status", *NAMING],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr = process.stderr.fileno()
    os.set_blocking(stderr, False)
    shown = bytearray()

    def status_shown() -> bool:
        with suppress(BlockingIOError):  # nothing more yet
            shown.extend(os.read(stderr, 65536))
        return b"100 messages" in shown

    try:
        wait_until(lambda: fin_d(nsqd, TOPIC, "ours", 100), WAIT, "every message FIN'd")
        wait_until(status_shown, WAIT, "a status line (one a second)")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert b"msg/s" in shown


def test_a_new_datetime_starts_a_new_file_at_rev_0_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    """A name with seconds in it changes every second: the next message goes to a new
    file, its REV back to 0."""
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        out = tmp_path / name
        nsqd.create_channels(TOPIC, name)
        common = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--channel={name}", f"--topic={TOPIC}"]
        naming = ["--host-identifier=host", "--datetime-format=%H%M%S", "--sync-interval=200ms"]
        with running([*tool, *common, f"--output-dir={out}", "--gzip", *naming]):
            nsqd.publish(TOPIC, b"first")
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 1), WAIT, "the first FIN'd")  # noqa: B023
            second = int(time.time())
            wait_until(lambda: int(time.time()) > second, 5, "the next second")  # noqa: B023
            nsqd.publish(TOPIC, b"second")
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 2), WAIT, "the second FIN'd")  # noqa: B023
        tree = archive_tree(out)  # and, as Go's, an empty file for each tick in a new second
        assert all(path.startswith("archive.host-000000.") for path in tree)
        assert sorted(data for data in tree.values() if data) == [b"first\n", b"second\n"]


def test_skip_empty_files_closes_instead_of_opening_as_go(nsqd: Nsqd, tmp_path: Path) -> None:
    """Without traffic, each sync tick past --rotate-interval opens a new, empty file;
    with --skip-empty-files it only closes the current one."""
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        out = tmp_path / name
        nsqd.create_channels(TOPIC, name)
        common = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--channel={name}", f"--topic={TOPIC}"]
        options = ["--rotate-interval=200ms", "--skip-empty-files"]
        with running([*tool, *common, f"--output-dir={out}", *options, *NAMING]) as run:
            nsqd.publish(TOPIC, b"only")
            wait_until(lambda: fin_d(nsqd, TOPIC, name, 1), WAIT, "the message FIN'd")  # noqa: B023
            wait_until(lambda: not open_files(run.process, out), WAIT, "the file closed")  # noqa: B023
        assert archive_tree(out) == {"archive.host-000000.2026.log": b"only\n"}


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
            "--topic-pattern '(': missing ): (",
        ),
        (
            ["--topic-pattern=(?=x)", "--lookupd-http-address=127.0.0.1:4161"],
            "--topic-pattern '(?=x)': invalid perl operator: (?=",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--consumer-opt=nope,1"],
            "nope",
        ),
        (["--topic=bad topic", "--nsqd-tcp-address=127.0.0.1:4150"], "bad topic"),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--topic-pattern=^x"],
            "no --topic matches --topic-pattern",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--log-level=loud"],
            "--log-level is invalid",
        ),
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
