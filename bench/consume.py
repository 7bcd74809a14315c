"""Issues 4 and 9's consumer measures: drain N 100-byte messages, side by side on one nsqd.

Contenders, each on its own channel of the same topic (so each sees all N messages):
  - go:   the Go nsq_tail (go-nsq) with -n N, stdout to /dev/null (wall time of the process);
  - ours: nsqtools.consumer in this process, bodies written to /dev/null, every message FIN'd;
  - bare: a minimal blocking-socket loop with no library (SUB, RDY, parse, FIN): the ceiling
    of what nsqd delivers here to a Python consumer that does nothing else;
  - trio: the same bare loop on trio's non-blocking sockets (epoll): the ceiling for any
    consumer built on trio, ours included;
  - tail: our nsq_tail program with -n N, stdout to /dev/null: the runtime and the command
    on top of the library (issue 9: at least 0.9 of ours).
All use max_in_flight 200 (nsq_tail's default) unless --max-in-flight says otherwise.

    .venv/bin/python bench/consume.py [--messages N] [--runs R] [--max-in-flight M]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from nsqtools.config import ClientConfig
from nsqtools.consumer import Budget, ConsumerOptions, open_consumer
from nsqtools.protocol import commands
from nsqtools.testing import Nsqd, find_binary

TOPIC = "bench"
BODY_SIZE = 100
RECEIVE_SIZE = 256 * 1024  # as nsqtools.transport.conn reads
TAIL = str(Path(sys.executable).parent / "nsq_tail")


def fill(nsqd: Nsqd, channels: list[str], count: int) -> None:
    """Create the channels first so each gets its own copy, then publish `count` messages."""
    nsqd.create_channels(TOPIC, *channels)
    padding = b"x" * (BODY_SIZE - 8)
    nsqd.publish_many(TOPIC, (b"%08d" % index + padding for index in range(count)))


def run_go(nsqd: Nsqd, channel: str, count: int, max_in_flight: int) -> float:
    return run_tail(str(find_binary("nsq_tail")), nsqd, channel, count, max_in_flight)


def run_tail_ours(nsqd: Nsqd, channel: str, count: int, max_in_flight: int) -> float:
    return run_tail(TAIL, nsqd, channel, count, max_in_flight)


def run_tail(tool: str, nsqd: Nsqd, channel: str, count: int, max_in_flight: int) -> float:
    """Wall time of an nsq_tail process draining `count` messages to /dev/null."""
    argv = [
        tool,
        f"--nsqd-tcp-address={nsqd.tcp_address}",
        f"--topic={TOPIC}",
        f"--channel={channel}",
        f"-n={count}",
        f"--max-in-flight={max_in_flight}",
    ]
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def run_ours(nsqd: Nsqd, channel: str, count: int, max_in_flight: int) -> float:
    config = dataclasses.replace(ClientConfig(), max_in_flight=max_in_flight)

    async def drain() -> float:
        devnull = os.open(os.devnull, os.O_WRONLY)
        received = 0
        started = time.perf_counter()
        async with open_consumer(
            TOPIC,
            channel,
            config,
            ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address], budget=Budget(count)),
        ) as consumer:
            async for batch in consumer:
                os.write(devnull, b"\n".join(batch.bodies) + b"\n")
                batch.finish()
                received += len(batch)
        elapsed = time.perf_counter() - started
        os.close(devnull)
        assert received == count, received
        return elapsed

    return trio.run(drain)


_FRAME_HEADER = struct.Struct(">II")


def take_message_ids(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The bare loops' parse: the ids of the whole message frames, and the rest."""
    pos, ids = 0, []
    while len(buffer) - pos >= 8:
        size, frame_type = _FRAME_HEADER.unpack_from(buffer, pos)
        end = pos + 4 + size
        if end > len(buffer):
            break
        if frame_type == 2:
            ids.append(buffer[pos + 18 : pos + 34])
        pos = end
    return ids, buffer[pos:]


