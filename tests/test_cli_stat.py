"""nsq_stat run as a user runs it, against real nsqds: side by side with Go's nsq_stat
(the same bytes without traffic, the same layout with it, the same checks and exit
statuses), then what Go's cannot do: every channel, a channel that appears, an nsqd
frozen or killed mid-run, JSON lines, and the live table in a real terminal (tmux) and
in a recorded rich console."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

import pytest
from rich.console import Console

from nsqtools.cluster import NodeStats
from nsqtools.commands.statview import stats_view
from nsqtools.httpapi import HttpApiError
from nsqtools.httpapi.nsqd import E2eLatency, Percentile
from nsqtools.stats.tracking import Tracker
from nsqtools.testing import Nsqd, find_binary, our_tool, running, wait_until
from tests.conftest import Cluster, LocalNsq
from tests.test_stats import TOPIC as EVENTS
from tests.test_stats import channel, node

OURS = our_tool("nsq_stat")
TOPIC = "stat"
WAIT = 20.0  # seconds: a condition that does not hold by then is a failure
GO_HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n"
)
GO_ROW = "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d"


def go_tool() -> list[str]:
    return [str(find_binary("nsq_stat"))]


def run(tool: Sequence[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*tool, *args], capture_output=True, text=True, timeout=60, check=False)


def side_by_side(*args: str) -> tuple[str, str]:
    """Go's and our stdout for the same arguments, both running at once."""
    processes = [
        subprocess.Popen([*tool, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for tool in (go_tool(), OURS)
    ]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        outputs.append(out)
    go, ours = outputs
    return go, ours


def row_numbers(line: str) -> tuple[int, ...]:
    """The 11 numbers of a Go row, checked to be laid out exactly as Go's format puts them."""
    numbers = tuple(int(field) for field in line.replace("|", " ").split())
    assert len(numbers) == 11, line
    assert GO_ROW % numbers == line
    return numbers


class Watched:
    """A running tool whose stdout and stderr lines are collected as they come."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._collect, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _collect(stream: IO[str] | None, lines: list[str]) -> None:
        assert stream is not None
        lines.extend(stream)

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Until the condition holds; the tool must still be running."""

        def done() -> bool:
            assert self.process.poll() is None, f"exited {self.process.returncode}: {self.err}"
            return condition()

        wait_until(done, WAIT, what)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.out)]

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        code = self.process.wait(timeout=WAIT)
        for reader in self.readers:
            reader.join(WAIT)
        return code


@contextmanager
def watched(*args: str) -> Iterator[Watched]:
    tool = Watched([*OURS, *args])
    try:
        yield tool
    finally:
        if tool.process.poll() is None:
            tool.process.kill()
            tool.process.wait()


@contextmanager
def traffic(nsqd: Nsqd, channel_name: str) -> Iterator[None]:
    """Messages published all along, and consumed from the channel by nsq_tail."""
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(0.005):  # paces the publisher: it is no synchronisation
            nsqd.publish_many(TOPIC, [b"message"] * 20)

    publisher = threading.Thread(target=publish, daemon=True)
    nsqd.create_channels(TOPIC, channel_name)
    tail = [*our_tool("nsq_tail"), f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}"]
    with running([*tail, f"--channel={channel_name}"]):
        publisher.start()
        try:
            wait_until(lambda: flowing(nsqd, channel_name), WAIT, "messages flowing")
            yield
        finally:
            stop.set()
            publisher.join()


def flowing(nsqd: Nsqd, channel_name: str) -> bool:
    """The consumer is there and messages have come through the channel."""
    stats = nsqd.channel_stats(TOPIC, channel_name)
    return stats.client_count == 1 and stats.message_count > 0


# -- side by side with Go's ------------------------------------------------------------


def test_without_traffic_the_output_is_gos_byte_for_byte(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "c")
    nsqd.publish_many(TOPIC, [b"waiting"] * 1234)
    address = f"-nsqd-http-address={nsqd.http_address}"
    go, ours = side_by_side(address, f"-topic={TOPIC}", "-channel=c", "-count=3", "-interval=100ms")
    assert ours == go
    assert go == GO_HEADER + (GO_ROW % (0, 0, 1234, 1234, 0, 0, 0, 0, 0, 1234, 0) + "\n") * 3


