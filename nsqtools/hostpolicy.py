"""Choosing which nsqd gets the next batch: the producer's modes other than "all".

Owns go-hostpool's pools as nsq_to_nsq uses them ("round-robin", "hostpool",
"epsilon-greedy") behind one HostPolicy interface, and make_policy, which maps a mode
name to its policy. Pure: no trio, no sockets; the time is passed in, so every policy
is tested without either.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Protocol

MODES = ("all", "round-robin", "hostpool", "epsilon-greedy")


class HostPolicy(Protocol):
    """Chooses which nsqd (by index) gets the next batch; told how each attempt went."""

    def pick(self, now: float) -> int:
        """The host for a new batch."""

    def pick_another(self, now: float, tried: Collection[int]) -> int | None:
        """A live host not in `tried` for a batch that failed there, or None."""

    def mark_success(self, host: int, now: float, response_time: float) -> None: ...

    def mark_failed(self, host: int, now: float) -> None: ...


class _Rotation:
    """Hosts taken in turn, starting after the last one taken."""

    def __init__(self, host_count: int) -> None:
        self.host_count = host_count
        self._next = 0

    def _rotation(self) -> Iterator[int]:
        for offset in range(self.host_count):
            yield (self._next + offset) % self.host_count

    def _take(self, host: int) -> int:
        self._next = host + 1
        return host


class RoundRobin(_Rotation):
    """Every host in turn, whatever happened before; a retry goes to the next host
    that has not failed since its last success."""

    def __init__(self, host_count: int) -> None:
        super().__init__(host_count)
        self._failing: set[int] = set()

    def pick(self, now: float) -> int:
        return self._take(next(self._rotation()))

    def pick_another(self, now: float, tried: Collection[int]) -> int | None:
        for host in self._rotation():
            if host not in tried and host not in self._failing:
                return self._take(host)
        return None

    def mark_success(self, host: int, now: float, response_time: float) -> None:
        self._failing.discard(host)

    def mark_failed(self, host: int, now: float) -> None:
        self._failing.add(host)


@dataclass
class _Health:
    dead: bool = False
    retry_delay: float = 0.0
    next_retry: float = 0.0


class HostPool(_Rotation):
    """go-hostpool's standard pool: live hosts in turn; a host that failed is skipped
    until its retry time, and each retry that is not followed by a success doubles
    the delay (up to max_retry_delay). When every host is down, all are tried again."""

    def __init__(
        self, host_count: int, retry_delay: float = 30.0, max_retry_delay: float = 900.0
    ) -> None:
        super().__init__(host_count)
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._health = [_Health() for _ in range(host_count)]

    def pick(self, now: float) -> int:
        host = self.pick_another(now, ())
        if host is not None:
            return host
        self._health = [_Health() for _ in range(self.host_count)]
        return self._take(0)

    def pick_another(self, now: float, tried: Collection[int]) -> int | None:
        for host in self._rotation():
            if host not in tried and self.can_try(host, now):
                self._retry_if_dead(host, now)
                return self._take(host)
        return None

    def can_try(self, host: int, now: float) -> bool:
        health = self._health[host]
        return not health.dead or health.next_retry < now

    def _retry_if_dead(self, host: int, now: float) -> None:
        health = self._health[host]
        if health.dead:
            health.retry_delay = min(2 * health.retry_delay, self.max_retry_delay)
            health.next_retry = now + health.retry_delay

    def mark_success(self, host: int, now: float, response_time: float) -> None:
        self._health[host].dead = False

    def mark_failed(self, host: int, now: float) -> None:
        health = self._health[host]
        if not health.dead:
            health.dead = True
            health.retry_delay = self.retry_delay
            health.next_retry = now + self.retry_delay


class EpsilonGreedy(HostPool):
    """go-hostpool's epsilon-greedy pool: with probability epsilon (0.3, decaying by
    0.9 at each exploration down to 0.01) explore in turn like HostPool; otherwise
    choose among the hosts that can be tried, weighted by 1 / their recent response
    time. Response times are kept in 120 buckets over decay_duration; newer buckets
    weigh more. Unlike go-hostpool, times are not rounded to whole milliseconds (so
    sub-millisecond answers count) and the weighted mean is a mean (go-hostpool's sum
    lets one old sample grow as it ages)."""

    BUCKETS = 120
    INITIAL_EPSILON = 0.3
    EPSILON_DECAY = 0.9
    MIN_EPSILON = 0.01

    def __init__(
        self,
        host_count: int,
        retry_delay: float = 30.0,
        max_retry_delay: float = 900.0,
        decay_duration: float = 300.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(host_count, retry_delay, max_retry_delay)
        self.epsilon = self.INITIAL_EPSILON
        self._rng = rng or random.Random()
        self._bucket_duration = decay_duration / self.BUCKETS
        self._bucket_number = 0  # of the bucket being filled, counted from time 0
        self._counts = [[0] * self.BUCKETS for _ in range(host_count)]
        self._totals = [[0.0] * self.BUCKETS for _ in range(host_count)]

    def pick(self, now: float) -> int:
        self._advance(now)
        if self._rng.random() < self.epsilon:
            self.epsilon = max(self.epsilon * self.EPSILON_DECAY, self.MIN_EPSILON)
            return super().pick(now)
        host = self._weighted_choice(now)
        if host is None:
            return super().pick(now)
        self._retry_if_dead(host, now)
        return host

    def _weighted_choice(self, now: float) -> int | None:
        values = {}
        for host in range(self.host_count):
            average = self.average_response_time(host, now)
            if average > 0 and self.can_try(host, now):
                values[host] = 1 / average
        if not values:
            return None
        return self._rng.choices(list(values), weights=list(values.values()))[0]

    def average_response_time(self, host: int, now: float) -> float:
        """The mean of the buckets' means, bucket i of 120 (oldest first) weighing i, so
        recent answers count more; 0 when none came within decay_duration."""
        self._advance(now)
        weighted = weights = 0.0
        current = self._bucket_number % self.BUCKETS
        counts, totals = self._counts[host], self._totals[host]
        for age in range(1, self.BUCKETS + 1):
            position = (current + age) % self.BUCKETS
            if counts[position]:
                weighted += age * totals[position] / counts[position]
                weights += age
        return weighted / weights if weights else 0.0

    def mark_success(self, host: int, now: float, response_time: float) -> None:
        super().mark_success(host, now, response_time)
        self._advance(now)
        position = self._bucket_number % self.BUCKETS
        self._counts[host][position] += 1
        self._totals[host][position] += response_time

    def _advance(self, now: float) -> None:
        """Empty the buckets that time has moved past (all of them after a long gap)."""
        number = int(now // self._bucket_duration)
        last_to_empty = min(number, self._bucket_number + self.BUCKETS)
        for skipped in range(self._bucket_number + 1, last_to_empty + 1):
            position = skipped % self.BUCKETS
            for counts, totals in zip(self._counts, self._totals, strict=True):
                counts[position], totals[position] = 0, 0.0
        self._bucket_number = max(number, self._bucket_number)


def make_policy(
    mode: str, host_count: int, retry_delay: float, max_retry_delay: float
) -> HostPolicy | None:
    """The policy for a mode; None for "all", which sends every batch everywhere."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "round-robin":
        return RoundRobin(host_count)
    if mode == "hostpool":
        return HostPool(host_count, retry_delay, max_retry_delay)
    if mode == "epsilon-greedy":
        return EpsilonGreedy(host_count, retry_delay, max_retry_delay)
    return None
