"""`nsq bench` beside NSQ's own bench_writer and bench_reader, with the same settings.

Each run starts an nsqd of its own (a memory queue large enough that it is never
disk-bound, as NSQ's bench.py sets it up), so that no run pays for the garbage of the
one before; each contender goes first in turn:
  - publish: bench_writer against `nsq bench --mode publish` for --seconds, with the
    same message size, MPUB size and connections (bench_writer opens one per core,
    each with one MPUB awaiting its answer); ours twice: with one MPUB in flight per
    connection as bench_writer ("ours-1"), and with nsq bench's default (--in-flight);
  - consume: bench_reader against `nsq bench --mode consume` for --seconds, each
    draining a channel filled beforehand (by `nsq bench --mode publish`) with more
    than it can drain, with the same RDY and connections (one per core, as
    bench_reader).
Prints each run's msg/s and the CPU time per message of the client (all its
processes, start-up included) and of nsqd, then the medians and the ratios ours/theirs
(the target: 1, within noise). On a machine with few cores, the client's CPU is CPU
that nsqd does not get.

    .venv/bin/python bench/nsq_bench.py [--runs 5] [--seconds 5] [--size 200]
        [--batch-size 200] [--rdy 2500] [--only publish|consume]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nsqtools.testing import Nsqd, find_binary, our_tool

CONNECTIONS = os.cpu_count() or 1  # bench_writer's and bench_reader's GOMAXPROCS
TOPIC = "sub_bench"  # bench_writer's and bench_reader's default
CHANNEL = "ch"  # bench_reader's default
# bench_writer's and bench_reader's last line: "duration: 5.0s - 149.787mb/s - 785314.436ops/s"
_GO_RATE = re.compile(r"duration: \S+ - [\d.]+mb/s - ([\d.]+)ops/s")


@dataclass
class Measure:
    """One tool's run: msg/s, and CPU seconds used by its processes and by nsqd."""

    rate: float = 0.0
    client_cpu: float = 0.0
    nsqd_cpu: float = 0.0

    def per_message(self, cpu: float, seconds: float) -> float:
        """CPU microseconds per message."""
        return cpu / (self.rate * seconds) * 1e6 if self.rate else 0.0


@contextmanager
def measuring(nsqd: Nsqd) -> Iterator[Measure]:
    measure = Measure()
    client, server = children_cpu(), process_cpu(nsqd.pid)
    yield measure
    measure.client_cpu = children_cpu() - client
    measure.nsqd_cpu = process_cpu(nsqd.pid) - server


def children_cpu() -> float:
    """CPU seconds of the processes this one waited for (and of those they waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def go_rate(tool: str, arguments: list[str]) -> float:
    result = subprocess.run(
        [str(find_binary(tool)), *arguments], capture_output=True, text=True, check=True
    )
    found = _GO_RATE.search(result.stderr)
    if found is None:
        raise RuntimeError(f"{tool} said: {result.stderr[-500:]}")
    return float(found[1])


def our_rate(arguments: list[str], role: str) -> float:
    """`nsq bench` with these arguments: its msg/s for the role."""
    result = subprocess.run(
        [*our_tool("nsq"), "bench", "--json=-", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"nsq bench exited {result.returncode}: {result.stderr[-500:]}")
    return float(json.loads(result.stdout)[role]["msg_per_s"])


class SideBySide:
    """The contenders' command lines, from the same settings, each run on an nsqd of
    its own: a run does not pay for the garbage of the run before it."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        self.args = args
        self.scratch = scratch
        self.runs = 0

    @contextmanager
    def fresh_nsqd(self) -> Iterator[Nsqd]:
        self.runs += 1
        queue = "--mem-queue-size=100000000"
        with Nsqd(self.scratch / f"nsqd{self.runs}", extra_args=[queue]) as nsqd:
            yield nsqd

    def common(self, nsqd: Nsqd) -> list[str]:
        args = self.args
        return [
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--topic={TOPIC}",
            f"--size={args.size}",
            f"--runfor={args.seconds}s",
        ]

    def publish_go(self, nsqd: Nsqd) -> float:
        return go_rate("bench_writer", [*self.common(nsqd), f"--batch-size={self.args.batch_size}"])

    def publish_ours(self, nsqd: Nsqd, *in_flight: str) -> float:
        arguments = [
            *self.common(nsqd),
            f"--batch-size={self.args.batch_size}",
            "--mode=publish",
            f"--publishers={CONNECTIONS}",
            *in_flight,
        ]
        return our_rate(arguments, "publish")

    def publish_ours_one_in_flight(self, nsqd: Nsqd) -> float:
        return self.publish_ours(nsqd, "--in-flight=1")

    def consume_go(self, nsqd: Nsqd) -> float:
        reader = [f"--channel={CHANNEL}", f"--rdy={self.args.rdy}"]
        return go_rate("bench_reader", [*self.common(nsqd), *reader])

    def consume_ours(self, nsqd: Nsqd) -> float:
        arguments = [
            *self.common(nsqd),
            "--mode=consume",
            f"--channel={CHANNEL}",
            f"--consumers={CONNECTIONS}",
            f"--rdy={self.args.rdy}",
        ]
        return our_rate(arguments, "consume")

    def fill(self, nsqd: Nsqd) -> None:
        """The channel, with --fill messages waiting: more than either drains in a run."""
        nsqd.create_channels(TOPIC, CHANNEL)
        arguments = [
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--topic={TOPIC}",
            f"--size={self.args.size}",
            "--mode=publish",
            f"--count={self.args.fill}",
            "--in-flight=8",
        ]
        our_rate(arguments, "publish")


