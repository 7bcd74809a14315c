"""The relays' status lines: Go's timer_metrics (bitly/timer_metrics v1.0.0), plus a rate.

Every --status-every requests (messages relayed, answered or failed), nsq_to_nsq and
nsq_to_http log the latencies of the last --status-every of them, as Go's do:

    2026/11/23 18:00:00 [aggregate]: finished 250 - 99th: 1.52ms - 95th: 1.20ms - avg: 0.61ms
        - 80453/s                        (one line)

Go's window, percentile rule and wording, so a script that reads Go's lines reads ours;
beyond Go, the line ends with the rate since the last one. The first line comes after
status_every + 1 requests (Go prints when its ring of timings wraps), then one every
status_every. Go warns when fewer than 100 are asked for. Each line goes to the `emit`
the command gives (nsqtools.commands.consoles.go_log: Go's logger on stderr).

RelayStatus also counts the messages each destination took, per source topic, for
the metrics (sent_families; nsqtools.runtime.metrics serves them).
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable

from nsqtools.exposition import Family, counter

Emit = Callable[[str], None]  # a status line, without the time: the command logs it


def percentile(percent: float, ordered: list[float]) -> float:
    """Go's timer_metrics percentile of sorted values (not the textbook one)."""
    if not ordered:
        return 0.0
    index = math.ceil(percent / 100.0 * len(ordered) + 0.5)
    return ordered[min(index, len(ordered) - 1)]


class TimerMetrics:
    """Latencies of one destination (or all), logged every `status_every` requests."""

    def __init__(self, status_every: int, prefix: str, emit: Emit) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self.emit = emit
        self.recorded = 0
        self._window: deque[float] = deque(maxlen=max(status_every, 1))
        self._last_line_at = time.monotonic()
        self._recorded_at_last_line = 0
        if 0 < status_every < 100:
            emit(
                "Warning: use more than 100 status values for accurate percentiles "
                f"(configured with {status_every})"
            )

    def record(self, seconds: float, count: int = 1) -> None:
        """`count` requests that each took `seconds`, logging as Go would among them."""
        every = self.status_every
        if every <= 0:
            return
        while count:
            # Go logs at the (k * every + 1)-th request: how many until the next such one.
            until_line = every - (self.recorded - 1) % every if self.recorded else every + 1
            step = min(count, until_line)
            self._window.extend([seconds] * step)
            self.recorded += step
            count -= step
            if step == until_line:
                self.emit(self.line())

    def line(self) -> str:
        ordered = sorted(self._window)
        average = sum(ordered) / len(ordered) if ordered else 0.0
        now = time.monotonic()
        rate = (self.recorded - self._recorded_at_last_line) / max(now - self._last_line_at, 1e-9)
        self._last_line_at, self._recorded_at_last_line = now, self.recorded
        return (
            f"{self.prefix} finished {len(ordered)} - 99th: {percentile(99, ordered) * 1e3:.2f}ms"
            f" - 95th: {percentile(95, ordered) * 1e3:.2f}ms - avg: {average * 1e3:.2f}ms"
            f" - {rate:.0f}/s"
        )


class RelayStatus:
    """The aggregate line and, with more than one destination, one per destination."""

    def __init__(self, status_every: int, destinations: list[str], emit: Emit) -> None:
        self.aggregate = TimerMetrics(status_every, "[aggregate]:", emit)
        # Go's tools track each destination only when there are several.
        self.per_destination = (
            {address: TimerMetrics(status_every, f"[{address}]:", emit) for address in destinations}
            if len(destinations) > 1
            else {}
        )
        self.sent: Counter[tuple[str, str]] = Counter()  # by (source topic, destination)

    def record(self, seconds: float, count: int, destination: str | None) -> None:
        """`count` requests to `destination` (None: not known) that took `seconds`."""
        self.aggregate.record(seconds, count)
        if destination is not None:
            self.record_destination(destination, seconds, count)

    def record_destination(self, destination: str, seconds: float, count: int) -> None:
        """Requests to one destination only (nsq_to_http's `all` mode times each)."""
        metrics = self.per_destination.get(destination)
        if metrics is not None:
            metrics.record(seconds, count)

    def count_sent(self, topic: str, destination: str, count: int) -> None:
        """`count` messages of `topic` that `destination` took (acknowledged, accepted)."""
        self.sent[topic, destination] += count


def sent_families(status: RelayStatus, channel: str) -> list[Family]:
    """The messages each destination took, for the metrics (beside the run's)."""
    family = counter(
        "nsqtools_messages_sent_total",
        "Messages a destination took (an nsqd acknowledged them, an endpoint accepted them).",
        [
            ({"topic": topic, "channel": channel, "destination": destination}, count)
            for (topic, destination), count in sorted(status.sent.items())
        ],
    )
    return [family]
