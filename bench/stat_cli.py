"""Issue 12's nsq_stat measure: wall time from start to exit of
`nsq_stat --count 1 --interval 100ms`, ours and Go's, on the same nsqd (a topic with one
channel), alternating which goes first; every run, the medians, the difference.

Both poll twice (a baseline, then the row) one interval apart; Go's then sleeps one more
interval before it exits, ours exits at once. So beside the wall times it prints each
tool's time less its own waiting (Go: 2 intervals, ours: 1): what start-up and polling
cost.

    .venv/bin/python bench/stat_cli.py [--runs R] [--interval-ms MS]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from harness import compile_package

from nsqtools.testing import Nsqd, find_binary, our_tool

TOPIC = "bench"
CHANNEL = "stat"
WAITED_INTERVALS = {"go": 2, "ours": 1}


def tools() -> dict[str, list[str]]:
    # Ours runs from this checkout, as its console script would (the same imports).
    return {"go": [str(find_binary("nsq_stat"))], "ours": our_tool("nsq_stat")}


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(nsqd: Nsqd, runs: int, interval_ms: int) -> None:
    args = [
        f"--nsqd-http-address={nsqd.http_address}",
        f"--topic={TOPIC}",
        f"--channel={CHANNEL}",
        "--count=1",
        f"--interval={interval_ms}ms",
    ]
    times: dict[str, list[float]] = {"go": [], "ours": []}
    for run in range(runs):
        names = ["go", "ours"] if run % 2 == 0 else ["ours", "go"]
        for name in names:
            elapsed = timed([*tools()[name], *args])
            times[name].append(elapsed)
            print(f"run {run + 1} {name:>4}: {elapsed * 1000:.0f} ms")
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    own = {name: medians[name] - WAITED_INTERVALS[name] * interval_ms for name in medians}
    print(
        f"start to exit, medians: go {medians['go']:.0f} ms, ours {medians['ours']:.0f} ms: "
        f"ours - go = {medians['ours'] - medians['go']:+.0f} ms (target under 100 ms)"
    )
    print(
        f"less each one's waiting (go {WAITED_INTERVALS['go']} x {interval_ms} ms, ours "
        f"{WAITED_INTERVALS['ours']} x {interval_ms} ms): go {own['go']:.0f} ms, "
        f"ours {own['ours']:.0f} ms: ours - go = {own['ours'] - own['go']:+.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--interval-ms", type=int, default=100)
    args = parser.parse_args()
    compile_package()
    with (
        tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp,
        Nsqd(Path(tmp) / "nsqd") as nsqd,
    ):
        assert isinstance(nsqd, Nsqd)
        nsqd.create_channels(TOPIC, CHANNEL)
        nsqd.publish_many(TOPIC, [b"waiting"] * 100)
        measure(nsqd, args.runs, args.interval_ms)


if __name__ == "__main__":
    main()
