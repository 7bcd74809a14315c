"""`nsq bench` run as a user runs it, against a real nsqd: the figures it reports agree
with what nsqd saw and with each other (tables, JSON, CSV), its own topic is gone
after, bad input is one line and a non-zero exit, progress only on a terminal.

Runs are count-based and small; nothing here asserts on a time or a rate.
"""

from __future__ import annotations

import csv
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nsqtools.testing import Nsqd, find_binary, our_tool, wait_until
from tests.conftest import Cluster

NSQ = our_tool("nsq")
EXIT_INTERRUPTED = 130
LATENCY_NAMES = ["p50", "p90", "p99", "p99.9", "max"]


def nsq_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NSQ, "bench", *args], capture_output=True, text=True, timeout=120, check=False
    )


def addresses(nsqd: Nsqd) -> list[str]:
    return [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--nsqd-http-address={nsqd.http_address}"]


def topics(nsqd: Nsqd) -> list[str]:
    return [topic.topic_name for topic in nsqd.stats().topics]


def table_figures(stdout: str, row: str) -> list[str]:
    """The cells of a row of the summary tables, as printed."""
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│┃|]", line) if cell.strip()]
        if cells and cells[0] == row:
            return cells[1:]
    raise AssertionError(f"no row {row!r} in:\n{stdout}")


