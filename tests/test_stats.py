"""nsq_stat's library without a cluster: sums, rates over the measured interval, the
baseline and missing rows (tracking); Go's plain layout, JSON lines and notices (text);
the polling beat on a fake clock (polling). Real nsqds: tests/test_cli_stat.py."""

from __future__ import annotations

import json
from dataclasses import replace

from nsqtools.cluster import NodeStats
from nsqtools.httpapi import HttpApiError
from nsqtools.httpapi.nsqd import ChannelStats, E2eLatency, NsqdStats, Percentile, TopicStats
from nsqtools.stats import text
from nsqtools.stats.counters import Counters, Rates, rates_between
from nsqtools.stats.polling import beats
from nsqtools.stats.tracking import Failure, Tracker

TOPIC = "events"
A, B = "127.0.0.1:4151", "127.0.0.1:4251"
T0 = 1000.0  # monotonic seconds of the first poll
WALL = 1_800_000_000.0


def channel(name: str, **counts: object) -> ChannelStats:
    fields: dict[str, object] = {
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "paused": False,
        "e2e_processing_latency": None,
    }
    return ChannelStats(channel_name=name, clients=(), **(fields | counts))  # type: ignore[arg-type]


def node(address: str, *channels: ChannelStats, messages: int = 0, depth: int = 0) -> NodeStats:
    topic = TopicStats(TOPIC, depth, 0, messages, 0, False, channels, None)
    return NodeStats(address, NsqdStats("1.3.0", "OK", 0, (topic,), ()), None)


def without_topic(address: str) -> NodeStats:
    return NodeStats(address, NsqdStats("1.3.0", "OK", 0, (), ()), None)


def failed(address: str) -> NodeStats:
    return NodeStats(address, None, HttpApiError("nsqd", address, "GET /stats: timed out"))


# -- tracking --------------------------------------------------------------------------


def test_counters_add_up_and_memory_depth_is_depth_less_disk() -> None:
    summed = Counters(depth=5, backend_depth=2, message_count=7) + Counters(
        depth=1, message_count=1, paused=True
    )
    assert (summed.depth, summed.memory_depth, summed.message_count) == (6, 4, 8)
    assert summed.paused


def test_rates_are_what_came_in_and_what_left_per_second() -> None:
    before = Counters(depth=10, message_count=100)
    after = Counters(depth=30, message_count=150)
    assert rates_between(before, after, 0.5) == Rates(ingress=100.0, egress=60.0)


def test_counts_that_went_back_give_no_rate() -> None:
    """nsqd restarted, or the channel was deleted and made again."""
    assert rates_between(Counters(message_count=100), Counters(message_count=3), 2.0) is None


def test_the_first_poll_is_a_baseline_then_rates_use_the_measured_interval() -> None:
    tracker = Tracker(TOPIC, "c")
    first = tracker.update([node(A, channel("c", message_count=10))], T0, WALL)
    assert first.poll == 0 and first.elapsed is None
    assert [row.rates for row in first.rows] == [None]
    # Asked 2.5 s later (a nominal 2 s interval that ran late): 25 / 2.5, not 25 / 2.
    second = tracker.update([node(A, channel("c", message_count=35, depth=5))], T0 + 2.5, WALL)
    assert second.elapsed == 2.5
    assert second.rows[0].rates == Rates(ingress=10.0, egress=8.0)
    assert second.rows[0].history == (Rates(10.0, 8.0),)


def test_rows_sum_the_nsqds_and_keep_each_ones_counters() -> None:
    tracker = Tracker(TOPIC, "c")
    tracker.update(
        [node(A, channel("c", message_count=10)), node(B, channel("c", message_count=0))],
        T0,
        WALL,
    )
    report = tracker.update(
        [
            node(A, channel("c", message_count=20, depth=4, client_count=1)),
            node(B, channel("c", message_count=10, in_flight_count=3, client_count=2)),
        ],
        T0 + 1,
        WALL,
    )
    (row,) = report.rows
    assert (row.counters.message_count, row.counters.depth) == (30, 4)
    assert (row.counters.in_flight_count, row.counters.client_count) == (3, 3)
    assert row.rates == Rates(ingress=20.0, egress=16.0)
    assert [(n.address, n.counters.message_count) for n in row.nodes] == [(A, 20), (B, 10)]


