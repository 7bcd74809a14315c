"""nsq_stat's arithmetic, sans-IO: one poll's answers and when they were asked become a
Report.

A Report has a Row for the topic's channel asked for, or for the topic and each of its
channels: the counters summed over the nsqds that answered, each nsqd's own row, the
rates (messages per second in and out) and their recent history. A rate is computed
per nsqd, over the time measured since that nsqd's previous answer, and the nsqds'
rates are summed: with every nsqd answering every poll that is exactly Go's
Δsum / interval; an nsqd that missed a poll does not drag the total down, and one whose
counts went back (restarted, or the channel re-created) starts again from a new
baseline instead of showing a negative rate. The Youzan fork's nsqds answer one entry
per partition: each partition is a node row of its own (its nsqd and its partition),
summed like the nsqds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from nsqtools.cluster import NodeStats
from nsqtools.httpapi.nsqd import E2eLatency, Percentile, TopicStats
from nsqtools.stats.counters import Counters, Rates, merged_latency, rates_between

HISTORY = 60  # rates kept per row, for the sparklines


@dataclass(frozen=True)
class NodeRow:
    """A topic or channel on one nsqd (on one partition of it, from the fork)."""

    address: str
    counters: Counters
    rates: Rates | None  # None on the nsqd's first answer that has it
    e2e: E2eLatency | None
    partition: int | None = None  # None from upstream nsqd


@dataclass(frozen=True)
class Row:
    """The topic (channel None) or one of its channels, over every nsqd that has it."""

    channel: str | None
    counters: Counters
    rates: Rates | None  # the sum over the nsqds whose rates are known; None if none is
    nodes: tuple[NodeRow, ...]
    history: tuple[Rates, ...]  # oldest first, this poll's rates last

    @property
    def e2e(self) -> tuple[Percentile, ...]:
        """Each percentile nsqd tracks, at its slowest nsqd (as nsqadmin shows them)."""
        merged = merged_latency(node.e2e for node in self.nodes)
        return merged.percentiles if merged is not None else ()


@dataclass(frozen=True)
class Failure:
    """An nsqd or nsqlookupd that could not be asked this poll."""

    server: str  # "nsqd" or "nsqlookupd"
    address: str
    reason: str


@dataclass(frozen=True)
class Report:
    """One poll, aggregated. `rows` is empty while the topic (or the channel asked
    for) exists on no nsqd that answered."""

    topic: str
    channel: str | None  # the channel asked for; None: the topic and every channel
    poll: int  # 0 for the first
    wall_time: float  # when the nsqds were asked, unix seconds
    elapsed: float | None  # seconds since the previous poll
    rows: tuple[Row, ...]
    failures: tuple[Failure, ...]

    @property
    def found(self) -> bool:
        return bool(self.rows)


# (nsqd address, the fork's partition or None, channel or None for the topic)
_Key = tuple[str, int | None, str | None]


@dataclass(frozen=True)
class _Answer:
    counters: Counters
    e2e: E2eLatency | None
    asked_at: float


class Tracker:
    """Turns each poll into a Report, remembering what rates need: every nsqd's
    previous answer for each row, and the history of each row's rates."""

    def __init__(self, topic: str, channel: str | None, history: int = HISTORY) -> None:
        self.topic = topic
        self.channel = channel
        self._history_length = history
        self._previous: dict[_Key, _Answer] = {}
        self._histories: dict[str | None, deque[Rates]] = {}
        self._last_poll: float | None = None
        self._polls = 0

    def update(
        self,
        nodes: Sequence[NodeStats],
        asked_at: float,
        wall_time: float,
        failures: Sequence[Failure] = (),
    ) -> Report:
        """The report of one poll: `nodes` as cluster.poll_stats answered, asked at
        `asked_at` (monotonic seconds); `failures`: the lookupds that failed too."""
        answers = dict(self._answers(nodes, asked_at))
        rows: dict[str | None, list[NodeRow]] = {}
        for key, answer in answers.items():
            address, partition, channel = key
            before = self._previous.get(key)
            rates = None
            if before is not None:
                rates = rates_between(before.counters, answer.counters, asked_at - before.asked_at)
            rows.setdefault(channel, []).append(
                NodeRow(address, answer.counters, rates, answer.e2e, partition)
            )
        self._forget_gone(nodes, answers)
        self._previous.update(answers)
        failed = [
            Failure(node.error.server, node.address, node.error.reason)
            for node in nodes
            if node.error is not None
        ]
        report = Report(
            topic=self.topic,
            channel=self.channel,
            poll=self._polls,
            wall_time=wall_time,
            elapsed=None if self._last_poll is None else asked_at - self._last_poll,
            rows=tuple(self._row(channel, rows[channel]) for channel in _ordered(rows)),
            failures=(*failures, *failed),
        )
        self._polls += 1
        self._last_poll = asked_at
        return report

    def _answers(
        self, nodes: Sequence[NodeStats], asked_at: float
    ) -> Iterator[tuple[_Key, _Answer]]:
        """Every row's counters on each nsqd that answered and has the topic."""
        for node in nodes:
            topics = node.stats.topics if node.stats is not None else ()
            for topic in (topic for topic in topics if topic.topic_name == self.topic):
                for channel, counters, e2e in self._rows_of(topic):
                    key = (node.address, topic.partition, channel)
                    yield key, _Answer(counters, e2e, asked_at)

    def _rows_of(
        self, topic: TopicStats
    ) -> Iterator[tuple[str | None, Counters, E2eLatency | None]]:
        """The topic itself (unless a channel was asked for), and its channels (or the
        one asked for)."""
        if self.channel is None:
            yield None, Counters.of_topic(topic), topic.e2e_processing_latency
        for channel in topic.channels:
            if self.channel in (None, channel.channel_name):
                counters = Counters.of_channel(channel)
                yield channel.channel_name, counters, channel.e2e_processing_latency

    def _forget_gone(self, nodes: Sequence[NodeStats], answers: dict[_Key, _Answer]) -> None:
        """An nsqd that answered without a row it had: the row is gone from it, and
        comes back (if ever) from a new baseline. One that failed keeps its rows."""
        answered = {node.address for node in nodes if node.stats is not None}
        for key in [key for key in self._previous if key[0] in answered and key not in answers]:
            del self._previous[key]

    def _row(self, channel: str | None, nodes: list[NodeRow]) -> Row:
        counters = sum((node.counters for node in nodes), Counters())
        known = [node.rates for node in nodes if node.rates is not None]
        rates = sum(known[1:], known[0]) if known else None
        history = self._histories.setdefault(channel, deque(maxlen=self._history_length))
        if rates is not None:
            history.append(rates)
        return Row(channel, counters, rates, tuple(nodes), tuple(history))


def _ordered(rows: dict[str | None, list[NodeRow]]) -> list[str | None]:
    """The topic first, then its channels by name."""
    channels = sorted(channel for channel in rows if channel is not None)
    return ([None] if None in rows else []) + channels
