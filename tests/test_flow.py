"""RDY and backoff policy, pure: time and randomness are passed in."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nsqtools.flow import (
    Backoff,
    BackoffAction,
    ConnectionView,
    LowReadyTimeouts,
    Outcome,
    even_shares,
    plan_ready,
    probe_ready,
    requeue_delay,
    rotate_scarce_ready,
    starved,
)


def views(
    count: int, max_rdy: int = 2500, ready: int = 0, idle: float = 0.0
) -> list[ConnectionView]:
    return [
        ConnectionView(f"nsqd{index}:4150", max_rdy, ready, idle, held_for=0.0)
        for index in range(count)
    ]


TIMEOUTS = LowReadyTimeouts(idle=10.0, held=30.0)


@given(st.integers(0, 10_000), st.integers(1, 50), st.integers(1, 2500))
def test_even_shares_never_exceed_max_in_flight_nor_max_rdy(
    max_in_flight: int, count: int, max_rdy: int
) -> None:
    shares = even_shares(max_in_flight, views(count, max_rdy))
    assert sum(shares.values()) <= max_in_flight
    assert all(0 <= share <= max_rdy for share in shares.values())
    if max_in_flight <= count * max_rdy:
        assert sum(shares.values()) == max_in_flight  # nothing wasted when it fits
    assert max(shares.values()) - min(shares.values()) <= 1 or max_in_flight > count * max_rdy


def test_even_shares_spread_the_remainder() -> None:
    assert sorted(even_shares(7, views(2)).values()) == [3, 4]


@given(st.integers(1, 10), st.integers(2, 30), st.integers(0, 2**32))
def test_scarce_ready_gives_units_of_one_within_the_total(
    max_in_flight: int, count: int, seed: int
) -> None:
    plan = rotate_scarce_ready(max_in_flight, views(count), TIMEOUTS, random.Random(seed))
    assert set(plan.values()) <= {0, 1}
    assert sum(plan.values()) == min(max_in_flight, count)


def test_scarce_ready_keeps_busy_holders_and_releases_idle_ones() -> None:
    connections = [
        ConnectionView("busy:1", 2500, 1, idle_for=0.5, held_for=5.0),
        ConnectionView("idle:1", 2500, 1, idle_for=30.0, held_for=5.0),
        ConnectionView("waiting:1", 2500, 0, idle_for=30.0, held_for=60.0),
    ]
    plan = rotate_scarce_ready(2, connections, TIMEOUTS, random.Random(1))
    assert plan == {"busy:1": 1, "idle:1": 0, "waiting:1": 1}


def test_scarce_ready_releases_a_busy_holder_after_low_rdy_timeout() -> None:
    """go-nsq's low_rdy_timeout: a unit held that long moves on, however busy its nsqd."""
    connections = [
        ConnectionView("busy-long:1", 2500, 1, idle_for=0.5, held_for=30.0),
        ConnectionView("waiting:1", 2500, 0, idle_for=0.5, held_for=0.0),
    ]
    plan = rotate_scarce_ready(1, connections, TIMEOUTS, random.Random(1))
    assert plan == {"busy-long:1": 0, "waiting:1": 1}


def test_scarce_ready_rotates_so_every_connection_gets_a_turn() -> None:
    rng, served = random.Random(7), set()
    connections = views(5, idle=30.0)  # everyone idle: units move on each round
    for _ in range(20):
        plan = rotate_scarce_ready(1, connections, TIMEOUTS, rng)
        served |= {key for key, ready in plan.items() if ready}
        connections = [ConnectionView(v.key, 2500, plan[v.key], 30.0, 0.0) for v in connections]
    assert served == {view.key for view in views(5)}


def test_plan_ready_chooses_the_mode() -> None:
    assert sum(plan_ready(10, views(3), TIMEOUTS, random.Random(0)).values()) == 10
    assert sum(plan_ready(2, views(3), TIMEOUTS, random.Random(0)).values()) == 2


def test_probe_ready_is_one_connection_at_one() -> None:
    plan = probe_ready(views(4), random.Random(3))
    assert sorted(plan.values()) == [0, 0, 0, 1]
    assert probe_ready([], random.Random(3)) == {}


def make_backoff(strategy: str = "exponential") -> Backoff:
    return Backoff(strategy, multiplier=1.0, max_duration=120.0, rng=random.Random(5))


def test_backoff_grows_then_shrinks_then_resumes() -> None:
    backoff = make_backoff()
    assert backoff.record(Outcome.FINISHED) is BackoffAction.NOTHING  # not backing off
    assert backoff.record(Outcome.FAILED) is BackoffAction.PAUSE
    assert (backoff.level, backoff.pause_duration) == (1, 2.0)
    assert backoff.record(Outcome.FAILED) is BackoffAction.NOTHING  # one result per pause
    backoff.pause_ended()
    assert backoff.record(Outcome.FAILED) is BackoffAction.PAUSE
    assert (backoff.level, backoff.pause_duration) == (2, 4.0)
    backoff.pause_ended()
    assert backoff.record(Outcome.FINISHED) is BackoffAction.PAUSE  # shorter, still backing off
    assert (backoff.level, backoff.pause_duration) == (1, 2.0)
    backoff.pause_ended()
    assert backoff.record(Outcome.FINISHED) is BackoffAction.RESUME
    assert not backoff.active


