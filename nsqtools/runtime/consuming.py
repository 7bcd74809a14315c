"""Consumers for several topics, each feeding its own sink, until stopped.

run_consumers() opens a consumer per topic (and for topics that appear later, when given
a way to find them), all taking from one -n Budget (a consumer requeues at once what it
receives past it). It hands each batch to the topic's sink as a Delivery, and flushes
the sink when the consumer is starved (nsqd sends nothing more until messages are
answered); it ticks it every sink.tick_interval, or twice per msg_timeout
when that is shorter, and TOUCHes what the sink holds unsettled three times per
msg_timeout, so that nsqd does not send it again meanwhile (until nsqd's max_msg_timeout,
past which no TOUCH holds a message: a warning says so). It alone answers nsqd for the
sinks: what a sink settles done is FIN'd, requeued is REQ'd (with backoff), refused is
kept as a dead letter then FIN'd (with a dead-letter destination; else requeued with
backoff); messages past max_attempts go to the dead letters too (runtime.deadletters),
and the run then ends with GivenUp (exit status 1). The first SIGINT/SIGTERM, the budget
spent or a sink closed for good stops every consumer, at once while it is still
connecting: sinks get a last flush, and what no sink settled is requeued by the
consumers' clean stop. A sink's passing failure (an OSError) requeues the delivery with
backoff and the run goes on; a SinkFailed stops every consumer the same way, then ends
the run with it.

With exit_at_end, the run stops the same way once every consumer is at the end
(Consumer.at_end: each nsqd there is has been ready for more and sent nothing for
END_QUIET, with a heartbeat meanwhile: END_HEARTBEAT is asked of nsqd), and only once
the topics to consume were found; if an nsqd there is to read cannot be reached, it
stops too and ends with Unreachable.

RunCounters keeps what the run did, and each topic's TopicProgress what it holds now:
for status lines and the metrics (runtime.metrics), read when scraped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace

import trio

from nsqtools import durations, formats
from nsqtools.config import ClientConfig
from nsqtools.consumer import Budget, Consumer, ConsumerOptions, ReceivedBatch, open_consumer
from nsqtools.errors import NsqError
from nsqtools.protocol import Message
from nsqtools.protocol.youzan import StartPosition
from nsqtools.runtime.deadletters import (
    PAST_MAX_ATTEMPTS,
    REFUSED,
    DeadLetters,
    DeadLetterSettings,
    GivenUp,
    Letters,
)
from nsqtools.runtime.signals import watch_signals
from nsqtools.runtime.sinks import Delivery, Sink, SinkClosed, SinkFailed

log = logging.getLogger("nsqtools.runtime")

# Where topics that appear later come from: the names that exist now (for example
# lookupd's topics that match a pattern).
TopicFinder = Callable[[], Awaitable[Sequence[str]]]

# After the first SIGINT/SIGTERM, how long a sink may still take to output what it holds
# before it is abandoned and its messages requeued. Long enough for an output that is
# merely slow; short enough that `nsq_tail | sleep 30` stops when asked, before a user
# reaches for the second signal.
STOP_GRACE = 1.5
# nsqd's msg_timeout when no nsqd is connected to say its own.
DEFAULT_MSG_TIMEOUT = 60.0
# exit_at_end: how long every connection must have been ready for more and sent nothing
# (nsqd pushes what a channel holds, from memory or disk, as soon as there is room), and
# how often the run looks.
END_QUIET = 1.0
# exit_at_end: the heartbeat_interval asked of nsqd (its shortest): a connection is at the
# end only once a heartbeat came since it had room (Link.found_empty), so the end is
# known about a second after it comes, and a stalled nsqd is never taken for an empty one.
END_HEARTBEAT = 1.0
END_LOOK_EVERY = 0.1


class Unreachable(NsqError):
    """exit_at_end: an nsqd that has the topic could not be reached, so what it holds
    was not read; the run stopped as at the end, and fails."""


@dataclass
class ConsumeSettings:
    """What to consume: topics on one channel, from nsqds or through lookupds."""

    topics: list[str]
    channel: str
    config: ClientConfig
    nsqd_tcp_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    total: int = 0  # -n across all topics (0: no limit)
    topic_refresh: float = 60.0  # seconds between looks for new topics (with a finder)
    partition: int | None = None  # the Youzan fork's: only this partition
    start_at: StartPosition | None = None  # the Youzan fork's: where the channel starts
    dead_letters: DeadLetterSettings = field(default_factory=DeadLetterSettings)
    exit_at_end: bool = False  # stop once nsqd has nothing more for any consumer


@dataclass
class RunCounters:
    """What a run has done so far (for status lines), and how it ended."""

    sink_closed: bool = False  # a sink's output went away (a closed pipe)
    delivered: int = 0  # messages handed to sinks (again, after a failure)
    failed: int = 0  # messages whose sink failed them (requeued)
    given_up: Counter[str] = field(default_factory=Counter)  # kept as dead letters, by why
    topics: dict[str, TopicProgress] = field(default_factory=dict)  # those consumed so far


@dataclass(slots=True)
class _Held:
    """A delivery its sink has not settled yet, since when (trio time), and whether it
    is still TOUCHed."""

    delivery: Delivery
    since: float
    touched: bool = True


class TopicProgress:
    """One topic's consumer and the deliveries its sink has not settled yet, oldest
    first (handed over, or being handed over: accept() may wait): what the metrics read
    when scraped, and what is TOUCHed."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.unsettled: deque[_Held] = deque()
        self.output = 0  # messages the sink settled done (written, or acknowledged)

    def oldest_unsettled_age(self, now: float) -> float:
        """Seconds since the oldest delivery not settled yet was handed over (0: none)."""
        for held in self.unsettled:
            if not held.delivery.settled:
                return now - held.since
        return 0.0


