"""nsq_stat --format=prometheus: one poll of the cluster in Prometheus's text format
(nsqtools.exposition), sans-IO.

Each nsqd's own counters for each topic and channel, as nsqd counts them, labelled
nsqd (its HTTP address), topic, channel (and partition, from the Youzan fork): depths,
in flight, deferred and clients as gauges; messages, requeued and timed out as counters
(`_total`; they start again from 0 when nsqd restarts, which Prometheus's rate()
allows for). No rates: Prometheus makes its own from the counters, so every poll is
one whole exposition, the first too. nsqtools_nsqd_up says whether each nsqd
answered the poll.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from nsqtools.exposition import Family, Labels, exposition, gauge
from nsqtools.stats.counters import Counters

if TYPE_CHECKING:
    from nsqtools.stats.polling import Poll

# (name after nsqtools_nsqd_<topic|channel>_, type, help, the count)
_Column = tuple[str, str, str, Callable[[Counters], float]]

_DEPTHS: tuple[_Column, ...] = (
    ("depth", "gauge", "Messages queued (in memory and on disk).", lambda c: c.depth),
    ("backend_depth", "gauge", "Messages queued on disk.", lambda c: c.backend_depth),
)
_MESSAGES: _Column = (
    "messages_total",
    "counter",
    "Messages that came in (since nsqd started).",
    lambda c: c.message_count,
)
_PAUSED: _Column = ("paused", "gauge", "1 while paused, else 0.", lambda c: c.paused)
TOPIC_COLUMNS = (*_DEPTHS, _MESSAGES, _PAUSED)
CHANNEL_COLUMNS = (
    *_DEPTHS,
    (
        "in_flight",
        "gauge",
        "Messages sent to clients, not answered yet.",
        lambda c: c.in_flight_count,
    ),
    (
        "deferred",
        "gauge",
        "Messages deferred (requeued with a delay, DPUB).",
        lambda c: c.deferred_count,
    ),
    ("requeued_total", "counter", "Messages requeued by clients.", lambda c: c.requeue_count),
    ("timed_out_total", "counter", "Messages not answered in time.", lambda c: c.timeout_count),
    _MESSAGES,
    ("clients", "gauge", "Clients subscribed.", lambda c: c.client_count),
    _PAUSED,
)


def poll_exposition(poll: Poll, topic: str = "", channel: str | None = None) -> str:
    """The poll's counters (of `topic` only, and of its `channel` only, when given)."""
    topics: list[tuple[Labels, Counters]] = []
    channels: list[tuple[Labels, Counters]] = []
    for node in poll.nodes:
        for stats in node.stats.topics if node.stats is not None else ():
            if topic and stats.topic_name != topic:
                continue
            labels = {"nsqd": node.address, "topic": stats.topic_name}
            if stats.partition is not None:
                labels["partition"] = str(stats.partition)
            topics.append((labels, Counters.of_topic(stats)))
            channels += [
                (labels | {"channel": kept.channel_name}, Counters.of_channel(kept))
                for kept in stats.channels
                if channel in (None, kept.channel_name)
            ]
    up = gauge(
        "nsqtools_nsqd_up",
        "1 if the nsqd answered the poll, else 0.",
        [({"nsqd": node.address}, node.stats is not None) for node in poll.nodes],
    )
    return exposition(
        [
            up,
            *_families("topic", TOPIC_COLUMNS, topics),
            *_families("channel", CHANNEL_COLUMNS, channels),
        ]
    )


def _families(
    what: str, columns: Sequence[_Column], rows: list[tuple[Labels, Counters]]
) -> list[Family]:
    return [
        Family(
            f"nsqtools_nsqd_{what}_{name}",
            kind,
            f"{what.capitalize()}, on one nsqd: {help_text}",
            [(labels, count(counters)) for labels, counters in rows],
        )
        for name, kind, help_text, count in columns
    ]
