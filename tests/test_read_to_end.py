"""--exit-at-end (nsq_tail, nsq_to_file): read what the channel holds, then exit 0.

Run as a user runs the tools, against real nsqd (one, or two behind nsqlookupd): exact
counts, exit status, and nsqd's /stats afterwards (every message FIN'd: channel depth 0,
nothing in flight, nothing requeued or timed out).
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
from pathlib import Path

from nsqtools.testing import Nsqd, holds_throughout, our_tool, running, wait_until
from tests.conftest import Cluster
from tests.test_cli_to_file import NAMING, archive_tree, bodies

TAIL = our_tool("nsq_tail")
TO_FILE = our_tool("nsq_to_file")
TIMEOUT = 60


def run(tool: list[str], *args: str) -> subprocess.CompletedProcess[bytes]:
    """The tool, expected to exit by itself."""
    return subprocess.run([*tool, *args], capture_output=True, timeout=TIMEOUT, check=False)


def all_fin_d(nsqd: Nsqd, topic: str, channel: str, count: int) -> bool:
    """`count` messages came to the channel, and each was FIN'd on its first delivery."""
    stats = nsqd.channel_stats(topic, channel)
    return (
        nsqd.topic_depth(topic) == stats.depth == stats.in_flight_count == 0
        and stats.message_count == count
        and stats.requeue_count == stats.timeout_count == 0
    )


