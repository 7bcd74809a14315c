"""Issue 10's nsq_to_file measures: drain N 100-byte messages to files, plain and --gzip,
whole processes side by side with Go's nsq_to_file on one nsqd, alternating which goes first.

Each contender (go; ours, run from the checkout this file lives in; bare, the ceiling:
bench/bare_archiver.py, a plain blocking loop that only receives, writes, fsyncs each
window and FINs; trio, the same loop on trio's sockets: the floor of an archiver built
on trio, as ours is) and mode gets its own channel of one topic and a fresh output
directory on disk (fsyncs must cost what they cost: the filesystem is printed, and must
not be tmpfs), with the tools' default --max-in-flight and --sync-interval. A run lasts
from the tool's start to its exit: it gets SIGTERM as soon as nsqd has handed it every
message (the channel's depth is 0, polled over one kept-alive HTTP connection every 20
ms), which makes it write, sync and FIN what it holds (Go's: everything it received;
ours requeues what had not reached its files yet), then exit. Waiting for the last FIN
instead would time the --sync-interval: both tools hold a last batch smaller than 85% of
RDY until the interval's tick (30 s by default). Afterwards nothing may be in flight,
and the lines in the files plus the messages requeued must make exactly N: none lost,
none both written and requeued. msg/s counts the lines written. Beside it: fsync and
fdatasync calls per second of the run (`perf stat`) and peak RSS (`/usr/bin/time`: the
kernel carries ru_maxrss across fork and exec, so wait4 on a child of this large
process, perf included, reports this process's size, not the tool's).

With --profile FILE it instead runs ours once in plain mode under py-spy (raw stacks to
FILE, 500 samples/s) and prints where the time went: the top functions by self time, and
by inclusive time those of nsqtools.

    .venv/bin/python bench/to_file.py [--messages N] [--runs R] [--modes plain,gzip]
    .venv/bin/python bench/to_file.py --profile /tmp/to_file.raw
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
from harness import TOPIC, ChannelWatch, fill, innermost, print_profile, under_py_spy, wait_for

from nsqtools.testing import Nsqd, find_binary

CONTENDERS = ("go", "ours", "bare", "trio")
MODES: dict[str, list[str]] = {"plain": [], "gzip": ["--gzip"]}
CHECKOUT = Path(__file__).resolve().parent.parent
TOOLS = {
    "ours": [sys.executable, "-c", "from nsqtools.entry import nsq_to_file; nsq_to_file()"],
    "bare": [sys.executable, str(CHECKOUT / "bench" / "bare_archiver.py")],
    "trio": [sys.executable, str(CHECKOUT / "bench" / "bare_archiver.py"), "--trio"],
}
SYNC_EVENTS = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"
SLOWEST_RATE = 2_000  # msg/s: a drain slower than this is stuck, not slow
STOP_SECONDS = 60.0
SETTLE_SECONDS = 10.0  # for nsqd to read the FINs a tool sent before it exited


@dataclass(frozen=True)
class Drain:
    """One contender's run: start to exit, start to the last message handed over, lines
    written, messages requeued at the stop, sync calls and peak RSS."""

    seconds: float
    emptied: float
    written: int
    requeued: int
    syncs: int
    peak_kib: int


def argv_of(name: str, mode: str, nsqd: Nsqd, channel: str, output: Path) -> list[str]:
    tool = [str(find_binary("nsq_to_file"))] if name == "go" else TOOLS[name]
    return [
        *tool,
        f"--nsqd-tcp-address={nsqd.tcp_address}",
        f"--topic={TOPIC}",
        f"--channel={channel}",
        f"--output-dir={output}",
        *MODES[mode],
    ]


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding `path` (its longest mount point in /proc/mounts)."""
    resolved, best, kind = str(path.resolve()), "", "unknown"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mount_point, fs_type, *_ = line.split()
        inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, kind = mount_point, fs_type
    return f"{kind} ({best})"


def run_until_emptied(
    argv: list[str], watch: ChannelWatch, count: int, log: Path
) -> tuple[float, float]:
    """Seconds from the start of `argv` to its exit, and to the channel's emptying, when it
    gets SIGTERM; exits unless all is then FIN'd or requeued."""
    what = f"{watch.channel} ({log})"
    with log.open("wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(CHECKOUT)},  # ours from this checkout
        )
        wait_for(watch.emptied, process, 60 + count / SLOWEST_RATE, what)
        emptied = time.perf_counter() - started
        os.kill(innermost(process.pid), signal.SIGTERM)
        status = process.wait(STOP_SECONDS)
        exited = time.perf_counter() - started
    if status != 0:
        sys.exit(f"{what}: exit status {status} after SIGTERM")
    wait_for(watch.idle, None, SETTLE_SECONDS, f"{what}: nothing in flight")
    return exited, emptied


def open_archive(path: Path, mode: str) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if mode == "gzip" else path.open("rb")


def lines_in(output: Path, mode: str) -> int:
    """Lines in the topic's files (gzip members decompressed), read in blocks."""
    total = 0
    for path in output.glob(f"{TOPIC}.*"):
        with open_archive(path, mode) as archive:
            total += sum(block.count(b"\n") for block in iter(partial(archive.read, 1 << 20), b""))
    return total


def syncs_counted(report: Path) -> int:
    """The sum of the sync events' counts in perf stat's CSV report (-x,)."""
    lines = report.read_text().splitlines()
    return sum(int(line.split(",")[0]) for line in lines if line and not line.startswith("#"))