async def _touch_unsettled(consumer: Consumer, unsettled: deque[_Held]) -> None:
    """TOUCH what sinks hold unsettled, three times per msg_timeout: a relay whose
    destination is down holds deliveries while it redials, an endpoint may be slow to
    answer (nsq_to_http), and nsqd would otherwise take them back and send them again (a
    duplicate each, once the destination answers). Up to nsqd's max_msg_timeout (15 min
    by default), which no TOUCH extends: the TOUCHes of a delivery stop one round before
    it (a later one could reach nsqd after it took the messages back), with a warning."""
    while True:
        msg_timeout = consumer.msg_timeout or DEFAULT_MSG_TIMEOUT
        await trio.sleep(msg_timeout / 3)
        limit = consumer.max_msg_timeout or math.inf
        # Received then or before: nsqd's max_msg_timeout passes before the next round.
        last_round = trio.current_time() - limit + msg_timeout / 3
        for held in unsettled:
            if not held.touched or held.delivery.settled:
                continue
            if held.since <= last_round:
                held.touched = False
                _warn_held_too_long(held.delivery, limit)
            else:
                held.delivery.touch()


def _warn_held_too_long(delivery: Delivery, max_msg_timeout: float) -> None:
    log.warning(
        "%s: %d messages held unsettled for nsqd's max_msg_timeout (%s): no more TOUCH, "
        "nsqd will time them out and deliver them again",
        delivery.topic,
        delivery.count,
        durations.format_duration(max_msg_timeout),
    )


def next_beat(beat: float, delay: float, now: float) -> float:
    """The first beat after `beat`, `delay` apart, that is not past `now`."""
    beat += delay
    if beat < now:
        beat += math.ceil((now - beat) / delay) * delay
    return beat


def tick_delay(tick_interval: float | None, msg_timeout: float | None) -> float:
    """The time to a sink's next tick: its own interval, but no more than half the
    msg_timeout nsqd granted (unknown while no nsqd is connected)."""
    assert tick_interval is not None  # only sinks with a tick are ticked
    if msg_timeout is None:
        return tick_interval
    return min(tick_interval, msg_timeout / 2)


