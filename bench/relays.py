"""Issue 11's measures: the relays, whole programs, side by side with Go's on one nsqd.

nsq: N 100-byte messages from one nsqd to a second one by nsq_to_nsq, Go's and ours
(default flags: --max-in-flight 200, one destination), each from its own channel to its
own destination topic, and bench/bare_relay.py beside them: the ceiling, a plain
blocking loop that only receives, MPUBs each read, waits for OK and FINs. http: N
messages POSTed one per request to a local nginx that answers 200 (bench/harness.py
starts it, installing Debian's nginx-light if needed) by nsq_to_http, Go's and ours
with default flags (-n 100), and ours with --batch-size=100 beside. Which goes first
rotates from run to run.

A run lasts from the start of the program until its channel is drained: nothing left,
in flight or deferred, which both tools reach only once the destination acknowledged
(the other nsqd's OK, nginx's 200) every message; then SIGTERM, which must end it with
exit 0. Checked afterwards: the destination topic holds at least N (nsq).

    .venv/bin/python bench/relays.py [--kinds nsq,http] [--messages N] [--http-messages N]
        [--runs R]

`--profile FILE`: instead, ours (nsq_to_nsq) relays --messages under py-spy, its stacks
in FILE, the top functions printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from harness import (
    CHECKOUT,
    TOPIC,
    ChannelWatch,
    fill,
    innermost,
    print_profile,
    running_nginx,
    under_py_spy,
    wait_for,
)

from nsqtools.testing import Nsqd, find_binary

SLOWEST_RATE = 1_000  # msg/s: a relay slower than this is stuck, not slow
KINDS = ("nsq", "http")


def ours(program: str, *options: str) -> list[str]:
    return [sys.executable, "-c", f"from nsqtools.entry import {program}; {program}()", *options]


def contenders(kind: str) -> dict[str, list[str]]:
    """Each contender's command line for a kind of relay, without its addresses."""
    program = f"nsq_to_{kind}"
    found = {"go": [str(find_binary(program))], "ours": ours(program)}
    if kind == "http":
        found["ours-batched"] = ours(program, "--batch-size=100")
    else:
        found["bare"] = [sys.executable, str(CHECKOUT / "bench" / "bare_relay.py")]
    return found


def relay_seconds(argv: list[str], watch: ChannelWatch, count: int, log: Path) -> float:
    """From the start of argv until its channel is drained; then SIGTERM and exit 0."""
    what = f"{watch.channel} ({log})"

    def drained() -> bool:
        stats = watch.counts()
        return stats.depth == stats.in_flight_count == stats.deferred_count == 0

    with log.open("wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(CHECKOUT)},  # ours from this checkout
        )
        wait_for(drained, process, 60 + count / SLOWEST_RATE, what)
        seconds = time.perf_counter() - started
        os.kill(innermost(process.pid), signal.SIGTERM)
        status = process.wait(60)
    if status != 0:
        sys.exit(f"{what}: exit status {status} after SIGTERM")
    return seconds


def measure(
    kind: str,
    source: Nsqd,
    client: httpx.Client,
    count: int,
    runs: int,
    scratch: Path,
    addresses: Callable[[str, int], list[str]],
    check: Callable[[str, int], None],
) -> dict[str, list[float]]:
    """Runs of every contender of a kind: msg/s each time."""
    tools = contenders(kind)
    rates: dict[str, list[float]] = {name: [] for name in tools}
    names = list(tools)
    for run in range(runs):
        order = names[run % len(names) :] + names[: run % len(names)]
        watches = {name: ChannelWatch(client, source, f"{kind}-{name}-{run}") for name in order}
        fill(source, list(watches.values()), count)
        for name in order:
            argv = [
                *tools[name],
                f"--nsqd-tcp-address={source.tcp_address}",
                f"--topic={TOPIC}",
                f"--channel={watches[name].channel}",
                *addresses(name, run),
            ]
            log = scratch / f"{watches[name].channel}.log"
            seconds = relay_seconds(argv, watches[name], count, log)
            check(name, run)
            rates[name].append(count / seconds)
            print(f"run {run + 1} {kind:>4} {name:>12}: {count / seconds:>9,.0f} msg/s", flush=True)
        source.delete_topic(TOPIC)  # so nsqd's memory does not grow from run to run
    return rates