def test_with_traffic_the_rows_are_laid_out_as_gos(nsqd: Nsqd) -> None:
    with traffic(nsqd, "c"):
        address = f"--nsqd-http-address={nsqd.http_address}"
        go, ours = side_by_side(
            address, f"--topic={TOPIC}", "--channel=c", "--count=4", "--interval=200ms"
        )
    for output in go, ours:
        assert output.startswith(GO_HEADER)
        rows = [row_numbers(line) for line in output[len(GO_HEADER) :].splitlines()]
        assert len(rows) == 4
        # Ingress in some rows: a loaded machine may stall the publisher for a whole
        # interval, so not necessarily in every one.
        assert any(row[0] > 0 for row in rows), output
        assert [row[10] for row in rows] == [1] * 4, output  # the one nsq_tail


def test_the_header_comes_again_every_25_rows(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "c")
    args = [f"-nsqd-http-address={nsqd.http_address}", f"-topic={TOPIC}", "-channel=c"]
    go, ours = side_by_side(*args, "-count=26", "-interval=10ms")
    assert ours == go
    assert [i for i, line in enumerate(go.splitlines()) if line.startswith("---")] == [0, 26]


def test_it_runs_as_nsq_stat_too(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "c")
    args = [f"-nsqd-http-address={nsqd.http_address}", f"-topic={TOPIC}", "-channel=c"]
    umbrella = our_tool("nsq")
    result = run(umbrella, "stat", *args, "-count=1", "-interval=10ms")
    assert result.returncode == 0, result.stderr
    assert result.stdout == GO_HEADER + GO_ROW % ((0,) * 11) + "\n"


def test_help_shows_gos_options_first_then_ours() -> None:
    go, ours = run(go_tool(), "-h"), run(OURS, "-h")
    assert ours.returncode == go.returncode == 0
    sections = re.split(r"^(\S.*:)$", ours.stdout, flags=re.MULTILINE)
    assert sections[1::2] == [
        "Options of Go's nsq_stat:",
        "Output and delivery:",
        "Logging:",
        "Other options:",
    ]
    gos_own = set(re.findall(r"^  --?([\w-]+)", sections[2], re.MULTILINE)) - {"h"}
    assert gos_own == set(re.findall(r"^  -([\w-]+)", go.stderr, re.MULTILINE))


# (arguments, exit status, whether our message is Go's): {nsqd} is an nsqd's HTTP address.
CHECKS = [
    ([], 1, False),  # ours: --topic is required (--channel is optional)
    (["-topic=t"], 1, False),  # ours: an address is required
    (["-topic=t", "-channel=c", "-interval=0", "{nsqd}"], 1, True),
    (["-topic=t", "-channel=c", "-interval=-1s", "{nsqd}"], 1, True),
    (["-topic=t", "-channel=c", "-http-client-connect-timeout=0", "{nsqd}"], 1, True),
    (["-topic=t", "-channel=c", "-http-client-request-timeout=0", "{nsqd}"], 1, True),
    (["-topic=t", "-channel=c", "-count=0", "{nsqd}"], 1, True),
    (["-topic=t", "-channel=c", "-count=-2", "{nsqd}"], 1, True),
    (["-topic=t", "-channel=c"], 1, True),
    (["-topic=t", "-channel=c", "{nsqd}", "-lookupd-http-address=127.0.0.1:1"], 1, True),
    (["-topic=t", "-channel=c", "-nsqd-http-address=http://127.0.0.1:1"], 1, True),
    (["-topic=t", "-channel=c", "-lookupd-http-address=https://127.0.0.1:1"], 1, True),
    (["-topic=t", "-channel=c", "-nsqd-http-address=127.0.0.1:1"], 1, True),
    (["-topic=t", "-channel=c", "-lookupd-http-address=127.0.0.1:1"], 1, True),
    (["-topic=t", "-channel=c", "-count=abc", "{nsqd}"], 2, False),
    (["-topic=t", "-channel=c", "-count=1.5", "{nsqd}"], 2, False),
    (["-topic=t", "-channel=c", "-count=0x10", "{nsqd}"], 2, False),
    (["-topic=t", "-channel=c", "-count=99999999999", "{nsqd}"], 2, False),
    (["-topic=t", "-channel=c", "-interval=soon", "{nsqd}"], 2, False),
    (["-topic=t", "-channel=c", "-bogus", "{nsqd}"], 2, False),
]


