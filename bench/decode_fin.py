"""Issue 3's measure: message frames of 100-byte bodies arriving in 64 KiB chunks,
decoded by the real FrameDecoder and answered with FINs encoded by the real
commands.fin_many, one buffer per chunk. Prints messages per second on one core.

    .venv/bin/python bench/decode_fin.py [--messages N] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import time

from nsqtools.protocol import FrameDecoder, MessageBatch, commands

CHUNK_SIZE = 64 * 1024
BODY_SIZE = 100


def message_stream(count: int) -> bytes:
    """`count` message frames as nsqd writes them (size, type 2, ts, attempts, id, body)."""
    body = os.urandom(BODY_SIZE // 2).hex().encode()
    timestamp = time.time_ns()
    frames = []
    for index in range(count):
        data = struct.pack(">qH", timestamp, 1) + b"%016x" % index + body
        frames.append(struct.pack(">II", 4 + len(data), 2) + data)
    return b"".join(frames)


def one_run(chunks: list[bytes]) -> tuple[int, float]:
    decoder = FrameDecoder()
    decoded = 0
    started = time.perf_counter()
    for chunk in chunks:
        for event in decoder.feed(chunk):
            if type(event) is MessageBatch:
                answers = commands.fin_many(event.ids)
                decoded += len(event)
    elapsed = time.perf_counter() - started
    assert answers.startswith(b"FIN ")
    return decoded, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    stream = message_stream(args.messages)
    chunks = [stream[i : i + CHUNK_SIZE] for i in range(0, len(stream), CHUNK_SIZE)]
    rates = []
    for _ in range(args.runs):
        decoded, elapsed = one_run(chunks)
        assert decoded == args.messages
        rates.append(decoded / elapsed)
    median = statistics.median(rates)
    print(
        f"decode+FIN, {BODY_SIZE}-byte bodies, {CHUNK_SIZE // 1024} KiB chunks, "
        f"{args.messages} messages x {args.runs} runs: median {median:,.0f} msg/s "
        f"(min {min(rates):,.0f}, max {max(rates):,.0f}); target 1,500,000"
    )


if __name__ == "__main__":
    main()
