"""nsq_stat's polls: when to poll (on a clock given, the monotonic one by default), and
one poll of the cluster as a plan (nsqtools.httpapi.plans) for the caller to run: nsq_stat
runs it on threads (httpapi.blocking), with neither trio nor httpx to import.

Polls start at once, then on a fixed beat (start + k * interval: a slow poll does not
push the later ones back, it skips the beats it overran). With a count (RowCount), the
run ends at once after the count-th poll that printed rows (Go's sleeps one more
interval before exiting); the polls that found no topic or channel, and the first that
found it (its baseline), print none and are not counted. One that never appears ends
the run with exit 1 (Go's ends at the first poll that misses it). Each poll finds
the nsqds (the given ones, or the topic's producers through the lookupds, asked again
every poll as Go does) and asks all their /stats at once.

Only the first poll can end the run, when it reaches nothing at all (every lookupd, or
every nsqd, failed), with Go's message: a mistyped address should not leave nsq_stat
waiting. After that, a failure is reported beside the answers, never fatal; while every
lookupd fails, the nsqds they last named are still polled.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from nsqtools.cluster import Cluster, NodeStats, find_nsqds_plan, poll_stats_plan
from nsqtools.errors import NsqError
from nsqtools.httpapi.plans import Plan
from nsqtools.stats.tracking import Failure, Report


class NothingReached(NsqError):
    """The first poll reached no lookupd, or no nsqd, at all."""


@dataclass(frozen=True)
class Poll:
    nodes: list[NodeStats]
    lookupd_failures: list[Failure]
    asked_at: float  # when the nsqds were asked, monotonic seconds
    wall_time: float  # the same instant, unix seconds


class NeverFound(NsqError):
    """With a count: the topic or channel was missing for as many polls in a row as the
    whole run takes."""


class RowCount:
    """--count: the polls that printed rows, counted; True from counted() once there
    were `count` of them. The run gives up (NeverFound) when count + 1 polls in a row,
    as many as a run that finds it at once takes, found no topic or channel: a cron line
    with a typo then ends, with exit 1, in the time the run was meant to take."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.shown = 0
        self.missing: list[Report] = []  # the polls in a row that found nothing

    def counted(self, report: Report) -> bool:
        """Whether the run is over once `report` is shown."""
        if any(row.rates is not None for row in report.rows):
            self.shown += 1
        self.missing = [] if report.found else [*self.missing, report]
        if len(self.missing) > self.count:
            raise NeverFound(self._never_found())
        return self.shown >= self.count

    def _never_found(self) -> str:
        first, last = self.missing[0], self.missing[-1]
        what = f"topic({last.topic})"
        if last.channel is not None:  # Go's words
            what = f"channel({last.channel}) in stats metadata for topic({last.topic})"
        polls, seconds = len(self.missing), last.wall_time - first.wall_time
        return f"failed to find {what}: missing from {polls} polls in a row, over {seconds:.1f}s"


def beats(
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[int]:
    """0, 1, 2... at start + k * interval on `clock`, `sleep` waiting in between until
    the next is asked for: none after the last one taken."""
    start = clock()
    polls = 0
    while True:
        yield polls
        polls += 1
        beats_gone = math.floor((clock() - start) / interval)
        sleep(max(0.0, start + (beats_gone + 1) * interval - clock()))


class Poller:
    """Polls one topic (and maybe one channel of it) across the cluster; every topic of
    every nsqd the lookupds know when the topic is "" (--format=prometheus)."""

    def __init__(self, cluster: Cluster, topic: str, channel: str | None) -> None:
        self.cluster = cluster
        self.topic = topic
        self.channel = channel or ""
        self._known: list[str] = []  # the nsqds the lookupds named last
        self._polls = 0

    def poll(self) -> Plan[Poll]:
        """The next poll, as a plan: the nsqds to ask, then their /stats."""
        addresses, lookupd_errors = yield from find_nsqds_plan(self.cluster, self.topic or None)
        lookupds = self.cluster.lookupd_http_addresses
        every_lookupd_failed = bool(lookupds) and len(lookupd_errors) == len(lookupds)
        if every_lookupd_failed and self._polls == 0:
            raise NothingReached(_go_message("topic producers", "nsqlookupd", lookupd_errors))
        if every_lookupd_failed:
            addresses = self._known
        self._known = addresses
        asked_at, wall_time = time.monotonic(), time.time()
        nodes = yield from poll_stats_plan(addresses, self.topic, self.channel)
        errors = [node.error for node in nodes if node.error is not None]
        if self._polls == 0 and nodes and len(errors) == len(nodes):
            step = "nsqd stats" if lookupds else "topic producers"
            raise NothingReached(_go_message(step, "nsqd", errors))
        self._polls += 1
        failures = [Failure(error.server, error.address, error.reason) for error in lookupd_errors]
        return Poll(nodes, failures, asked_at, wall_time)


def _go_message(step: str, server: str, errors: Sequence[NsqError]) -> str:
    """Go's fatal line for a first poll that reached nothing, our reasons after it."""
    reasons = "; ".join(str(error) for error in errors)
    return f"failed to get {step} - failed to query any {server}: {reasons}"
