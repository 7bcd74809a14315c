"""Issue 12's `nsq topics` measure: a cluster of 2 nsqds behind one nsqlookupd holding
200 topics of 5 channels each (10 messages per topic on each nsqd), and the wall time of
the whole `nsq topics --lookupd-http-address=...` process, start to exit, its table
read from a pipe; several runs, the median. The target is under 1 s: the lookupd and
the nsqds are asked at once.

Beside it, for where the time goes: `nsq topics --json`, and `nsq topics --help`
(starting Python and importing the command, no request).

    .venv/bin/python bench/inspect_cli.py [--topics 200] [--channels 5] [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from harness import compile_package

from nsqtools.httpapi import lookupd as lookupd_api
from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi import send_sync
from nsqtools.testing import Nsqd, Nsqlookupd, our_tool, wait_until

MESSAGES_PER_TOPIC = 10
TARGET_SECONDS = 1.0


def build(nsqds: list[Nsqd], lookupd: Nsqlookupd, topics: int, channels: int) -> None:
    """Every topic with its channels and messages on every nsqd, all registered."""
    names = [f"topic{index:03d}" for index in range(topics)]
    with httpx.Client(timeout=30) as client:
        for nsqd in nsqds:
            for topic in names:
                send_sync(client, nsqd_api.create_topic(nsqd.http_address, topic))
                for channel in range(channels):
                    call = nsqd_api.create_channel(nsqd.http_address, topic, f"channel{channel}")
                    send_sync(client, call)
                bodies = [b"%d" % index for index in range(MESSAGES_PER_TOPIC)]
                send_sync(client, nsqd_api.mpub(nsqd.http_address, topic, bodies))

        def registered() -> bool:
            listed = send_sync(client, lookupd_api.nodes(lookupd.http_address))
            return len(listed) == len(nsqds) and all(len(n.topics) == topics for n in listed)

        wait_until(registered, 60, f"{topics} topics of {len(nsqds)} nsqds registered")


def timed(argv: list[str], rows: int | None) -> float:
    """Wall seconds from start to exit; with `rows`, the table must have that many."""
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv[-3:])} failed: {result.stderr.strip()}")
    if rows is not None and len(result.stdout.splitlines()) != rows + 1:
        raise SystemExit(f"expected {rows} topics, got:\n{result.stdout[:500]}")
    return elapsed


def measure(lookupd: Nsqlookupd, topics: int, runs: int) -> None:
    nsq = [*our_tool("nsq"), "topics", f"--lookupd-http-address={lookupd.http_address}"]
    cases = {
        "nsq topics": (nsq, topics),
        "nsq topics --json": ([*nsq, "--json"], None),
        "nsq topics --help": ([*nsq, "--help"], None),
    }
    timed(nsq, topics)  # warm the page cache
    medians = {}
    for name, (argv, rows) in cases.items():
        times = [timed(argv, rows) for _ in range(runs)]
        medians[name] = statistics.median(times)
        listed = " ".join(f"{seconds * 1000:.0f}" for seconds in times)
        print(f"{name:<20} runs (ms): {listed}  median {medians[name] * 1000:.0f} ms")
    verdict = "under" if medians["nsq topics"] < TARGET_SECONDS else "OVER"
    print(f"nsq topics: median {medians['nsq topics'] * 1000:.0f} ms, {verdict} the 1 s target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-inspect-") as folder:
        root = Path(folder)
        lookupd = Nsqlookupd(root / "lookupd", "nsqlookupd")
        lookupd.start()
        nsqds = [Nsqd(root / f"nsqd{i}", f"nsqd{i}", lookupds=[lookupd]) for i in (1, 2)]
        try:
            for nsqd in nsqds:
                nsqd.start()
            started = time.perf_counter()
            build(nsqds, lookupd, args.topics, args.channels)
            print(
                f"cluster: 2 nsqds, {args.topics} topics x {args.channels} channels "
                f"(built in {time.perf_counter() - started:.1f} s)"
            )
            measure(lookupd, args.topics, args.runs)
        finally:
            for process in (*nsqds, lookupd):
                process.stop()


if __name__ == "__main__":
    main()
