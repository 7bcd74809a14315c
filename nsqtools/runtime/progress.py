"""A count's rate, measured every interval for a status line: the runtime measures, the
command draws (to_nsq's progress line, nsq_to_file's status line)."""

from __future__ import annotations

from collections.abc import Callable

import trio


async def measure_rate(
    count: Callable[[], int], interval: float, report: Callable[[float], None]
) -> None:
    """Until cancelled: every `interval` seconds, report() the count's rate per second
    since the last report (since the start, the first time)."""
    last_count, last_time = count(), trio.current_time()
    while True:
        await trio.sleep(interval)
        now, current = trio.current_time(), count()
        report((current - last_count) / (now - last_time))
        last_count, last_time = current, now