def subscribe(channel: str, max_in_flight: int) -> bytes:
    return commands.MAGIC_V2 + commands.sub(TOPIC, channel) + commands.rdy(max_in_flight)


def run_bare(nsqd: Nsqd, channel: str, count: int, max_in_flight: int) -> float:
    host, port = nsqd.tcp_address.rsplit(":", 1)
    started = time.perf_counter()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(subscribe(channel, max_in_flight))
        buffer, received = b"", 0
        while received < count:
            ids, buffer = take_message_ids(buffer + sock.recv(RECEIVE_SIZE))
            received += len(ids)
            if ids:
                sock.sendall(commands.fin_many(ids))
    return time.perf_counter() - started


def run_trio_bare(nsqd: Nsqd, channel: str, count: int, max_in_flight: int) -> float:
    async def drain() -> float:
        host, port = nsqd.tcp_address.rsplit(":", 1)
        started = time.perf_counter()
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(subscribe(channel, max_in_flight))
            buffer, received = b"", 0
            while received < count:
                ids, buffer = take_message_ids(buffer + await stream.receive_some(RECEIVE_SIZE))
                received += len(ids)
                if ids:
                    await stream.send_all(commands.fin_many(ids))
        return time.perf_counter() - started

    return trio.run(drain)


CONTENDERS: dict[str, Callable[[Nsqd, str, int, int], float]] = {
    "go": run_go,
    "ours": run_ours,
    "bare": run_bare,
    "trio": run_trio_bare,
    "tail": run_tail_ours,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-in-flight", type=int, default=200)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    startups: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp:
        queue = f"--mem-queue-size={args.messages + 10}"
        with Nsqd(Path(tmp) / "nsqd", extra_args=[queue]) as nsqd:
            assert isinstance(nsqd, Nsqd)
            for run in range(args.runs):
                names = list(CONTENDERS)
                order = names[run % len(names) :] + names[: run % len(names)]
                channels = {name: f"{name}-{run}" for name in order}
                fill(nsqd, list(channels.values()), args.messages)
                for name in order:
                    elapsed = CONTENDERS[name](
                        nsqd, channels[name], args.messages, args.max_in_flight
                    )
                    rates[name].append(args.messages / elapsed)
                    print(f"run {run + 1} {name:>4}: {args.messages / elapsed:>11,.0f} msg/s")
                nsqd.delete_topic(TOPIC)
                # The tail process's start (interpreter, imports, connection): a fixed
                # cost, in its wall time and not in the library's, measured as the
                # time nsq_tail takes to show one message already waiting.
                fill(nsqd, [f"start-{run}"], 1)
                startups.append(run_tail(TAIL, nsqd, f"start-{run}", 1, args.max_in_flight))
                nsqd.delete_topic(TOPIC)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"medians over {args.runs} runs of {args.messages:,} messages, max_in_flight "
        f"{args.max_in_flight}: "
        + ", ".join(f"{name} {rate:,.0f} msg/s" for name, rate in medians.items())
    )
    print(
        f"ours/go = {medians['ours'] / medians['go']:.2f}x (target 4x); "
        f"ours/bare = {medians['ours'] / medians['bare']:.2f} of the bare-socket ceiling "
        f"(target 0.85); ours/trio = {medians['ours'] / medians['trio']:.2f} of the "
        f"bare loop on trio; trio/bare = {medians['trio'] / medians['bare']:.2f}; "
        f"tail/ours = {medians['tail'] / medians['ours']:.2f} (target 0.9)"
    )
    startup = statistics.median(startups)
    drain_rate = args.messages / (args.messages / medians["tail"] - startup)
    print(
        f"tail's start (-n 1 with a message waiting): {startup * 1000:.0f} ms; without it, "
        f"tail drains {drain_rate:,.0f} msg/s: {drain_rate / medians['ours']:.2f} of ours"
    )


if __name__ == "__main__":
    main()