def bench_nsq(source: Nsqd, client: httpx.Client, args: argparse.Namespace, scratch: Path) -> None:
    queue = f"--mem-queue-size={args.messages + 10}"
    with Nsqd(scratch / "destination", extra_args=[queue]) as destination:
        assert isinstance(destination, Nsqd)
        if args.profile:
            profile(source, destination, client, args.messages, scratch, args.profile)
            return

        def addresses(name: str, run: int) -> list[str]:
            return [
                f"--destination-nsqd-tcp-address={destination.tcp_address}",
                f"--destination-topic={name}-{run}",
            ]

        def check(name: str, run: int) -> None:
            depth = destination.topic_depth(f"{name}-{run}")
            if depth < args.messages:
                sys.exit(f"{name}: {depth:,} at the destination, not {args.messages:,}")
            destination.delete_topic(f"{name}-{run}")

        rates = measure("nsq", source, client, args.messages, args.runs, scratch, addresses, check)
    summarise("nsq", args.messages, rates, target=5.0)


def profile(
    source: Nsqd, destination: Nsqd, client: httpx.Client, count: int, scratch: Path, stacks: Path
) -> None:
    """Ours relaying `count` messages under py-spy; the top functions printed."""
    watch = ChannelWatch(client, source, "profile")
    fill(source, [watch], count)
    argv = [
        *ours("nsq_to_nsq"),
        f"--nsqd-tcp-address={source.tcp_address}",
        f"--topic={TOPIC}",
        f"--channel={watch.channel}",
        f"--destination-nsqd-tcp-address={destination.tcp_address}",
        "--destination-topic=profile",
    ]
    seconds = relay_seconds(under_py_spy(argv, stacks), watch, count, scratch / "profile.log")
    print(f"ours under py-spy: {count / seconds:,.0f} msg/s")
    print_profile(stacks)


def bench_http(source: Nsqd, client: httpx.Client, args: argparse.Namespace, scratch: Path) -> None:
    with running_nginx(scratch) as url:
        count = args.http_messages
        rates = measure(
            "http", source, client, count, args.runs, scratch, lambda *_: [f"--post={url}"],
            lambda *_: None,
        )  # fmt: skip
    summarise("http", count, rates, target=1.3)


def summarise(kind: str, count: int, rates: dict[str, list[float]], target: float) -> None:
    medians = {name: statistics.median(values) for name, values in rates.items()}
    go = medians["go"]
    others = ", ".join(
        f"{name} {rate:,.0f} msg/s ({rate / go:.2f}x)"
        for name, rate in medians.items()
        if name != "go"
    )
    print(
        f"{kind}: medians of {len(rates['go'])} runs of {count:,}: go {go:,.0f} msg/s, {others};"
        f" target ours/go {target}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="nsq,http")
    parser.add_argument("--messages", type=int, default=1_000_000, help="for nsq_to_nsq")
    parser.add_argument("--http-messages", type=int, default=200_000, help="for nsq_to_http")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="py-spy ours (nsq) to this file instead")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}; known: {list(KINDS)}")
    print(f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp:
        scratch = Path(tmp)
        queue = f"--mem-queue-size={max(args.messages, args.http_messages) + 10}"
        with Nsqd(scratch / "source", extra_args=[queue]) as source, httpx.Client() as client:
            assert isinstance(source, Nsqd)
            if "nsq" in kinds:
                bench_nsq(source, client, args, scratch)
            if "http" in kinds and not args.profile:
                bench_http(source, client, args, scratch)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
