"""The body of a benchmark message: when it was published, then padding, sans-IO.

Every body starts with the wall-clock time of its publication (nanoseconds since the
epoch, 8 bytes big-endian), padded to the message size; the consumer subtracts it from
the time it received the message. The clock is the wall clock because the publisher
and the consumer are different processes (on one machine they share it).

A publisher stamps a whole batch at once (the messages of a batch leave together), and
a consumer reads a batch's stamps together: messages that share a stamp share their
latency too, so each distinct stamp is recorded once with its count. A body whose first
bytes are no plausible stamp (published by another tool: bench_writer sends zeros) is
counted as unstamped and left out of the latencies.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence
from operator import itemgetter

from nsqtools.benchmark.latency import LatencyHistogram

STAMP_SIZE = 8
_STAMP = struct.Struct(">Q")
_stamp_of = itemgetter(slice(0, STAMP_SIZE))

# Stamps before this (2020-01-01) are not ours: zeros, text, another tool's bodies.
EARLIEST_STAMP = 1_577_836_800 * 10**9
# A stamp this far after the time of receipt is not ours either (clocks on one machine
# agree; more than a second ahead is another tool's bytes).
FUTURE_SLACK = 10**9


def padding(size: int) -> bytes:
    """What follows the stamp in a body of `size` bytes."""
    if size < STAMP_SIZE:
        raise ValueError(f"a message of {size} bytes has no room for its {STAMP_SIZE}-byte stamp")
    return b"x" * (size - STAMP_SIZE)


def stamped(now_ns: int, filler: bytes) -> bytes:
    """A body stamped with now_ns, then filler (padding(size))."""
    return _STAMP.pack(now_ns) + filler


def record_latencies(histogram: LatencyHistogram, bodies: Sequence[bytes], received_ns: int) -> int:
    """Record the latency of each body received at received_ns; return how many bodies
    carried no plausible stamp (not recorded)."""
    unstamped = 0
    for stamp, times in Counter(map(_stamp_of, bodies)).items():
        sent_ns = _STAMP.unpack(stamp)[0] if len(stamp) == STAMP_SIZE else 0
        if EARLIEST_STAMP <= sent_ns <= received_ns + FUTURE_SLACK:
            histogram.record(received_ns - sent_ns, times)
        else:
            unstamped += times
    return unstamped