async def run_consumers(
    settings: ConsumeSettings,
    sink_for: Callable[[str], Sink],
    find_topics: TopicFinder | None = None,
    *,
    on_hangup: Callable[[], None] | None = None,
    counters: RunCounters | None = None,
) -> RunCounters:
    """Consume every topic into the sink sink_for(topic) gives, until stopped.

    With find_topics, the topics it returns (at once, then every settings.topic_refresh)
    are consumed too as they appear: topics created while the run goes on. on_hangup, if
    given, is called on each SIGHUP (else SIGHUP keeps its default: the process ends, as
    Go's tools do). counters, if given, is kept up to date as the run goes (status lines).
    Raises SinkFailed, once every consumer has stopped, if a sink (or the dead letters)
    failed; else Unreachable if an nsqd could not be read to the end; else GivenUp if
    messages were given up.
    """
    run = _ConsumingRun(settings, sink_for, find_topics, counters or RunCounters())
    await run.run(on_hangup)
    if run.failure is not None:
        raise run.failure
    if run.unreachable is not None:
        raise run.unreachable
    if run.counters.given_up:
        raise GivenUp(run.counters.given_up, settings.dead_letters.where())
    return run.counters


class _ConsumingRun:
    """One run_consumers(): its consumers, their sinks, the budget, the dead letters and
    how it stops."""

    def __init__(
        self,
        settings: ConsumeSettings,
        sink_for: Callable[[str], Sink],
        find_topics: TopicFinder | None,
        counters: RunCounters,
    ) -> None:
        self.settings = settings
        self.sink_for = sink_for
        self.find_topics = find_topics
        # -n: the one budget every consumer takes from, and sinks' failures give back to.
        self.budget = Budget(settings.total) if settings.total else None
        self.consumer_options = ConsumerOptions(
            nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
            lookupd_http_addresses=settings.lookupd_http_addresses,
            budget=self.budget,
            partition=settings.partition,
            start_at=settings.start_at,
        )
        self.counters = counters
        self.consumers: dict[str, Consumer] = {}
        self.stopped = trio.Event()
        self.drains: list[trio.CancelScope] = []  # a stop gives each a grace, then cancels
        # What a stop cancels at once: consumers still connecting, the search for topics.
        self.cancelled_by_stop: set[trio.CancelScope] = set()
        self.failure: SinkFailed | None = None  # the first sink that failed, which ends the run
        self.unreachable: Unreachable | None = None  # exit_at_end: an nsqd not read to the end
        self.topics_found = trio.Event()  # consumers started for every topic found at first
        self.dead_letters = DeadLetters(
            settings.dead_letters, settings.config, counters.given_up, self._fail
        )

    async def run(self, on_hangup: Callable[[], None] | None) -> None:
        async with self.dead_letters, trio.open_nursery() as nursery:
            # Started first: a stop that came while the program started stops it here,
            # before any consumer subscribes.
            await nursery.start(
                functools.partial(watch_signals, self._stop_on_signal, hangup=on_hangup)
            )
            if self.settings.exit_at_end:
                nursery.start_soon(self._stop_at_end)
            async with trio.open_nursery() as topics:
                for topic in self.settings.topics:
                    if self.stopped.is_set():
                        break
                    # One at a time: a refused address or a TLS failure raises here.
                    await topics.start(self._consume, topic)
                if self.find_topics is not None:
                    topics.start_soon(self._follow_new_topics, topics, self.find_topics)
                else:
                    self.topics_found.set()
            nursery.cancel_scope.cancel()

    async def _stop_at_end(self) -> None:
        """Stop once every consumer is at the end (a topic with none: at once), or as
        soon as an nsqd there is to read cannot be reached."""
        await self.topics_found.wait()
        while True:
            consumers = list(self.consumers.values())
            unreachable = [reason for consumer in consumers for reason in consumer.unreachable]
            if unreachable:
                self._end_unread(f"{unreachable[0]} (what it holds was not read)")
                return
            if all([consumer.at_end(END_QUIET) for consumer in consumers]):  # each looked at
                log.info("at the end: nsqd has nothing more for the channel; stopping")
                self.stop()
                return
            await trio.sleep(END_LOOK_EVERY)

    async def _consume(self, topic: str, *, task_status: trio.TaskStatus[None]) -> None:
        """Consume the topic until stopped. A stop while it connects ends the connecting at
        once; a connection made by then closes cleanly (CLS, and REQ of what it was sent),
        as all do at the end. The consumer closes outside the drain's scope, which a stop
        may cancel: its connections are still alive then to requeue what no sink
        settled."""
        starting = trio.CancelScope()
        with self._registered_for_stop(starting):
            async with self._open(topic, starting) as consumer:
                self.consumers[topic] = consumer
                progress = self.counters.topics[topic] = TopicProgress(consumer)
                if self.stopped.is_set():
                    consumer.stop()
                task_status.started()
                with trio.CancelScope() as drain:
                    self.drains.append(drain)
                    await self._drain(progress, self.sink_for(topic))
                    await self.dead_letters.wait_all_kept()  # FIN'd while connected

    @contextlib.contextmanager
    def _cancelled_by_stop(self) -> Iterator[trio.CancelScope]:
        with trio.CancelScope() as scope, self._registered_for_stop(scope):
            yield scope

    @contextlib.contextmanager
    def _registered_for_stop(self, scope: trio.CancelScope) -> Iterator[trio.CancelScope]:
        """The scope is cancelled by a stop, while in the block (at once if stopped)."""
        self.cancelled_by_stop.add(scope)
        if self.stopped.is_set():
            scope.cancel()
        try:
            yield scope
        finally:
            self.cancelled_by_stop.discard(scope)

    async def _follow_new_topics(self, topics: trio.Nursery, find_topics: TopicFinder) -> None:
        with self._cancelled_by_stop():
            while True:
                try:
                    found = await find_topics()
                except (OSError, NsqError) as error:
                    log.warning("looking for new topics: %s", error)
                    if self.settings.exit_at_end and not self.topics_found.is_set():
                        self._end_unread(f"{error}: which topics to read is unknown")
                else:
                    for topic in found:
                        if topic not in self.consumers:
                            log.info("new topic %s: consuming it", topic)
                            await topics.start(self._consume, topic)
                    self.topics_found.set()
                await trio.sleep(self.settings.topic_refresh)

    def _open(
        self, topic: str, starting: trio.CancelScope
    ) -> AbstractAsyncContextManager[Consumer]:
        give_up = functools.partial(self._give_up, topic)
        options = replace(self.consumer_options, give_up=give_up)
        config = self.settings.config
        if self.settings.exit_at_end:
            config = replace(config, heartbeat_interval=END_HEARTBEAT)
        return open_consumer(topic, self.settings.channel, config, options, starting)

    def _give_up(self, topic: str, exhausted: ReceivedBatch) -> None:
        """The consumer's give-up hook: messages past max_attempts become dead letters."""
        origin = formats.Origin(topic, self.settings.channel, exhausted.nsqd_address)
        reason = f"past max_attempts ({self.settings.config.max_attempts})"
        letters = Letters(origin, exhausted, exhausted.messages, reason, PAST_MAX_ATTEMPTS)
        self.dead_letters.keep(letters)

    async def _drain(self, progress: TopicProgress, sink: Sink) -> None:
        consumer = progress.consumer
        async with trio.open_nursery() as nursery:
            if sink.tick_interval is not None:
                nursery.start_soon(self._tick_every, sink, consumer)
            nursery.start_soon(_touch_unsettled, consumer, progress.unsettled)
            await self._deliver_all(progress, sink)
            await self._flush(sink)
            nursery.cancel_scope.cancel()

    async def _tick_every(self, sink: Sink, consumer: Consumer) -> None:
        """Every sink.tick_interval, and at least twice per msg_timeout: a sink that holds
        messages until its tick (a file, until its sync) settles them before nsqd takes
        them back and sends them again (a duplicate for each).

        On a fixed beat, as Go's time.Ticker: a sleep after each tick would drift by the
        tick's own time, and nsq_to_file, whose --rotate-interval is measured from the
        tick that opened the file, would rotate a tick sooner than Go's (an empty file
        more per idle interval). The beats a slow tick overran are skipped."""
        beat = trio.current_time()
        while True:
            delay = tick_delay(sink.tick_interval, consumer.msg_timeout)
            beat = next_beat(beat, delay, trio.current_time())
            await trio.sleep_until(beat)
            await self._flush(sink, sink.tick)

    async def _flush(self, sink: Sink, flush: Callable[[], Awaitable[None]] | None = None) -> None:
        try:
            await (flush or sink.flush)()
        except SinkFailed as error:
            self._fail(error)

    def _fail(self, error: SinkFailed) -> None:
        if self.failure is None:
            self.failure = error
        self.stop()

    async def _deliver_all(self, progress: TopicProgress, sink: Sink) -> None:
        consumer = progress.consumer
        # Deliveries the sink has not settled yet, oldest first: while there are none (a
        # sink that settles at once), a starved consumer has nothing to flush for. Each
        # goes in before accept(), which may wait: unsettled meanwhile, TOUCHed too.
        unsettled = progress.unsettled
        async for batch in consumer:  # within the budget: the consumer took them from it
            delivery = Delivery(consumer.topic, batch, _Settler(self, progress, batch))
            self.counters.delivered += delivery.count
            unsettled.append(_Held(delivery, trio.current_time()))
            try:
                await sink.accept(delivery)
            except SinkClosed:
                delivery.requeue(delay=0, backoff=False)
                self.counters.sink_closed = True
                self.stop()
                return
            except SinkFailed as error:
                delivery.requeue(delay=0, backoff=False)
                self._fail(error)
                return
            except (OSError, NsqError) as error:
                log.warning("%s: %d messages requeued: %s", consumer.topic, delivery.count, error)
                delivery.requeue()
            while unsettled and unsettled[0].delivery.settled:
                unsettled.popleft()
            if self.budget is not None and self.budget.spent:
                self.stop()
            elif unsettled and consumer.is_starved():
                await self._flush(sink)

    def _end_unread(self, why: str) -> None:
        """exit_at_end: stop, and end with Unreachable; something there was not read."""
        self.unreachable = self.unreachable or Unreachable(why)
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        for consumer in self.consumers.values():
            consumer.stop()
        for scope in self.cancelled_by_stop:
            scope.cancel()

    def _stop_on_signal(self) -> None:
        self.stop()
        for drain in self.drains:
            drain.deadline = trio.current_time() + STOP_GRACE