def go_message(stderr: str) -> str:
    """Go's log.Fatal line without its timestamp and ERROR: prefix, and the reasons
    after "failed to query any nsqd:" (ours give them in their own words)."""
    message = re.sub(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (ERROR: )?", "", stderr.strip())
    return re.sub(r"(failed to query any \w+):.*", r"\1", message)


@pytest.mark.parametrize(
    ("args", "code", "same_message"), CHECKS, ids=[" ".join(args) or "none" for args, *_ in CHECKS]
)
def test_checks_exit_as_gos(nsqd: Nsqd, args: list[str], code: int, same_message: bool) -> None:
    args = [arg.format(nsqd=f"-nsqd-http-address={nsqd.http_address}") for arg in args]
    go, ours = run(go_tool(), *args), run(OURS, *args)
    assert go.returncode == code, go.stderr
    assert ours.returncode == code, ours.stderr
    lines = ours.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsq_stat: error: "), lines
    assert ours.stdout == ""
    if same_message:
        assert go_message(lines[0].removeprefix("nsq_stat: error: ")) == go_message(go.stderr)


# -- beyond Go's -----------------------------------------------------------------------


def test_without_a_channel_the_topic_and_every_channel(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "b", "a")
    nsqd.publish_many(TOPIC, [b"waiting"] * 7)
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}"]
    result = run(OURS, *args, "--count=1", "--interval=10ms")
    assert result.returncode == 0, result.stderr
    header = GO_HEADER[:-1] + " name\n"
    topic_row = "      0       0 |       0       0       0     -     - |       -       -"
    assert result.stdout == (
        f"{header}{topic_row}            7       - stat\n"
        f"{GO_ROW % (0, 0, 7, 7, 0, 0, 0, 0, 0, 7, 0)} stat/a\n"
        f"{GO_ROW % (0, 0, 7, 7, 0, 0, 0, 0, 0, 7, 0)} stat/b\n"
    )


def test_a_channel_that_does_not_exist_yet_is_said_then_shown(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC)
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=later"]

    def depths(stat: Watched) -> list[int]:
        return [row_numbers(line.rstrip("\n"))[2] for line in stat.out[2:]]

    with watched(*args, "--interval=50ms") as stat:
        stat.wait_for(lambda: any("not found" in line for line in stat.err), "not found")
        stat.wait_for(lambda: "".join(stat.out) == GO_HEADER, "the header")
        nsqd.create_channels(TOPIC, "later")
        nsqd.publish_many(TOPIC, [b"m"] * 3)
        stat.wait_for(lambda: 3 in depths(stat), "a row")
        assert stat.stop(signal.SIGHUP) == 0  # as Go's: SIGHUP stops too
    assert "channel(later) of topic(stat) found" in stat.err[-1]
    assert len(stat.err) == 2


def test_count_counts_rows_from_a_channel_that_appears_midway(nsqd: Nsqd) -> None:
    """--count=4 printed 2 rows on main: the polls before the channel were counted."""
    nsqd.create_channels(TOPIC)
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=later"]
    # 1s apart: the channel is made within the 4 s the run waits for it
    with watched(*args, "--count=4", "--interval=1s") as stat:
        stat.wait_for(lambda: any("not found" in line for line in stat.err), "not found")
        nsqd.create_channels(TOPIC, "later")
        assert stat.process.wait(timeout=WAIT) == 0, stat.err
        for reader in stat.readers:
            reader.join()
    assert "".join(stat.out[:2]) == GO_HEADER
    assert len(stat.out) == 2 + 4, stat.out