def drain(
    nsqd: Nsqd, watch: ChannelWatch, name: str, mode: str, count: int, scratch: Path
) -> Drain:
    """One measured run of one contender, its output checked then removed."""
    output, syncs, rss = scratch / "output", scratch / "syncs.csv", scratch / "rss"
    output.mkdir(parents=True)
    wrappers = ["perf", "stat", "-x,", "-e", SYNC_EVENTS, "-o", str(syncs), "--"]
    wrappers += ["/usr/bin/time", "-f", "%M", "-o", str(rss)]
    argv = wrappers + argv_of(name, mode, nsqd, watch.channel, output)
    seconds, emptied = run_until_emptied(argv, watch, count, scratch / "stderr.log")
    written, requeued = lines_in(output, mode), watch.waiting()
    if written + requeued != count:
        sys.exit(f"{name} {mode}: {written:,} lines + {requeued:,} requeued, not {count:,}")
    shutil.rmtree(output)
    # time writes "Command exited with non-zero status" first when there is one.
    peak_kib = int(rss.read_text().split()[-1])
    return Drain(seconds, emptied, written, requeued, syncs_counted(syncs), peak_kib)


def measure(
    nsqd: Nsqd, client: httpx.Client, args: argparse.Namespace, scratch: Path
) -> dict[tuple[str, str], list[Drain]]:
    results: dict[tuple[str, str], list[Drain]] = {
        (name, mode): [] for mode in args.modes for name in CONTENDERS
    }
    for run in range(args.runs):
        for mode in args.modes:
            turn = run % len(CONTENDERS)
            order = CONTENDERS[turn:] + CONTENDERS[:turn]
            watches = {name: ChannelWatch(client, nsqd, f"{name}-{mode}-{run}") for name in order}
            fill(nsqd, list(watches.values()), args.messages)
            for name in order:
                watch = watches[name]
                result = drain(nsqd, watch, name, mode, args.messages, scratch / watch.channel)
                results[name, mode].append(result)
                print(f"run {run + 1} {mode:>5} {name:>4}: {described(result)}", flush=True)
            nsqd.delete_topic(TOPIC)  # so nsqd's memory does not grow from mode to mode
    return results


def described(drain: Drain) -> str:
    return (
        f"{drain.written / drain.seconds:>9,.0f} msg/s, {drain.syncs / drain.seconds:>6,.0f}"
        f" fsyncs/s ({drain.syncs:,}), peak RSS {drain.peak_kib / 1024:5.1f} MiB; emptied at"
        f" {drain.emptied:.2f} s, exited at {drain.seconds:.2f} s, {drain.requeued} requeued"
    )


def summarise(results: dict[tuple[str, str], list[Drain]], args: argparse.Namespace) -> None:
    print(f"medians over {args.runs} runs of {args.messages:,} messages:")
    for mode in args.modes:
        rate, syncs, peak = {}, {}, {}
        for name in CONTENDERS:
            drains = results[name, mode]
            rate[name] = statistics.median(drain.written / drain.seconds for drain in drains)
            syncs[name] = statistics.median(drain.syncs / drain.seconds for drain in drains)
            peak[name] = statistics.median(drain.peak_kib / 1024 for drain in drains)
        print(
            f"{mode:>5}: go {rate['go']:,.0f} msg/s, ours {rate['ours']:,.0f} msg/s: "
            f"ours/go {rate['ours'] / rate['go']:.2f}x (target 4x); fsyncs/s go "
            f"{syncs['go']:,.0f}, ours {syncs['ours']:,.0f}; peak RSS go {peak['go']:.1f} MiB, "
            f"ours {peak['ours']:.1f} MiB ({peak['ours'] / peak['go']:.1f}x); the ceiling: bare "
            f"{rate['bare']:,.0f} msg/s, bare/go {rate['bare'] / rate['go']:.2f}x, ours/bare "
            f"{rate['ours'] / rate['bare']:.2f}; on trio {rate['trio']:,.0f} msg/s, trio/go "
            f"{rate['trio'] / rate['go']:.2f}x, ours/trio {rate['ours'] / rate['trio']:.2f}"
        )


def profile(nsqd: Nsqd, client: httpx.Client, count: int, scratch: Path, stacks: Path) -> None:
    watch = ChannelWatch(client, nsqd, "profile")
    fill(nsqd, [watch], count)
    (scratch / "profile").mkdir(parents=True)
    tool = argv_of("ours", "plain", nsqd, watch.channel, scratch / "profile")
    seconds, _ = run_until_emptied(under_py_spy(tool, stacks), watch, count, scratch / "py-spy.log")
    print(f"ours plain under py-spy: {count / seconds:,.0f} msg/s")
    print_profile(stacks)


def modes(text: str) -> list[str]:
    chosen = text.split(",")
    if unknown := set(chosen) - set(MODES):
        raise argparse.ArgumentTypeError(f"unknown modes {sorted(unknown)}; known: {list(MODES)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", type=modes, default=list(MODES), help="e.g. plain,gzip")
    parser.add_argument("--output-root", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--profile", type=Path, help="py-spy ours (plain) to this file instead")
    args = parser.parse_args()
    print(f"output on {filesystem_of(args.output_root)}, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="nsqtools-bench-", dir=args.output_root) as tmp:
        scratch = Path(tmp)
        queue = f"--mem-queue-size={args.messages + 10}"  # per channel
        with Nsqd(scratch / "nsqd", extra_args=[queue]) as nsqd, httpx.Client() as client:
            assert isinstance(nsqd, Nsqd)
            if args.profile:
                profile(nsqd, client, args.messages, scratch, args.profile)
                return
            results = measure(nsqd, client, args, scratch)
    summarise(results, args)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
