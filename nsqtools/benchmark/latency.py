"""End-to-end latencies in bounded memory: a log-linear histogram, sans-IO.

A benchmark records millions of latencies; keeping them all to sort would grow without
bound. Like HdrHistogram, each value falls in a bucket whose width is a fixed fraction
of the value (2**-SIGNIFICANT_BITS of the power of two it lies in), so every percentile
is known to within 1/256 of itself, whatever the range, and a histogram never holds
more than a few thousand counters. Values below 2**SIGNIFICANT_BITS are kept exactly;
the minimum and maximum are kept exactly too.

Histograms merge (one per worker process, summed in the parent) and travel as JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Bits kept of each value: a bucket spans at most 1/2**(SIGNIFICANT_BITS - 1) of its
# lower bound, and a percentile (the bucket's middle) is off by at most 1/2**8 of it.
SIGNIFICANT_BITS = 8
_HALF = 1 << (SIGNIFICANT_BITS - 1)

# The percentiles a summary reports, in order, and the names of its figures.
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
SUMMARY_NAMES = (*(f"p{percent:g}" for percent in PERCENTILES), "max")


def bucket_index(value: int) -> int:
    """The bucket of a non-negative value: the value itself below 2**SIGNIFICANT_BITS,
    then, per power of two, 2**(SIGNIFICANT_BITS - 1) buckets of equal width."""
    shift = max(value.bit_length() - SIGNIFICANT_BITS, 0)
    return shift * _HALF + (value >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The lowest and highest value of a bucket (bucket_index's inverse)."""
    shift = max(index // _HALF - 1, 0)
    mantissa = index - shift * _HALF
    return mantissa << shift, ((mantissa + 1) << shift) - 1


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles and maximum of a histogram, in nanoseconds: percentiles[i] is the
    value of PERCENTILES[i] (nearest rank: at least that share of values are <= it)."""

    count: int
    percentiles: tuple[int, ...]
    maximum: int

    def named(self) -> dict[str, int]:
        """{"p50": ..., "p90": ..., "p99": ..., "p99.9": ..., "max": ...}"""
        return dict(zip(SUMMARY_NAMES, (*self.percentiles, self.maximum), strict=True))


class LatencyHistogram:
    """Counts of latencies (non-negative integers, nanoseconds) by bucket."""

    __slots__ = ("_counts", "count", "maximum", "minimum")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self.minimum = 0  # meaningful once count > 0
        self.maximum = 0

    def record(self, value: int, times: int = 1) -> None:
        """Count `value` `times` times (a negative value, a clock stepped back, counts as 0)."""
        value = max(value, 0)
        index = bucket_index(value)
        self._counts[index] = self._counts.get(index, 0) + times
        if not self.count or value < self.minimum:
            self.minimum = value
        self.maximum = max(self.maximum, value)
        self.count += times

    def merge(self, other: LatencyHistogram) -> None:
        """Add every value `other` counted."""
        if not other.count:
            return
        for index, times in other._counts.items():
            self._counts[index] = self._counts.get(index, 0) + times
        self.minimum = other.minimum if not self.count else min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self.count += other.count

    def percentile(self, percent: float) -> int:
        """The nearest-rank percentile (0 < percent <= 100), within 1/256 of the exact one."""
        return next(iter(self._percentiles([percent])))

    def summary(self) -> LatencySummary | None:
        """PERCENTILES and the maximum; None when nothing was recorded."""
        if not self.count:
            return None
        return LatencySummary(self.count, tuple(self._percentiles(PERCENTILES)), self.maximum)

    def _percentiles(self, percents: Sequence[float]) -> Iterator[int]:
        """Each percent's value, in one walk up the buckets (percents in ascending order)."""
        if not self.count:
            raise ValueError("no latency recorded")
        buckets = iter(sorted(self._counts.items()))
        index, seen = -1, 0
        for percent in percents:
            if not 0 < percent <= 100:
                raise ValueError(f"a percentile is over 0 and at most 100, got {percent}")
            rank = max(math.ceil(percent / 100 * self.count), 1)
            while seen < rank:
                index, times = next(buckets)
                seen += times
            low, high = bucket_bounds(index)
            yield min(max((low + high) // 2, self.minimum), self.maximum)

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": sorted(self._counts.items()),
            "count": self.count,
            "min": self.minimum,
            "max": self.maximum,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> LatencyHistogram:
        histogram = cls()
        histogram._counts = {int(index): int(times) for index, times in document["buckets"]}
        histogram.count = int(document["count"])
        histogram.minimum = int(document["min"])
        histogram.maximum = int(document["max"])
        return histogram
