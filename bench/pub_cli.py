"""Issue 5's to_nsq measure: `to_nsq < file` of N lines (99 bytes + newline), whole
processes side by side with the Go to_nsq on one nsqd, alternating, medians.

Each run publishes to a fresh topic and checks the topic depth reached N; the topic is
deleted afterwards so nsqd's memory does not grow from run to run.

    .venv/bin/python bench/pub_cli.py [--messages N] [--runs R]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nsqtools.testing import Nsqd, find_binary

OURS = str(Path(sys.executable).parent / "to_nsq")


def publish(tool: str, nsqd: Nsqd, topic: str, lines: Path) -> float:
    argv = [tool, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={topic}"]
    with lines.open("rb") as stdin:
        started = time.perf_counter()
        subprocess.run(
            argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tools = {"go": str(find_binary("to_nsq")), "ours": OURS}
    rates: dict[str, list[float]] = {name: [] for name in tools}
    with tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp:
        lines = Path(tmp) / "lines.txt"
        lines.write_bytes(
            b"".join(b"%08d" % index + b"x" * 91 + b"\n" for index in range(args.messages))
        )
        queue = f"--mem-queue-size={args.messages + 10}"
        with Nsqd(Path(tmp) / "nsqd", extra_args=[queue]) as nsqd:
            assert isinstance(nsqd, Nsqd)
            for run in range(args.runs):
                for name in ("go", "ours") if run % 2 == 0 else ("ours", "go"):
                    topic = f"{name}{run}"
                    elapsed = publish(tools[name], nsqd, topic, lines)
                    depth = nsqd.topic_depth(topic)
                    assert depth == args.messages, f"{name}: depth {depth}"
                    nsqd.delete_topic(topic)
                    rates[name].append(args.messages / elapsed)
                    print(
                        f"run {run + 1} {name:>4}: {args.messages / elapsed:>11,.0f} msg/s",
                        flush=True,
                    )
    go, ours = statistics.median(rates["go"]), statistics.median(rates["ours"])
    ratio = ours / go
    print(f"medians: go {go:,.0f} msg/s, ours {ours:,.0f} msg/s: ours/go {ratio:.1f}x (target 30x)")


if __name__ == "__main__":
    main()