@pytest.mark.parametrize(
    ("where", "missing"),
    [
        ("--channel=nosuch", "channel(nosuch) in stats metadata for topic(stat)"),
        ("--topic=nosuch", "topic(nosuch)"),
    ],
)
def test_with_a_count_a_topic_or_channel_never_found_ends_the_run_with_exit_1(
    nsqd: Nsqd, where: str, missing: str
) -> None:
    """It never ended on main (Go's ends at the first poll, exit 1)."""
    nsqd.create_channels(TOPIC, "c")
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", where]
    result = run(OURS, *args, "--count=2", "--interval=10ms")
    assert result.returncode == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert re.fullmatch(
        rf"nsq_stat: error: failed to find {re.escape(missing)}: "
        r"missing from 3 polls in a row, over \d+\.\ds",
        last,
    ), last
    assert result.stdout.startswith(GO_HEADER[:-1])  # the header only: without a
    assert len(result.stdout.splitlines()) == 2  # channel, it names the rows


def test_a_frozen_then_killed_nsqd_is_shown_and_the_run_goes_on(local_nsq: LocalNsq) -> None:
    nsqds = [local_nsq.nsqd(name) for name in ("one", "two")]
    for index, each in enumerate(nsqds):
        each.create_channels(TOPIC, "c")
        each.publish_many(TOPIC, [b"m"] * (index + 1))
    addresses = [f"--nsqd-http-address={each.http_address}" for each in nsqds]
    one, two = nsqds

    def latest(stat: Watched) -> dict[str, Any]:
        return stat.records()[-1]

    def failing(stat: Watched, reason: str) -> bool:
        record = latest(stat)
        return [f["address"] for f in record["failures"]] == [two.http_address] and reason in (
            record["failures"][0]["error"]
        )

    args = [*addresses, f"--topic={TOPIC}", "--channel=c", "--format=json", "--interval=50ms"]
    with watched(*args, "--http-client-request-timeout=300ms") as stat:
        stat.wait_for(lambda: len(stat.out) > 0 and latest(stat)["rows"][0]["depth"] == 3, "3")
        with two.frozen():
            stat.wait_for(lambda: failing(stat, "timed out"), "the frozen nsqd shown")
            assert latest(stat)["rows"][0]["depth"] == 1  # the other one, still counted
        stat.wait_for(lambda: not latest(stat)["failures"], "the thawed nsqd back")
        two.kill()
        stat.wait_for(lambda: failing(stat, "connection refused"), "the killed nsqd shown")
        one.publish(TOPIC, b"more")
        stat.wait_for(lambda: latest(stat)["rows"][0]["depth"] == 2, "the live one polled")
        assert stat.stop() == 0
    said = "".join(stat.err)
    assert f"nsqd {two.http_address}: GET /stats: timed out" in said
    assert f"nsqd {two.http_address} answers again" in said
    assert f"nsqd {two.http_address}: GET /stats: connection refused" in said


def test_through_lookupd_each_nsqd_has_its_row(cluster2: Cluster) -> None:
    for each in cluster2.nsqds:
        each.create_channels(TOPIC, "c")
    cluster2.publish_many(TOPIC, lambda each: [b"m"] * (1 + cluster2.nsqds.index(each)))
    lookupd = f"--lookupd-http-address={cluster2.lookupd.http_address}"
    result = run(OURS, lookupd, f"--topic={TOPIC}", "--format=json", "--count=1", "--interval=10ms")
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    by_channel = {row["channel"]: row for row in record["rows"]}
    nodes = {node["address"]: node["message_count"] for node in by_channel["c"]["nodes"]}
    one, two = cluster2.nsqds
    assert nodes == {one.http_address: 1, two.http_address: 2}
    assert by_channel[None]["message_count"] == 1 + 2


