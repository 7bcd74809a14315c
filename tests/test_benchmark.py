"""The benchmark's sans-IO parts: the latency histogram's percentiles against the exact
ones of a sorted sample, stamped bodies, the split of a run between worker processes,
and the results' JSON and CSV shapes."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nsqtools.benchmark.latency import (
    PERCENTILES,
    SIGNIFICANT_BITS,
    LatencyHistogram,
    bucket_bounds,
    bucket_index,
)
from nsqtools.benchmark.results import BenchResults, WorkerReport
from nsqtools.benchmark.settings import BenchSettings, Mode, Role, WorkerJob, shares
from nsqtools.benchmark.stamps import EARLIEST_STAMP, STAMP_SIZE, padding, record_latencies, stamped

# A percentile lies within this fraction of the exact one (half a bucket's width).
RELATIVE_ERROR = 2.0**-SIGNIFICANT_BITS

latencies = st.lists(st.integers(0, 10**12), min_size=1, max_size=300)


def exact_percentile(values: list[int], percent: float) -> int:
    """Nearest rank: the smallest value with at least percent% of values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(percent / 100 * len(ordered)), 1) - 1]


def histogram_of(values: list[int]) -> LatencyHistogram:
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value)
    return histogram


@given(st.integers(0, 2**64 - 1))
@example(0)
@example(2**SIGNIFICANT_BITS - 1)
@example(2**SIGNIFICANT_BITS)
def test_a_value_lies_in_its_bucket_and_the_bucket_is_narrow(value: int) -> None:
    low, high = bucket_bounds(bucket_index(value))
    assert low <= value <= high
    assert high - low <= max(low * 2 * RELATIVE_ERROR, 0)


def test_buckets_follow_each_other_without_gaps() -> None:
    ends = [bucket_bounds(index) for index in range(5000)]
    assert all(after[0] == before[1] + 1 for before, after in pairwise(ends))


@given(latencies, st.floats(0.001, 100))
@example([1, 2, 3, 4], 50.0)
@example([10**9] * 999 + [5 * 10**9], 99.9)
def test_percentiles_are_within_the_relative_error_of_the_exact_ones(
    values: list[int], percent: float
) -> None:
    exact = exact_percentile(values, percent)
    assert abs(histogram_of(values).percentile(percent) - exact) <= exact * RELATIVE_ERROR


@given(latencies)
def test_the_summary_is_ordered_and_ends_at_the_exact_maximum(values: list[int]) -> None:
    summary = histogram_of(values).summary()
    assert summary is not None
    figures = list(summary.named().values())
    assert figures == sorted(figures)
    assert summary.maximum == max(values)
    assert summary.count == len(values)
    assert figures[0] >= min(values)
    assert list(summary.named()) == ["p50", "p90", "p99", "p99.9", "max"]
    assert len(summary.percentiles) == len(PERCENTILES)


def test_values_below_the_first_power_are_exact() -> None:
    histogram = histogram_of(list(range(1, 101)))
    percents = (1, 50, 90, 99, 100)
    assert [histogram.percentile(percent) for percent in percents] == [1, 50, 90, 99, 100]


def test_memory_is_bounded_whatever_the_number_of_values() -> None:
    histogram = LatencyHistogram()
    for value in range(0, 10**12, 10**7):  # 100,000 distinct values over 12 decades
        histogram.record(value)
    assert len(histogram.to_json()["buckets"]) < 5000


@given(latencies, latencies)
def test_merged_histograms_count_as_one(first: list[int], second: list[int]) -> None:
    merged = histogram_of(first)
    merged.merge(histogram_of(second))
    assert merged.to_json() == histogram_of(first + second).to_json()


@given(latencies)
def test_a_histogram_survives_json(values: list[int]) -> None:
    histogram = histogram_of(values)
    again = LatencyHistogram.from_json(histogram.to_json())
    assert again.summary() == histogram.summary()


def test_counts_and_negative_values() -> None:
    histogram = LatencyHistogram()
    histogram.record(1000, times=99)
    histogram.record(-5)  # a clock stepped back: no latency
    assert histogram.count == 100
    assert histogram.minimum == 0
    assert histogram.percentile(1) == 0
    assert histogram.percentile(50) == 1000
    assert LatencyHistogram().summary() is None
    with pytest.raises(ValueError, match="at most 100"):
        histogram.percentile(101)


