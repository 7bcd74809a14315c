"""Flow control as pure policy: how much RDY each connection gets, and backoff.

Nothing here does I/O or reads a clock: time and randomness are passed in, so the
consumer's RDY and backoff behaviour is unit-tested without sockets or sleeps.

RDY rules (see shared/spec/protocol.md): the sum over connections never exceeds
max_in_flight, no connection exceeds nsqd's max_rdy_count; when max_in_flight is at
least the number of connections it is spread evenly; when it is smaller, the few
units rotate: a connection idle for low_rdy_idle_timeout, or holding its unit for
low_rdy_timeout however busy, gives it up at the next redistribution, so every nsqd
is served in turn and eventually drained.

Backoff (go-nsq's semantics): a failure raises the backoff level (while the pause of
the next level, backoff_multiplier * 2^level, still fits under max_backoff_duration)
and pauses the consumer (RDY 0 everywhere) for a duration that grows with the level;
after the pause one connection gets RDY 1 to test the water; a success lowers the
level, a requeue without backoff keeps it, and at level 0 full speed resumes. Only one
result per pause counts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

Key = str  # a connection, by its nsqd address


@dataclass(frozen=True)
class ConnectionView:
    """What the planner needs to know about one connection."""

    key: Key
    max_rdy_count: int
    ready: int  # the RDY last sent
    idle_for: float  # seconds since its last message (or since it connected)
    held_for: float  # seconds since its RDY was last set above 0


@dataclass(frozen=True)
class LowReadyTimeouts:
    """When a connection gives up one of a few RDY units (go-nsq's two options)."""

    idle: float  # low_rdy_idle_timeout: no message for this long
    held: float  # low_rdy_timeout: the unit held this long, however busy


def even_shares(max_in_flight: int, connections: Sequence[ConnectionView]) -> dict[Key, int]:
    """Spread max_in_flight over the connections; the first ones get the remainder."""
    count = len(connections)
    if count == 0:
        return {}
    share, extra = divmod(max_in_flight, count)
    return {
        view.key: min(share + (1 if index < extra else 0), view.max_rdy_count)
        for index, view in enumerate(connections)
    }


def rotate_scarce_ready(
    max_in_flight: int,
    connections: Sequence[ConnectionView],
    timeouts: LowReadyTimeouts,
    rng: random.Random,
) -> dict[Key, int]:
    """max_in_flight units of RDY 1 for more connections than units.

    Holders keep their unit unless idle for timeouts.idle or holding it for
    timeouts.held; free units go to connections without one, chosen at random so no
    nsqd is favoured forever.
    """
    keep = [
        view.key
        for view in connections
        if view.ready > 0 and view.idle_for < timeouts.idle and view.held_for < timeouts.held
    ][:max_in_flight]
    waiting = [view.key for view in connections if view.key not in keep and view.ready == 0]
    released = [view.key for view in connections if view.key not in keep and view.ready > 0]
    rng.shuffle(waiting)
    # Holders that give a unit up go to the back of the queue.
    chosen = keep + (waiting + released)[: max_in_flight - len(keep)]
    return {view.key: (1 if view.key in chosen else 0) for view in connections}


def plan_ready(
    max_in_flight: int,
    connections: Sequence[ConnectionView],
    timeouts: LowReadyTimeouts,
    rng: random.Random,
) -> dict[Key, int]:
    """The RDY each connection should have at full speed."""
    if max_in_flight >= len(connections):
        return even_shares(max_in_flight, connections)
    return rotate_scarce_ready(max_in_flight, connections, timeouts, rng)


class Outcome(Enum):
    """What the application did with a message, as go-nsq's backoff signals count it."""

    FINISHED = "finished"  # go-nsq's resume: lowers the level
    FAILED = "failed"  # a requeue with backoff: raises it
    REQUEUED = "requeued"  # a requeue without backoff, go-nsq's continue: keeps it


class BackoffAction(Enum):
    NOTHING = "nothing"
    PAUSE = "pause"  # RDY 0 everywhere for `Backoff.pause_duration`, then test the water
    RESUME = "resume"  # back to full speed


class Backoff:
    """go-nsq's backoff state machine; the consumer applies what it returns."""

    def __init__(
        self,
        strategy: str,
        multiplier: float,
        max_duration: float,
        rng: random.Random,
    ) -> None:
        if strategy not in ("exponential", "full_jitter"):
            raise ValueError(f"unknown backoff strategy {strategy!r}")
        self.strategy = strategy
        self.multiplier = multiplier
        self.max_duration = max_duration
        self.rng = rng
        self.level = 0
        self.paused = False
        self.pause_duration = 0.0

    @property
    def active(self) -> bool:
        """True while backing off: paused, or testing the water with RDY 1."""
        return self.level > 0

    def duration(self) -> float:
        exponential = min(self._exponential(self.level), self.max_duration)
        if self.strategy == "full_jitter":
            return self.rng.uniform(0, exponential)
        return exponential

    def _exponential(self, level: int) -> float:
        # ldexp: multiplier * 2^level, and 0 rather than an overflow when the multiplier is 0.
        return math.ldexp(self.multiplier, level)

    def _fits(self, level: int) -> bool:
        """go-nsq's cap: a failure raises the level only while the pause of the next level,
        multiplier * 2^level, is at most max_duration (so 0 means no backoff at all).
        With full_jitter go-nsq checks a random draw instead, so its level may creep past
        this point now and then; ours stops where the exponential one does."""
        return self._exponential(level) <= self.max_duration

    def record(self, outcome: Outcome) -> BackoffAction:
        """One message outcome. Ignored during a pause: only one result per window counts.

        While backing off, every outcome starts another pause (or resumes at level 0), as
        go-nsq's resume, backoff and continue signals do."""
        if self.paused or (self.level == 0 and outcome is not Outcome.FAILED):
            return BackoffAction.NOTHING
        if outcome is Outcome.FINISHED:
            self.level -= 1
            if self.level == 0:
                return BackoffAction.RESUME
        elif outcome is Outcome.FAILED and self._fits(self.level + 1):
            self.level += 1
        if self.level == 0:
            return BackoffAction.NOTHING  # a failure, but max_duration allows no pause
        self.paused = True
        self.pause_duration = self.duration()
        return BackoffAction.PAUSE

    def pause_ended(self) -> None:
        """The pause is over: the consumer now tests the water with RDY 1 on one connection."""
        self.paused = False


def probe_ready(connections: Sequence[ConnectionView], rng: random.Random) -> dict[Key, int]:
    """RDY 1 on one connection chosen at random, 0 elsewhere (after a backoff pause)."""
    if not connections:
        return {}
    chosen = rng.choice(connections).key
    return {view.key: (1 if view.key == chosen else 0) for view in connections}


def requeue_delay(attempts: int, default_delay: float, max_delay: float) -> float:
    """go-nsq's delay for a requeue without an explicit one: grows with attempts, capped."""
    return min(default_delay * attempts, max_delay)


def starved(in_flight: Mapping[Key, int], ready: Mapping[Key, int]) -> bool:
    """True when some connection has in-flight messages at 85% or more of its RDY: nsqd
    will send it nothing more until some are answered, so batch writers should flush."""
    return any(count > 0 and count >= 0.85 * ready.get(key, 0) for key, count in in_flight.items())


class TokenBucket:
    """A rate limit of `rate` per second with at most one second of saved capacity,
    as the Go to_nsq throttles (it starts with a balance of 1)."""

    def __init__(self, rate: float, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.balance = 1.0
        self._updated = now

    def take(self, wanted: int, now: float) -> int:
        """Take up to `wanted` whole tokens now; return how many were granted."""
        self._refill(now)
        granted = min(wanted, int(self.balance))
        self.balance -= granted
        return granted

    def wait_time(self, now: float) -> float:
        """Seconds until at least one token is available."""
        self._refill(now)
        return max(0.0, (1 - self.balance) / self.rate)

    def _refill(self, now: float) -> None:
        self.balance = min(self.rate, self.balance + (now - self._updated) * self.rate)
        self._updated = now