Contender = Callable[[Nsqd], float]  # a tool's msg/s on an nsqd


def compare(role: str, contenders: Mapping[str, Contender], bench: SideBySide) -> None:
    args = bench.args
    measures: dict[str, list[Measure]] = {name: [] for name in contenders}
    names = list(contenders)
    for run in range(1, args.runs + 1):
        order = names[run % len(names) :] + names[: run % len(names)]  # each goes first in turn
        for name in order:
            with bench.fresh_nsqd() as nsqd:
                if role == "consume":
                    bench.fill(nsqd)
                with measuring(nsqd) as measure:
                    measure.rate = contenders[name](nsqd)
            measures[name].append(measure)
        for name in names:
            print(f"{role} run {run}: {describe(name, measures[name][-1], args.seconds)}")
    medians = {name: statistics.median(m.rate for m in runs) for name, runs in measures.items()}
    go_name = "bench_writer" if role == "publish" else "bench_reader"
    print(
        f"{role}: medians of {args.runs} runs: {go_name} {medians['go']:,.0f} msg/s; "
        + "; ".join(
            f"nsq bench ({name}) {rate:,.0f} msg/s, ratio {rate / medians['go']:.2f}"
            for name, rate in medians.items()
            if name != "go"
        ),
        flush=True,
    )


def describe(name: str, measure: Measure, seconds: int) -> str:
    client = measure.per_message(measure.client_cpu, seconds)
    nsqd = measure.per_message(measure.nsqd_cpu, seconds)
    return (
        f"{name:>6} {measure.rate:>10,.0f} msg/s, CPU per message: "
        f"client {client:.2f} us, nsqd {nsqd:.2f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--rdy", type=int, default=2500)
    parser.add_argument("--fill", type=int, default=6_000_000, help="messages per consume run")
    parser.add_argument("--only", choices=["publish", "consume"])
    args = parser.parse_args()
    print(
        f"{CONNECTIONS} connections, {args.size}-byte messages, MPUBs of "
        f"{args.batch_size}, {args.seconds}s per run, RDY {args.rdy}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-nsq-bench-") as scratch:
        bench = SideBySide(args, Path(scratch))
        if args.only != "consume":
            publishers = {
                "go": bench.publish_go,
                "ours-1": bench.publish_ours_one_in_flight,
                "ours": bench.publish_ours,
            }
            compare("publish", publishers, bench)
        if args.only != "publish":
            compare("consume", {"go": bench.consume_go, "ours": bench.consume_ours}, bench)


if __name__ == "__main__":
    main()