def test_json_rates_are_over_the_measured_interval(nsqd: Nsqd) -> None:
    with traffic(nsqd, "c"):
        address = f"--nsqd-http-address={nsqd.http_address}"
        result = run(
            OURS,
            address,
            f"--topic={TOPIC}",
            "--channel=c",
            "--format=json",
            "--count=4",
            "--interval=100ms",
        )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 4
    total = 0
    for before, after in itertools.pairwise(records):
        (row_before,), (row_after,) = before["rows"], after["rows"]
        arrived = row_after["message_count"] - row_before["message_count"]
        total += arrived
        assert row_after["ingress_rate"] == pytest.approx(arrived / after["interval"])
        assert after["interval"] != 0.1  # measured, not the nominal interval
    # Some came (one interval of 100 ms may see none on a busy machine): the rates
    # above are not all 0 = 0 / interval.
    assert total > 0


def test_a_closed_pipe_ends_the_run_quietly(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "c")
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=c"]
    process = subprocess.Popen(
        [*OURS, *args, "--interval=20ms"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        assert [process.stdout.readline() for _ in range(3)][2].startswith(b"      0")
        process.stdout.close()
        assert process.wait(WAIT) == 0
        assert process.stderr.read() == b""
    finally:
        process.kill()
        process.wait()


def test_e2e_latency_percentiles_when_nsqd_tracks_them(local_nsq: LocalNsq) -> None:
    e2e = local_nsq.nsqd("e2e", extra_args=["--e2e-processing-latency-percentile=0.5,0.99"])
    e2e.create_channels(TOPIC, "c")
    e2e.publish_many(TOPIC, [b"m"] * 10)
    e2e.read(TOPIC, 10, channel="c")
    address = f"--nsqd-http-address={e2e.http_address}"
    result = run(OURS, address, f"--topic={TOPIC}", "--format=json", "--count=1", "--interval=10ms")
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    (row,) = [row for row in record["rows"] if row["channel"] == "c"]
    assert [p["quantile"] for p in row["e2e_processing_latency"]] == [0.5, 0.99]
    assert all(p["value"] > 0 for p in row["e2e_processing_latency"])


def test_a_signal_mid_poll_ends_the_run_at_once(nsqd: Nsqd) -> None:
    """A poll waiting on a frozen nsqd (a minute's timeout) does not hold the exit back."""
    nsqd.create_channels(TOPIC, "c")
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=c"]
    slow = ["--http-client-request-timeout=60s", "--format=json", "--interval=50ms"]
    with watched(*args, *slow) as stat:
        stat.wait_for(lambda: len(stat.out) > 0, "a record")
        with nsqd.frozen():
            tasks = f"/proc/{stat.process.pid}/task"
            stat.wait_for(lambda: len(os.listdir(tasks)) > 1, "a poll on its thread")
            assert stat.stop(signal.SIGINT) == 0
    assert stat.err == []


@pytest.mark.parametrize("output_format", ["plain", "json"])
def test_it_starts_without_trio_or_httpx(nsqd: Nsqd, output_format: str) -> None:
    """What nsq_stat imports is most of its start-up: Go's starts in a few ms."""
    nsqd.create_channels(TOPIC, "c")
    python, *code = OURS
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=c"]
    result = run(
        [python, "-X", "importtime", *code],
        *args,
        f"--format={output_format}",
        "--count=1",
        "--interval=10ms",
    )
    assert result.returncode == 0, result.stderr
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert imported.isdisjoint({"trio", "httpx", "httpcore", "anyio", "ssl", "rich"})


# -- the live table --------------------------------------------------------------------


def recorded(report_view: Any, width: int = 160) -> str:
    console = Console(record=True, width=width, force_terminal=True, file=io.StringIO())
    console.print(report_view)
    return console.export_text()


def test_the_table_has_a_row_per_nsqd_under_each_total() -> None:
    a, b = "127.0.0.1:4151", "127.0.0.1:4251"
    tracker = Tracker(EVENTS, None)
    for second in range(3):
        growing, steady = 10 * second**2, 2 * second  # 10/s then 30/s; 2/s
        nodes = [
            node(a, channel("c", message_count=growing, depth=5), messages=growing),
            node(b, channel("c", message_count=steady, paused=True), messages=steady),
        ]
        report = tracker.update(nodes, 100.0 + second, 1_800_000_000.0)
    lines = recorded(stats_view(report, 2.0)).splitlines()
    assert lines[0].startswith("nsq_stat  topic events  every 2s")
    assert [line.split()[0] for line in lines[3:]] == ["events", a, b, "c", a, b]
    assert lines[3].split()[:2] == ["events", "(topic)"]
    assert lines[6].split()[:5] == ["c", "paused", "32", "32", "5"]  # summed over the nsqds
    assert lines[6].split()[-2:] == ["▄█", "▄█"]  # 12/s then 32/s, in and out
    assert lines[7].split()[:4] == [a, "30", "30", "5"]


def test_the_table_shows_e2e_latency_failures_and_a_missing_channel() -> None:
    latency = E2eLatency(9, (Percentile(0.5, 1_500_000), Percentile(0.99, 42_000_000)))
    tracker = Tracker(EVENTS, "c")
    timed_out = HttpApiError("nsqd", "127.0.0.1:4251", "GET /stats: timed out")
    report = tracker.update(
        [
            node("127.0.0.1:4151", channel("c", e2e_processing_latency=latency)),
            NodeStats("127.0.0.1:4251", None, timed_out),
        ],
        100.0,
        1_800_000_000.0,
    )
    text = recorded(stats_view(report, 0.5))
    assert "e2e latency" in text and "p50 1.50ms  p99 42ms" in text
    assert "✗ nsqd 127.0.0.1:4251: GET /stats: timed out" in text
    missing = Tracker(EVENTS, "later").update([node("127.0.0.1:4151")], 100.0, 0.0)
    assert "channel later of topic events not found on any nsqd that answered: polling again" in (
        recorded(stats_view(missing, 0.5))
    )


_sessions = itertools.count()


@contextmanager
def terminal(argv: Sequence[str]) -> Iterator[Callable[[], str]]:
    """argv in a real terminal (a detached tmux session, 160x50, on a server of its
    own); yields what the screen shows now. The pane stays when the program exits."""
    server = ["tmux", "-L", f"nsqtools-stat-{os.getpid()}-{next(_sessions)}", "-f", os.devnull]
    start = [*server, "start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";"]
    # Not the process's environment as inherited: readline (which pytest loads) puts
    # COLUMNS=80 and LINES=24 in it, and rich would believe them over the terminal.
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    subprocess.run(
        [*start, "new-session", "-d", "-s", "stat", "-x", "160", "-y", "50", shlex.join(argv)],
        env=environment,
        check=True,
    )
    try:
        yield (
            lambda: (
                subprocess.run(
                    [*server, "capture-pane", "-p", "-t", "stat"], capture_output=True, text=True
                ).stdout
            )
        )
    finally:
        subprocess.run([*server, "kill-server"], check=False)


def test_on_a_terminal_the_table_is_redrawn_in_place(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "c")
    nsqd.publish_many(TOPIC, [b"m"] * 41)
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=c"]
    with terminal([*OURS, *args, "--interval=100ms"]) as screen:
        wait_until(lambda: "poll 3" in screen(), WAIT, "a few polls drawn")
        assert re.search(r"^c +0\.0 +0\.0 +41 +41 +0 ", screen(), re.MULTILINE), screen()
        nsqd.publish_many(TOPIC, [b"m"] * 1000)
        redrawn = re.compile(r"^c .* 1,041 ", re.MULTILINE)
        wait_until(lambda: bool(redrawn.search(screen())), WAIT, "redrawn")
        shown = screen()
        assert shown.count("nsq_stat  topic stat  channel c") == 1, shown  # in place
        assert "in/s history" in shown


def test_piped_table_prints_the_last_drawing_once(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "c")
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}", "--channel=c"]
    result = run(OURS, *args, "--format=table", "--count=2", "--interval=10ms")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("nsq_stat  topic stat  channel c") == 1
    assert "poll 3" in result.stdout