def latency_row(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    heading = next(index for index, line in enumerate(lines) if "p99.9" in line)
    row = next(line for line in lines[heading + 1 :] if re.search(r"\d", line))
    return [cell.strip() for cell in re.split(r"[│|]", row) if cell.strip()]


def check_agreement(stdout: str, document: dict[str, Any], row: dict[str, str]) -> None:
    """The tables, the JSON and the CSV row give the same figures."""
    for role in ("publish", "consume"):
        figures = document[role]
        if figures is None:
            assert row[f"{role}_messages"] == ""
            continue
        assert table_figures(stdout, role) == [
            f"{figures['messages']:,}",
            f"{figures['seconds']:.3f}",
            f"{figures['msg_per_s']:,.0f}",
            f"{figures['mib_per_s']:,.2f}",
        ]
        for name, value in figures.items():
            assert float(row[f"{role}_{name}"]) == value
    latency = document["latency_ms"]
    if latency is not None:
        assert latency_row(stdout) == [f"{latency[name]:,.3f}" for name in LATENCY_NAMES]
        assert [float(row[f"latency_ms_{name}"]) for name in LATENCY_NAMES] == [
            latency[name] for name in LATENCY_NAMES
        ]
    assert row["settings_topic"] == document["settings"]["topic"]


def run_with_files(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """A run that must succeed: its tables, its JSON, its CSV row."""
    json_file, csv_file = tmp_path / "bench.json", tmp_path / "bench.csv"
    result = nsq_bench(*args, f"--json={json_file}", f"--csv={csv_file}")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress when stderr is not a terminal
    document = json.loads(json_file.read_text())
    with csv_file.open() as rows:
        [row] = list(csv.DictReader(rows))
    check_agreement(result.stdout, document, row)
    return result.stdout, document, row


def assert_ordered_latencies(document: dict[str, Any]) -> None:
    latency = document["latency_ms"]
    figures = [latency[name] for name in LATENCY_NAMES]
    assert figures == sorted(figures)
    assert figures[0] >= 0


def test_publishing_and_consuming_at_once_every_message_is_consumed(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    _, document, _ = run_with_files(
        tmp_path, *addresses(nsqd), "--count=20000", "--size=64", "--batch-size=100",
        "--publishers=3", "--consumers=2",
    )  # fmt: skip
    assert document["publish"]["messages"] == document["consume"]["messages"] == 20000
    assert document["consume"]["mib_per_s"] > 0
    assert document["unstamped"] == 0
    assert_ordered_latencies(document)
    assert document["settings"]["topic"].startswith("bench-")
    assert topics(nsqd) == []  # its own topic, deleted


def test_in_several_processes(nsqd: Nsqd, tmp_path: Path) -> None:
    _, document, _ = run_with_files(
        tmp_path, *addresses(nsqd), "--count=5001", "--batch-size=50", "--publishers=3",
        "--consumers=2", "--processes=2", "--in-flight=2", "--rdy=50",
    )  # fmt: skip
    assert document["publish"]["messages"] == document["consume"]["messages"] == 5001
    assert document["settings"]["processes"] == 2


def test_publishing_alone_fills_the_topic_it_is_given(nsqd: Nsqd, tmp_path: Path) -> None:
    _, document, row = run_with_files(
        tmp_path, *addresses(nsqd), "--mode=publish", "--topic=filled", "--count=3000"
    )
    assert document["publish"]["messages"] == 3000
    assert document["consume"] is None and document["latency_ms"] is None
    assert row["consume_messages"] == row["latency_ms_p50"] == ""
    assert nsqd.topic_depth("filled") == 3000  # a topic given is kept


def test_consuming_alone_drains_a_channel_filled_by_a_publishing_run(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    nsqd.create_channels("filled", "drain")
    publish = nsq_bench(*addresses(nsqd), "--mode=publish", "--topic=filled", "--count=4000")
    assert publish.returncode == 0, publish.stderr
    _, document, _ = run_with_files(
        tmp_path, *addresses(nsqd), "--mode=consume", "--topic=filled", "--channel=drain",
        "--count=4000", "--consumers=3",
    )  # fmt: skip
    assert document["consume"]["messages"] == 4000
    assert document["publish"] is None
    assert_ordered_latencies(document)  # the age of each message, from its stamp
    wait_until(lambda: nsqd.emptied("filled", "drain"), 10, "the channel emptied")


def test_bodies_of_other_publishers_count_as_unstamped(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.create_channels("foreign", "drain")
    nsqd.publish_many("foreign", [b"not a stamp %d" % index for index in range(300)])
    stdout, document, _ = run_with_files(
        tmp_path, *addresses(nsqd), "--mode=consume", "--topic=foreign", "--channel=drain",
        "--count=300",
    )  # fmt: skip
    assert document["consume"]["messages"] == document["unstamped"] == 300
    assert document["latency_ms"] is None
    assert "300 messages consumed carried no stamp" in stdout


def test_a_duration_bounds_the_publishing(nsqd: Nsqd) -> None:
    result = nsq_bench(*addresses(nsqd), "--duration=300ms", "--json=-", "--rate=20000")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # "-": the JSON alone on stdout
    assert document["publish"]["messages"] == document["consume"]["messages"] > 0
    assert document["settings"]["duration_s"] == 0.3


def test_consumers_find_nsqd_through_nsqlookupd(cluster: Cluster) -> None:
    nsqd = cluster.nsqd
    result = nsq_bench(
        *addresses(nsqd), f"--lookupd-http-address={cluster.lookupd.http_address}",
        "--count=2000", "--csv=-",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [row] = list(csv.DictReader(result.stdout.splitlines()))
    assert row["publish_messages"] == row["consume_messages"] == "2000"
    assert topics(nsqd) == []


def test_go_nsq_options_reach_each_roles_connections(nsqd: Nsqd) -> None:
    result = nsq_bench(
        *addresses(nsqd), "--count=1000", "--producer-opt=deflate",
        "--consumer-opt=snappy", "--consumer-opt=output_buffer_size,-1", "--json=-",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["consume"]["messages"] == 1000
    assert document["settings"]["producer_options"] == ["deflate"]
    assert document["settings"]["consumer_options"] == ["snappy", "output_buffer_size,-1"]
    # nsqd's own refusal of a consumer's IDENTIFY: the option did reach it
    refused = nsq_bench(*addresses(nsqd), "--count=10", "--consumer-opt=output_buffer_timeout,1ms")
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert "E_BAD_BODY IDENTIFY output buffer timeout" in line
    assert topics(nsqd) == []


def test_csv_rows_add_up_in_one_file(nsqd: Nsqd, tmp_path: Path) -> None:
    csv_file = tmp_path / "runs.csv"
    for size in (16, 32):
        result = nsq_bench(*addresses(nsqd), "--mode=publish", "--count=100", f"--size={size}",
                           f"--csv={csv_file}")  # fmt: skip
        assert result.returncode == 0, result.stderr
    with csv_file.open() as rows:
        assert [row["settings_size"] for row in csv.DictReader(rows)] == ["16", "32"]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--size=7"], "--size must be at least 8 bytes"),
        (["--count=0"], "--count must be at least 1"),
        (["--count=10", "--duration=1s"], "--count or --duration, not both"),
        (["--mode=consume"], "--mode consume needs --topic"),
        (["--topic=bad topic"], "topic"),
        (["--publishers=0"], "--publishers must be at least 1"),
        (["--consumer-opt=bogus,1"], 'unknown option "bogus"'),
        (["--json=-", "--csv=-"], "only one of them can have stdout"),
    ],
)
def test_bad_input_is_one_line_and_a_failure(nsqd: Nsqd, args: list[str], problem: str) -> None:
    result = nsq_bench(*addresses(nsqd), *args)
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("nsq: error: ")
    assert problem in line
    assert topics(nsqd) == []


def test_an_unreachable_nsqd_is_one_line_and_a_failure(nsqd: Nsqd) -> None:
    port = nsqd.tcp_address.rsplit(":", 1)[1]
    nsqd.stop()
    result = nsq_bench(f"--nsqd-tcp-address=127.0.0.1:{port}", "--count=10")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("nsq: error: ") and port in line and "refused" in line


def test_an_http_address_of_another_nsqd_is_refused_before_anything_runs(
    cluster2: Cluster,
) -> None:
    first, second = cluster2.nsqds
    result = nsq_bench(
        f"--nsqd-tcp-address={first.tcp_address}", f"--nsqd-http-address={second.http_address}",
        "--count=10",
    )  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert "give its own --nsqd-http-address" in line
    assert topics(first) == topics(second) == []


@pytest.mark.slow
def test_on_a_terminal_progress_bars_and_the_first_sigint_ends_with_the_summary(
    nsqd: Nsqd,
) -> None:
    controller, terminal = os.openpty()
    process = subprocess.Popen(
        [*NSQ, "bench", *addresses(nsqd), "--duration=5m", "--rate=10000", "--json=-"],
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    shown = read_terminal_until(controller, rb"publish.* [1-9][\d,]* msgs .* msg/s")
    process.send_signal(signal.SIGINT)  # the command alone: its workers get no signal
    stdout, _ = process.communicate(timeout=60)
    os.close(controller)
    assert process.returncode == EXIT_INTERRUPTED
    document = json.loads(stdout)
    assert document["interrupted"] is True
    assert document["publish"]["messages"] > 0
    assert b"consume" in shown
    assert topics(nsqd) == []


def read_terminal_until(controller: int, wanted: bytes) -> bytes:
    shown, deadline = b"", time.monotonic() + 30
    while not re.search(wanted, shown):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no progress bars on the terminal: {shown!r}"
        if select.select([controller], [], [], remaining)[0]:
            shown += os.read(controller, 65536)
    return shown


def test_nsqs_own_bench_writer_and_bench_reader_are_built() -> None:
    for tool, flag in (("bench_writer", "-batch-size"), ("bench_reader", "-rdy")):
        result = subprocess.run(
            [str(find_binary(tool)), "-h"], capture_output=True, timeout=30, check=False
        )
        assert flag.encode() in result.stderr