class _Settler:
    """What the runtime makes of one delivery (one consumer's batch) as its sink settles
    it: FIN, REQ (with the counts and -n that go with it), or a dead letter then FIN."""

    def __init__(self, run: _ConsumingRun, progress: TopicProgress, batch: ReceivedBatch) -> None:
        self.run = run
        self.progress = progress
        self.consumer = progress.consumer
        self.batch = batch

    def finish(self, delivery: Delivery, messages: list[Message] | None) -> None:
        self.batch.finish(messages)
        self.progress.output += delivery.count if messages is None else len(messages)

    def requeue(
        self,
        delivery: Delivery,
        messages: list[Message] | None,
        delay: float | None,
        backoff: bool,
    ) -> None:
        self.batch.requeue(messages, delay=delay, backoff=backoff)
        count = delivery.count if messages is None else len(messages)
        self.run.counters.failed += count
        self.consumer.give_back(count)  # not part of -n: that many more may be output

    def refuse(self, delivery: Delivery, messages: list[Message], reason: str) -> None:
        run = self.run
        if not run.settings.dead_letters.kept:
            log.warning("%s: %d messages requeued: %s", delivery.topic, len(messages), reason)
            self.requeue(delivery, messages, None, True)
            return
        self.consumer.give_back(len(messages))  # not output: not part of -n
        origin = formats.Origin(delivery.topic, run.settings.channel, delivery.nsqd_address)
        run.dead_letters.keep(Letters(origin, self.batch, messages, reason, REFUSED))

    def touch(self, delivery: Delivery) -> None:
        self.batch.touch()
