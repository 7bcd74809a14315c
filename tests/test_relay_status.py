"""The relays' status lines: Go's timer_metrics window, percentiles and wording."""

from __future__ import annotations

import re

from nsqtools.relays.status import RelayStatus, TimerMetrics, percentile

GO_LINE = re.compile(
    r"^\[aggregate\]: finished (\d+) - 99th: (\d+\.\d\d)ms - 95th: (\d+\.\d\d)ms"
    r" - avg: (\d+\.\d\d)ms - \d+/s$"
)


def test_a_line_when_the_window_wraps_over_the_last_status_every_requests() -> None:
    lines: list[str] = []
    metrics = TimerMetrics(250, "[aggregate]:", lines.append)
    for millis in range(1, 251):
        metrics.record(millis / 1000)
    assert lines == []  # Go prints at the 251st, when its ring wraps
    metrics.record(251 / 1000)
    match = GO_LINE.match(lines[0])
    assert match is not None, lines
    # The window is requests 2..251; Go's index ceil(p * n + 0.5) into them, sorted.
    assert match.groups() == ("250", "250.00", "240.00", "126.50")


def test_then_a_line_every_status_every_requests_even_within_one_record() -> None:
    lines: list[str] = []
    metrics = TimerMetrics(100, "[aggregate]:", lines.append)
    metrics.record(0.001, count=100)
    assert lines == []
    metrics.record(0.002, count=301)  # requests 101..401: lines at 101, 201, 301, 401
    assert len(lines) == 4
    assert all(line.startswith("[aggregate]: finished 100 - ") for line in lines)
    metrics.record(0.002, count=99)
    assert len(lines) == 4


def test_go_warns_below_a_hundred_and_zero_disables() -> None:
    lines: list[str] = []
    TimerMetrics(50, "[aggregate]:", lines.append)
    assert lines == [
        "Warning: use more than 100 status values for accurate percentiles (configured with 50)"
    ]
    silent = TimerMetrics(0, "[aggregate]:", lines.append)
    silent.record(1.0, count=10_000)
    assert len(lines) == 1


def test_percentile_is_go_timer_metrics_rule() -> None:
    assert percentile(95, []) == 0.0
    assert percentile(99, [1.0]) == 1.0
    assert percentile(95, [float(value) for value in range(10)]) == 9.0  # index capped


def test_one_line_per_destination_only_when_there_are_several() -> None:
    lines: list[str] = []
    RelayStatus(100, ["a:1"], lines.append).record(0.001, 101, "a:1")
    assert [line.split(" finished")[0] for line in lines] == ["[aggregate]:"]
    lines.clear()
    RelayStatus(100, ["a:1", "b:2"], lines.append).record(0.001, 101, "b:2")
    assert [line.split(" finished")[0] for line in lines] == ["[aggregate]:", "[b:2]:"]