def test_a_requeue_without_backoff_keeps_the_level() -> None:
    """go-nsq's continue: while backing off, another pause at the same level; else nothing."""
    backoff = make_backoff()
    assert backoff.record(Outcome.REQUEUED) is BackoffAction.NOTHING  # not backing off
    for _ in range(2):
        backoff.record(Outcome.FAILED)
        backoff.pause_ended()
    assert backoff.record(Outcome.REQUEUED) is BackoffAction.PAUSE
    assert (backoff.level, backoff.pause_duration) == (2, 4.0)
    assert backoff.record(Outcome.REQUEUED) is BackoffAction.NOTHING  # one result per pause
    backoff.pause_ended()
    assert backoff.record(Outcome.FINISHED) is BackoffAction.PAUSE
    assert backoff.level == 1


def test_backoff_is_capped_by_max_duration() -> None:
    backoff = make_backoff()
    for _ in range(20):
        backoff.record(Outcome.FAILED)
        backoff.pause_ended()
    assert backoff.duration() == 64.0  # 128s would exceed the 120s maximum
    assert backoff.level == 6


NANOSECONDS = 1_000_000_000
ONE_HOUR_NS = 3600 * NANOSECONDS  # go-nsq's upper bound for both options


def go_nsq_level_after_failure(level: int, multiplier_ns: int, max_ns: int) -> int:
    """go-nsq v1.1.0 startStopContinueBackoff, backoffFlag: the level rises only when
    ExponentialStrategy.Calculate(level + 1), multiplier * 2^(level + 1) in integer
    nanoseconds, is <= MaxBackoffDuration."""
    return level + 1 if multiplier_ns << (level + 1) <= max_ns else level


def go_nsq_pause_ns(level: int, multiplier_ns: int, max_ns: int) -> int:
    """Its pause at a level > 0: Calculate(level), capped at MaxBackoffDuration."""
    return min(multiplier_ns << level, max_ns)


@given(
    st.integers(1, ONE_HOUR_NS),
    st.integers(0, ONE_HOUR_NS),
    st.integers(1, 60),
)
@example(multiplier_ns=NANOSECONDS // 10, max_ns=120 * NANOSECONDS, failures=20)
@example(multiplier_ns=NANOSECONDS, max_ns=120 * NANOSECONDS, failures=20)
@example(multiplier_ns=NANOSECONDS, max_ns=128 * NANOSECONDS, failures=20)  # exactly 2^7
@example(multiplier_ns=NANOSECONDS, max_ns=0, failures=3)  # 0: no backoff at all
def test_backoff_level_rises_only_while_the_next_pause_fits_as_in_go_nsq(
    multiplier_ns: int, max_ns: int, failures: int
) -> None:
    backoff = Backoff(
        "exponential", multiplier_ns / NANOSECONDS, max_ns / NANOSECONDS, random.Random(0)
    )
    level = 0
    for _ in range(failures):
        level = go_nsq_level_after_failure(level, multiplier_ns, max_ns)
        action = backoff.record(Outcome.FAILED)
        assert backoff.level == level
        if level == 0:
            assert action is BackoffAction.NOTHING
            continue
        assert action is BackoffAction.PAUSE
        assert backoff.pause_duration == go_nsq_pause_ns(level, multiplier_ns, max_ns) / NANOSECONDS
        backoff.pause_ended()


def test_longest_pause_at_a_two_minute_maximum_depends_on_the_multiplier() -> None:
    """The issue's numbers: with max_backoff_duration 2m, 102.4s at 100ms and 64s at 1s."""
    for multiplier, longest in ((0.1, 102.4), (1.0, 64.0)):
        backoff = Backoff("exponential", multiplier, 120.0, random.Random(0))
        for _ in range(30):
            backoff.record(Outcome.FAILED)
            backoff.pause_ended()
        assert backoff.pause_duration == longest


def test_full_jitter_stays_below_the_exponential_duration() -> None:
    backoff = make_backoff("full_jitter")
    backoff.level = 3
    durations = [backoff.duration() for _ in range(200)]
    assert all(0 <= duration <= 8.0 for duration in durations)
    assert len(set(durations)) > 100


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown backoff strategy"):
        make_backoff("linear")


def test_requeue_delay_grows_with_attempts_and_is_capped() -> None:
    assert requeue_delay(1, 90.0, 900.0) == 90.0
    assert requeue_delay(3, 90.0, 900.0) == 270.0
    assert requeue_delay(50, 90.0, 900.0) == 900.0


def test_starved_at_85_percent_of_ready() -> None:
    assert not starved({"a": 84}, {"a": 100})
    assert starved({"a": 85}, {"a": 100})
    assert starved({"a": 1}, {"a": 0})  # RDY 0: nothing more comes until answers go out
    assert not starved({"a": 0}, {"a": 0})
