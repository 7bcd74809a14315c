"""What nsqd counts for a topic or a channel, summed over nsqds, and the rates between two
polls: the arithmetic nsq_stat and the inspection commands (`nsq topics`...) share,
sans-IO.

Counters add up across nsqds; rates_between turns two answers of one nsqd (or two sums)
and the time between them into messages per second in and out; merged_latency makes one
e2e latency of several nsqds'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from nsqtools.httpapi.nsqd import ChannelStats, E2eLatency, Percentile, TopicStats


@dataclass(frozen=True)
class Counters:
    """What nsqd counts for a topic or a channel (a topic has no clients, in-flight,
    deferred, requeued or timed-out messages: those stay 0)."""

    depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    message_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    client_count: int = 0
    paused: bool = False

    @property
    def memory_depth(self) -> int:
        """Messages in memory, as Go's nsq_stat computes it."""
        return self.depth - self.backend_depth

    def __add__(self, other: Counters) -> Counters:
        summed = {
            field.name: getattr(self, field.name) + getattr(other, field.name)
            for field in fields(self)
            if field.name != "paused"
        }
        return Counters(**summed, paused=self.paused or other.paused)

    @classmethod
    def of_topic(cls, topic: TopicStats) -> Counters:
        return cls(
            depth=topic.depth,
            backend_depth=topic.backend_depth,
            message_count=topic.message_count,
            paused=topic.paused,
        )

    @classmethod
    def of_channel(cls, channel: ChannelStats) -> Counters:
        return cls(
            depth=channel.depth,
            backend_depth=channel.backend_depth,
            in_flight_count=channel.in_flight_count,
            deferred_count=channel.deferred_count,
            message_count=channel.message_count,
            requeue_count=channel.requeue_count,
            timeout_count=channel.timeout_count,
            client_count=channel.client_count,
            paused=channel.paused,
        )


@dataclass(frozen=True)
class Rates:
    """Messages per second: in (published to the topic, or copied to the channel) and
    out (that left the topic for its channels, or were finished by the channel's
    consumers): what came in less what the depth grew by."""

    ingress: float
    egress: float

    def __add__(self, other: Rates) -> Rates:
        return Rates(self.ingress + other.ingress, self.egress + other.egress)


def rates_between(before: Counters, after: Counters, seconds: float) -> Rates | None:
    """The rates from one answer to the next; None when the counts went back."""
    arrived = after.message_count - before.message_count
    if arrived < 0 or seconds <= 0:
        return None
    departed = arrived - (after.depth - before.depth)
    return Rates(arrived / seconds, departed / seconds)


def merged_latency(latencies: Iterable[E2eLatency | None]) -> E2eLatency | None:
    """Several nsqds' e2e latency as one: the messages measured add up; percentiles of
    separate windows cannot be combined exactly, so each quantile is the highest any
    nsqd reports (the latency no node exceeds, as nsqadmin shows it). An nsqd that
    measured no message yet reports zeros: those are left out. None when no nsqd
    measures latency."""
    reported = [latency for latency in latencies if latency is not None]
    if not reported:
        return None
    highest: dict[float, float] = {}
    for latency in reported:
        for percentile in latency.percentiles if latency.count else ():
            quantile = percentile.quantile
            highest[quantile] = max(highest.get(quantile, 0.0), percentile.value)
    return E2eLatency(
        count=sum(latency.count for latency in reported),
        percentiles=tuple(Percentile(q, value) for q, value in sorted(highest.items())),
    )