def test_tail_prints_what_is_there_and_exits_0(nsqd: Nsqd) -> None:
    published = [b"%d" % index for index in range(500)]
    nsqd.publish_many("end", published)
    result = run(
        TAIL, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=end", "--channel=all",
        "--exit-at-end", "--max-in-flight=50",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == published  # one nsqd: in order
    assert all_fin_d(nsqd, "end", "all", 500)


def test_an_empty_channel_ends_quickly(nsqd: Nsqd) -> None:
    nsqd.create_channels("empty", "none")
    started = time.monotonic()
    result = run(
        TAIL, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=empty", "--channel=none",
        "--exit-at-end",
    )  # fmt: skip
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert took < 10, f"{took:.1f}s"


def test_a_frozen_nsqd_is_not_taken_for_an_empty_one(nsqd: Nsqd) -> None:
    """nsqd frozen (SIGSTOP) once subscribed sends nothing, heartbeats included: however
    quiet, the run does not end while it is frozen. Thawed, its channel is found empty
    and the run ends by itself, exit 0."""
    nsqd.create_channels("still", "quiet")
    argv = [
        *TAIL, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=still", "--channel=quiet",
        "--exit-at-end",
    ]  # fmt: skip
    with running(argv) as tool:
        wait_until(lambda: nsqd.channel_stats("still", "quiet").client_count == 1, 30, "subscribed")
        with nsqd.frozen():  # the fault: 3 s, three times the quiet that ends a run
            holds_throughout(lambda: tool.process.poll() is None, 3.0, "the run")
        wait_until(lambda: tool.process.poll() is not None, 30, "the end, once thawed")


def test_n_or_the_end_whichever_comes_first(nsqd: Nsqd) -> None:
    nsqd.publish_many("end", [b"%d" % index for index in range(10)])
    common = [f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=end", "--channel=n"]
    first = run(TAIL, *common, "--exit-at-end", "-n", "4", "--format=json")
    assert first.returncode == 0, first.stderr
    envelopes = [json.loads(line) for line in first.stdout.splitlines()]
    assert [envelope["body"] for envelope in envelopes] == ["0", "1", "2", "3"]
    rest = run(TAIL, *common, "--exit-at-end", "-n", "100", "--format=json")
    assert rest.returncode == 0, rest.stderr
    envelopes = [json.loads(line) for line in rest.stdout.splitlines()]
    assert [envelope["body"] for envelope in envelopes] == [str(i) for i in range(4, 10)]
    assert all(envelope["attempts"] == 1 for envelope in envelopes)
    assert all_fin_d(nsqd, "end", "n", 10)


def numbered(nsqd: Nsqd, topic: str, count: int) -> list[bytes]:
    return [f"{nsqd.name}-{topic}-{i}".encode() for i in range(count)]


def published_on(cluster: Cluster) -> dict[str, list[str]]:
    """Two topics on each of two nsqds, counts that differ: body → its topic."""
    expected: dict[str, list[str]] = {}
    for topic, count in (("left", 37), ("right", 120)):
        cluster.publish_many(topic, functools.partial(numbered, topic=topic, count=count))
        expected[topic] = sorted(
            f"{nsqd.name}-{topic}-{i}" for nsqd in cluster.nsqds for i in range(count)
        )
    return expected


def test_tail_two_topics_on_two_nsqds_through_lookupd(cluster2: Cluster) -> None:
    expected = published_on(cluster2)
    result = run(
        TAIL, f"--lookupd-http-address={cluster2.lookupd.http_address}", "--topic=left",
        "--topic=right", "--channel=both", "--exit-at-end", "--format=json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    got: dict[str, list[str]] = {"left": [], "right": []}
    for line in result.stdout.splitlines():
        envelope = json.loads(line)
        got[envelope["topic"]].append(envelope["body"])
    assert {topic: sorted(found) for topic, found in got.items()} == expected
    for nsqd in cluster2.nsqds:
        assert all_fin_d(nsqd, "left", "both", 37)
        assert all_fin_d(nsqd, "right", "both", 120)


def test_tail_n_below_what_two_nsqds_hold_through_their_addresses(cluster2: Cluster) -> None:
    """-n 3 over two nsqds: max_in_flight is 3, so RDY is spread thin; -n ends it."""
    published_on(cluster2)
    addresses = [f"--nsqd-tcp-address={nsqd.tcp_address}" for nsqd in cluster2.nsqds]
    result = run(TAIL, *addresses, "--topic=left", "--channel=few", "--exit-at-end", "-n", "3")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3


def test_an_nsqd_that_cannot_be_reached_is_exit_1(cluster2: Cluster) -> None:
    """nsqlookupd lists a frozen nsqd (its registration stays open): the set-up times
    out (read_timeout), what it holds cannot be read, so the run stops cleanly and says
    so; the other nsqd's messages that were printed are FIN'd, the rest stay."""
    published_on(cluster2)
    reachable, frozen = cluster2.nsqds
    with frozen.frozen():
        result = run(
            TAIL, f"--lookupd-http-address={cluster2.lookupd.http_address}", "--topic=left",
            "--channel=half", "--exit-at-end", "--consumer-opt=read_timeout,2s",
            "--consumer-opt=heartbeat_interval,1s",
        )  # fmt: skip
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1, lines
    assert lines[-1].startswith("nsq_tail: error: ")
    assert frozen.tcp_address.rsplit(":", 1)[1] in lines[-1]
    assert "was not read" in lines[-1]
    printed = len(result.stdout.splitlines())
    # nsqd reads the last FINs as they come, maybe after the exit; its msg_timeout is 60 s.
    wait_until(lambda: reachable.channel_stats("left", "half").in_flight_count == 0, 10, "FINs")
    assert reachable.channel_stats("left", "half").depth + printed == 37


def test_to_file_drains_a_topic_into_final_files(nsqd: Nsqd, tmp_path: Path) -> None:
    """A sync interval far longer than the run: the files are synced, FIN'd, closed and
    moved from the work dir to their final names by the end itself."""
    published = bodies(3000)
    nsqd.publish_many("archive", published)
    out, work = tmp_path / "out", tmp_path / "work"
    result = run(
        TO_FILE, f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=archive",
        f"--output-dir={out}", f"--work-dir={work}", "--gzip", "--sync-interval=10m",
        "--exit-at-end", *NAMING[:2],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    tree = archive_tree(out)
    assert list(tree) == ["archive.host-000000.2026.log.gz"]
    assert tree["archive.host-000000.2026.log.gz"].splitlines() == published
    assert archive_tree(work) == {}
    assert all_fin_d(nsqd, "archive", "nsq_to_file", 3000)


def test_to_file_finds_topics_through_lookupd_and_drains_them(
    cluster2: Cluster, tmp_path: Path
) -> None:
    expected = published_on(cluster2)
    out = tmp_path / "out"
    result = run(
        TO_FILE, f"--lookupd-http-address={cluster2.lookupd.http_address}",
        "--topic-pattern=^(left|right)$", f"--output-dir={out}", "--exit-at-end", *NAMING,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    tree = archive_tree(out)
    assert sorted(tree) == ["left.host.2026.log", "right.host.2026.log"]
    for topic, wanted in expected.items():
        assert sorted(tree[f"{topic}.host.2026.log"].decode().splitlines()) == wanted
    for nsqd in cluster2.nsqds:
        assert all_fin_d(nsqd, "left", "nsq_to_file", 37)
        assert all_fin_d(nsqd, "right", "nsq_to_file", 120)


def test_rdy_scarcer_than_nsqds_still_reaches_the_end(cluster2: Cluster) -> None:
    """-n 1 over two empty nsqds: RDY 1 goes to one nsqd at a time; each found empty in
    turn (an nsqd found so stays so until it sends something), then the end. A unit is
    held until the next redistribution at least (2s here, 5s by default): more than the
    1s of quiet that finds an nsqd empty."""
    for nsqd in cluster2.nsqds:
        nsqd.create_channels("vacant", "rotating")
    addresses = [f"--nsqd-tcp-address={nsqd.tcp_address}" for nsqd in cluster2.nsqds]
    result = run(
        TAIL, *addresses, "--topic=vacant", "--channel=rotating", "--exit-at-end", "-n", "1",
        "--consumer-opt=low_rdy_idle_timeout,2s", "--consumer-opt=rdy_redistribute_interval,2s",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