def test_a_failed_nsqd_is_reported_and_the_others_still_counted() -> None:
    tracker = Tracker(TOPIC, "c")
    tracker.update([node(A, channel("c")), node(B, channel("c"))], T0, WALL)
    report = tracker.update([node(A, channel("c", message_count=4)), failed(B)], T0 + 1, WALL)
    assert report.failures == (Failure("nsqd", B, "GET /stats: timed out"),)
    assert report.rows[0].rates == Rates(4.0, 4.0)
    assert [n.address for n in report.rows[0].nodes] == [A]


def test_an_nsqd_back_from_a_failure_has_its_rate_over_the_time_since_its_last_answer() -> None:
    tracker = Tracker(TOPIC, "c")
    tracker.update([node(B, channel("c", message_count=0))], T0, WALL)
    tracker.update([failed(B)], T0 + 1, WALL)
    report = tracker.update([node(B, channel("c", message_count=40))], T0 + 2, WALL)
    assert report.rows[0].rates == Rates(20.0, 20.0)


def test_a_missing_channel_is_no_row_then_its_first_appearance_a_baseline() -> None:
    tracker = Tracker(TOPIC, "c")
    assert not tracker.update([node(A)], T0, WALL).found
    assert not tracker.update([without_topic(A)], T0 + 1, WALL).found
    appeared = tracker.update([node(A, channel("c", message_count=5))], T0 + 2, WALL)
    assert appeared.found and appeared.rows[0].rates is None
    later = tracker.update([node(A, channel("c", message_count=9))], T0 + 3, WALL)
    assert later.rows[0].rates == Rates(4.0, 4.0)


def test_a_channel_made_again_starts_from_a_new_baseline() -> None:
    tracker = Tracker(TOPIC, "c")
    tracker.update([node(A, channel("c", message_count=50))], T0, WALL)
    tracker.update([node(A)], T0 + 1, WALL)  # deleted
    again = tracker.update([node(A, channel("c", message_count=60))], T0 + 2, WALL)
    assert again.rows[0].rates is None


def test_without_a_channel_the_topic_comes_first_then_its_channels_by_name() -> None:
    tracker = Tracker(TOPIC, None)
    report = tracker.update(
        [node(A, channel("zeta"), channel("alpha"), messages=3, depth=1)], T0, WALL
    )
    assert [row.channel for row in report.rows] == [None, "alpha", "zeta"]
    assert report.rows[0].counters == Counters(depth=1, message_count=3)


def test_e2e_latency_is_each_percentile_at_its_slowest_nsqd() -> None:
    def latency(p50: float, p99: float) -> E2eLatency:
        return E2eLatency(10, (Percentile(0.5, p50), Percentile(0.99, p99)))

    tracker = Tracker(TOPIC, "c")
    report = tracker.update(
        [
            node(A, channel("c", e2e_processing_latency=latency(1e6, 9e6))),
            node(B, channel("c", e2e_processing_latency=latency(2e6, 5e6))),
        ],
        T0,
        WALL,
    )
    assert report.rows[0].e2e == (Percentile(0.5, 2e6), Percentile(0.99, 9e6))


def test_the_history_keeps_the_last_rates_only() -> None:
    tracker = Tracker(TOPIC, "c", history=3)
    for second in range(6):
        report = tracker.update([node(A, channel("c", message_count=second))], T0 + second, WALL)
    assert report.rows[0].history == (Rates(1.0, 1.0),) * 3


# -- text ------------------------------------------------------------------------------

GO_HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n"
)


def reports(tracker: Tracker, counts: list[int]) -> list[str]:
    """plain_lines of one poll a second, channel c's message_count as given."""
    return [
        text.plain_lines(tracker.update([node(A, channel("c", message_count=n))], T0 + i, WALL))
        for i, n in enumerate(counts)
    ]


def test_plain_is_gos_header_then_a_silent_baseline_then_rows() -> None:
    lines = reports(Tracker(TOPIC, "c"), [10, 13])
    assert lines[0] == GO_HEADER
    assert lines[1] == (
        "      3       3 |       0       0       0     0     0 |"
        "       0       0           13       0\n"
    )


def test_plain_repeats_the_header_every_25_polls() -> None:
    lines = reports(Tracker(TOPIC, "c"), [0] * 52)
    assert [i for i, line in enumerate(lines) if line.startswith(GO_HEADER)] == [0, 25, 50]
    assert all(line.count("\n") == 1 for line in lines[1:25])