def test_stamped_bodies_give_their_latency_and_others_are_unstamped() -> None:
    sent = EARLIEST_STAMP + 10**15
    bodies = [stamped(sent, padding(64))] * 3 + [stamped(sent + 500, padding(64))]
    assert all(len(body) == 64 for body in bodies)
    foreign = [b"\0" * 200, b"x" * 200, b"short"]  # bench_writer's zeros, text, too short
    histogram = LatencyHistogram()
    unstamped = record_latencies(histogram, bodies + foreign, received_ns=sent + 2000)
    assert unstamped == len(foreign)
    assert histogram.count == 4
    assert (histogram.minimum, histogram.maximum) == (1500, 2000)
    with pytest.raises(ValueError, match="no room"):
        padding(STAMP_SIZE - 1)


def settings(**changes: object) -> BenchSettings:
    fields: dict[str, object] = {
        "mode": Mode.BOTH,
        "nsqd_tcp_address": "127.0.0.1:4150",
        "topic": "t",
        "channel": "c",
        "size": 100,
        "batch_size": 10,
        "count": 1001,
        "duration": None,
        "publishers": 5,
        "consumers": 3,
        "processes": 2,
        "in_flight": 1,
        "rdy": 100,
        "rate": 1000,
    }
    return BenchSettings(**(fields | changes))  # type: ignore[arg-type]


def test_shares_differ_by_one_at_most() -> None:
    assert shares(10, 3) == [4, 3, 3]
    assert shares(2, 4) == [1, 1, 0, 0]


def test_publishers_split_connections_count_and_rate_over_the_processes() -> None:
    jobs = settings().jobs(Role.PUBLISHER)
    assert [job.connections for job in jobs] == [3, 2]
    assert [job.counts for job in jobs] == [[201, 200, 200], [200, 200]]
    assert {job.rate_per_connection for job in jobs} == {200.0}
    assert not any(job.subscribe_at_go for job in jobs)


def test_consumers_beside_publishers_have_no_count_of_their_own() -> None:
    jobs = settings().jobs(Role.CONSUMER)
    assert [job.connections for job in jobs] == [2, 1]
    assert all(job.counts is None and job.duration is None for job in jobs)


def test_consumers_alone_split_the_count_and_subscribe_at_go() -> None:
    jobs = settings(mode=Mode.CONSUME, processes=5).jobs(Role.CONSUMER)
    assert [job.counts for job in jobs] == [[334], [334], [333]]  # no process without work
    assert all(job.subscribe_at_go for job in jobs)
    assert WorkerJob.from_json(jobs[0].to_json()) == jobs[0]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"size": 7}, "at least 8 bytes"),
        ({"count": 0}, "--count must be at least 1"),
        ({"count": None}, "not both"),
        ({"duration": 1.0}, "not both"),
        ({"count": None, "duration": 0.0}, "--duration must be positive"),
        ({"batch_size": 0}, "--batch-size must be at least 1"),
        ({"rate": -1}, "--rate must not be negative"),
    ],
)
def test_settings_refuse_what_cannot_run(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        settings(**changes)


def report(role: Role, messages: int, started: int, ended: int, *latencies: int) -> WorkerReport:
    histogram = LatencyHistogram()
    for value in latencies:
        histogram.record(value)
    return WorkerReport(role, messages, messages * 100, started, ended, histogram)


def test_results_span_the_workers_windows_and_merge_their_latencies() -> None:
    reports = [
        report(Role.PUBLISHER, 600, 0, 2 * 10**9),
        report(Role.PUBLISHER, 401, 10**9, 3 * 10**9),
        report(Role.CONSUMER, 1001, 0, 4 * 10**9, 10**6, 3 * 10**6),
        report(Role.CONSUMER, 0, 0, 0, 2 * 10**6),
    ]
    results = BenchResults.from_reports(settings(), reports, interrupted=False)
    document = results.to_json()
    assert document["publish"] == {
        "messages": 1001,
        "seconds": 3.0,
        "msg_per_s": 334,
        "mib_per_s": round(100_100 / 3 / 1024 / 1024, 2),
    }
    assert document["consume"]["seconds"] == 4.0
    expected = {"p50": 2.0, "p90": 3.0, "p99": 3.0, "p99.9": 3.0, "max": 3.0}
    assert document["latency_ms"] == pytest.approx(expected, rel=RELATIVE_ERROR)


def test_a_csv_row_has_the_same_columns_in_every_mode() -> None:
    both = BenchResults.from_reports(
        settings(), [report(Role.PUBLISHER, 1, 0, 1), report(Role.CONSUMER, 1, 0, 1, 5)], False
    )
    alone = BenchResults.from_reports(
        settings(mode=Mode.PUBLISH), [report(Role.PUBLISHER, 1, 0, 1)], True
    )
    assert list(both.flat()) == list(alone.flat())
    assert alone.flat()["consume_messages"] == alone.flat()["latency_ms_p50"] == ""
    assert alone.flat()["interrupted"] == "true"
    assert both.flat()["publish_messages"] == 1
