"""Publishing throughput: our Producer (put + flush) against the Go to_nsq, side by side.

Starts its own nsqd in a temp dir (a memory queue large enough that nsqd is not
disk-bound), writes N lines of 99 characters, and in each run publishes them with
ours and with to_nsq (which reads them from stdin), which one goes first alternating,
each to a fresh topic. Each topic's depth must reach N; it is then deleted so that
nsqd's memory (and its Go GC work) is the same for every run. Prints messages per
second per run, the medians and the ratio ours/Go.

    .venv/bin/python bench/publish.py [--messages N] [--runs R]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from nsqtools.producer import open_producer
from nsqtools.testing import Nsqd, find_binary

LINE_LENGTH = 99
READ_SIZE = 1024 * 1024
TARGET_RATIO = 30


def write_input(path: Path, count: int) -> None:
    filler = b"x" * (LINE_LENGTH - 9)
    with path.open("wb") as output:
        for start in range(0, count, 10_000):
            end = min(start + 10_000, count)
            output.write(b"".join(b"%09d%s\n" % (index, filler) for index in range(start, end)))


async def publish_ours(address: str, topic: str, source: Path) -> None:
    """What to_nsq does: split the input on newlines, publish each non-empty record."""
    async with open_producer([address]) as producer:
        with source.open("rb") as lines:
            rest = b""
            while chunk := lines.read(READ_SIZE):
                records = (rest + chunk).split(b"\n")
                rest = records.pop()
                for record in records:
                    if record:
                        await producer.put(topic, record)
            if rest:
                await producer.put(topic, rest)
    if producer.failed:
        raise RuntimeError(f"ours: {producer.failed} failed: {dict(producer.failure_reasons)}")


def run_ours(address: str, topic: str, source: Path) -> None:
    trio.run(publish_ours, address, topic, source)


def run_go(address: str, topic: str, source: Path) -> None:
    to_nsq = str(find_binary("to_nsq"))
    with source.open("rb") as lines:
        result = subprocess.run(
            [to_nsq, f"--nsqd-tcp-address={address}", f"--topic={topic}"],
            stdin=lines,
            capture_output=True,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"to_nsq exited {result.returncode}: {result.stderr.decode()[-500:]}")


def measure(
    nsqd: Nsqd, publish: Callable[[str, str, Path], None], topic: str, source: Path, count: int
) -> float:
    """Messages per second of one publishing run, checked against the topic's depth."""
    started = time.perf_counter()
    publish(nsqd.tcp_address, topic, source)
    elapsed = time.perf_counter() - started
    depth = nsqd.topic_depth(topic)
    if depth != count:
        raise RuntimeError(f"topic {topic} has depth {depth}, expected {count}")
    nsqd.delete_topic(topic)
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tools = {"ours": run_ours, "go": run_go}
    rates: dict[str, list[float]] = {name: [] for name in tools}
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as scratch:
        source = Path(scratch) / "input.txt"
        write_input(source, args.messages)
        queue_size = f"--mem-queue-size={2 * args.messages}"
        with Nsqd(Path(scratch) / "nsqd", extra_args=[queue_size]) as nsqd:
            for run in range(1, args.runs + 1):
                order = list(tools) if run % 2 else list(reversed(tools))
                for name in order:
                    topic = f"bench_{name}_{run}"
                    rate = measure(nsqd, tools[name], topic, source, args.messages)
                    rates[name].append(rate)
                ours, go = rates["ours"][-1], rates["go"][-1]
                print(
                    f"run {run}: ours {ours:>12,.0f} msg/s   go {go:>10,.0f} msg/s   "
                    f"ratio {ours / go:6.1f}x",
                    flush=True,
                )
    ours, go = statistics.median(rates["ours"]), statistics.median(rates["go"])
    print(
        f"median of {args.runs} runs, {args.messages:,} messages of {LINE_LENGTH} bytes: "
        f"ours {ours:,.0f} msg/s, go {go:,.0f} msg/s, ratio {ours / go:.1f}x "
        f"(target {TARGET_RATIO}x)"
    )


if __name__ == "__main__":
    main()