def test_plain_rates_are_truncated_toward_zero_as_gos_int64() -> None:
    tracker = Tracker(TOPIC, "c")
    tracker.update([node(A, channel("c", message_count=0, depth=9))], T0, WALL)
    report = tracker.update([node(A, channel("c", message_count=5, depth=17))], T0 + 2, WALL)
    assert report.rows[0].rates == Rates(2.5, -1.5)
    assert text.plain_lines(report).startswith("      2      -1 |")


def test_plain_without_a_channel_names_each_row_and_dashes_what_a_topic_lacks() -> None:
    tracker = Tracker(TOPIC, None)
    tracker.update([node(A, channel("c"), messages=0)], T0, WALL)
    report = tracker.update([node(A, channel("c", message_count=2), messages=2)], T0 + 1, WALL)
    assert text.plain_lines(report) == (
        "      2       2 |       0       0       0     -     - |       -       -            2"
        "       - events\n"
        "      2       2 |       0       0       0     0     0 |       0       0            2"
        "       0 events/c\n"
    )
    first = Tracker(TOPIC, None).update([node(A)], T0, WALL)
    assert text.plain_lines(first) == GO_HEADER[:-1] + " name\n"


def test_a_json_line_is_one_object_with_rates_and_each_nsqds_counters() -> None:
    tracker = Tracker(TOPIC, "c")
    tracker.update([node(A, channel("c"))], T0, WALL)
    report = tracker.update(
        [node(A, channel("c", message_count=4, paused=True)), failed(B)], T0 + 2, WALL
    )
    line = text.json_line(report)
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record["interval"] == 2.0 and record["found"] is True
    (row,) = record["rows"]
    assert (row["channel"], row["message_count"], row["paused"]) == ("c", 4, True)
    assert (row["ingress_rate"], row["egress_rate"]) == (2.0, 2.0)
    assert [n["address"] for n in row["nodes"]] == [A]
    assert record["failures"] == [
        {"server": "nsqd", "address": B, "error": "GET /stats: timed out"}
    ]


def test_notices_say_what_changed_once() -> None:
    tracker = Tracker(TOPIC, "c")
    missing = tracker.update([node(A), failed(B)], T0, WALL)
    assert text.notices(None, missing) == [
        f"nsqd {B}: GET /stats: timed out",
        "channel(c) of topic(events) not found on any nsqd that answered, polling again",
    ]
    still = tracker.update([node(A), failed(B)], T0 + 1, WALL)
    assert text.notices(missing, still) == []
    back = tracker.update([node(A, channel("c")), node(B)], T0 + 2, WALL)
    assert text.notices(still, back) == [
        f"nsqd {B} answers again",
        "channel(c) of topic(events) found",
    ]


def test_a_failure_that_changes_is_said_again() -> None:
    tracker = Tracker(TOPIC, "c")
    first = tracker.update([failed(A)], T0, WALL)
    refused = replace(failed(A), error=HttpApiError("nsqd", A, "GET /stats: connection refused"))
    second = tracker.update([refused], T0 + 1, WALL)
    assert text.notices(first, second)[0] == f"nsqd {A}: GET /stats: connection refused"


# -- polling ---------------------------------------------------------------------------


class FakeClock:
    """A monotonic clock that moves only when slept on, or told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def test_beats_are_on_a_fixed_beat_with_no_wait_after_the_last_taken() -> None:
    clock = FakeClock()
    start = clock()
    seen = []
    for index in beats(2.0, clock, clock.sleep):
        seen.append((index, clock() - start))
        if index == 3:
            break
    assert seen == [(index, 2.0 * index) for index in range(4)]
    assert clock() - start == 2.0 * 3


def test_a_poll_that_overruns_skips_the_beats_it_missed() -> None:
    clock = FakeClock()
    start = clock()
    seen = []
    for index in beats(1.0, clock, clock.sleep):
        seen.append(clock() - start)
        if index == 0:
            clock.now += 2.5  # a slow poll
        if index == 3:
            break
    assert seen == [0.0, 3.0, 4.0, 5.0]


def test_the_beats_go_on() -> None:
    clock = FakeClock()
    start = clock()
    beat = beats(0.5, clock, clock.sleep)
    assert [next(beat) for _ in range(100)] == list(range(100))
    assert clock() - start == 0.5 * 99
