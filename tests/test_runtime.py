"""The runtime against a real nsqd: sinks that fail, hold, are slow or never settle, a
signal during a flush, and the -n budget across topics.

A message is FIN'd only when its sink settles it done; nsqd's channel stats (depth and
in flight) are the proof of what became of each message.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.protocol import Message
from nsqtools.relays.nsq import Relay
from nsqtools.runtime.consuming import ConsumeSettings, RunCounters, next_beat, run_consumers
from nsqtools.runtime.deadletters import DeadLetterSettings, GivenUp
from nsqtools.runtime.sinks import Delivery, Sink, SinkFailed
from nsqtools.testing import Nsqd, not_in_nsqd, wait_until
from tests.conftest import DURABLE, LocalNsq

TOPIC = "runtime"
CHANNEL = "tests"


def settings(nsqd: Nsqd, topics: list[str] | None = None, **changes: Any) -> ConsumeSettings:
    config = ClientConfig(max_in_flight=50, backoff_multiplier=0.01, default_requeue_delay=0.05)
    return dataclasses.replace(
        ConsumeSettings(
            topics=topics or [TOPIC],
            channel=CHANNEL,
            config=config,
            nsqd_tcp_addresses=[nsqd.tcp_address],
        ),
        **changes,
    )


def bodies(count: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}-{index}".encode() for index in range(count)]


def channel_counts(nsqd: Nsqd, topic: str = TOPIC) -> tuple[int, int]:
    """(depth, in flight) of the test channel; (-1, -1) until it exists."""
    try:
        stats = nsqd.channel_stats(topic, CHANNEL)
    except KeyError:
        return -1, -1
    return stats.depth, stats.in_flight_count


async def all_back(nsqd: Nsqd, count: int) -> None:
    """Wait until the channel holds `count` messages and none is in flight: nsqd takes
    the REQs and the closed connection's messages back as it reads them, after the run
    has ended. Well before its message timeout (a minute): not the timeout's doing."""
    await trio.to_thread.run_sync(
        wait_until, lambda: channel_counts(nsqd) == (count, 0), 10, f"{count} requeued"
    )


class Recorder:
    """A sink that outputs into a list: settles done at once, or holds deliveries until
    flushed; can fail the first deliveries it is given, or stop the run once it has
    seen enough."""

    def __init__(
        self,
        *,
        hold: bool = False,
        fail_first: int = 0,
        tick_interval: float | None = None,
        enough: int | None = None,
    ) -> None:
        self.hold = hold
        self.fail_first = fail_first
        self.tick_interval = tick_interval
        self.enough = enough
        self.done: list[bytes] = []  # bodies settled done, in order
        self.held: list[Delivery] = []
        self.flushes = 0
        self.seen = 0
        self.enough_seen = trio.Event()

    async def accept(self, delivery: Delivery) -> None:
        self.seen += delivery.count
        if self.enough is not None and self.seen >= self.enough:
            self.enough_seen.set()
        if self.fail_first > 0:
            self.fail_first -= 1
            raise OSError("No space left on device")
        self.held.append(delivery)
        if not self.hold:
            await self.flush()

    async def flush(self) -> None:
        self.flushes += 1
        held, self.held = self.held, []
        for delivery in held:
            self.done.extend(delivery.bodies)
            delivery.done()

    tick = flush


async def run_until(sink: Sink, consume: ConsumeSettings, enough: trio.Event) -> RunCounters:
    """Run the consumers into the sink until `enough` is set, then stop as a signal would."""
    async with trio.open_nursery() as nursery:
        summary: list[RunCounters] = []

        async def run() -> None:
            summary.append(await run_consumers(consume, lambda topic: sink))

        nursery.start_soon(run)
        with trio.fail_after(20):
            await enough.wait()
        signal.raise_signal(signal.SIGINT)
    return summary[0]


async def test_a_sink_that_fails_gets_the_messages_again(nsqd: Nsqd) -> None:
    published = bodies(100)
    nsqd.publish_many(TOPIC, published)
    sink = Recorder(fail_first=2)
    summary = await run_consumers(settings(nsqd, total=100), lambda topic: sink)
    assert sorted(sink.done) == sorted(published)
    assert summary.failed > 0  # requeued, then delivered again
    await trio.to_thread.run_sync(
        wait_until, lambda: channel_counts(nsqd) == (0, 0), 10, "every message FIN'd"
    )


async def test_held_messages_are_fin_d_only_when_flushed(nsqd: Nsqd) -> None:
    """A sink that holds what it accepts (a file before its sync): nothing is FIN'd
    until it flushes, which the runtime asks for when the consumer is starved."""
    nsqd.publish_many(TOPIC, bodies(100))
    sink = Recorder(hold=True)
    config = ClientConfig(max_in_flight=100)
    summary = await run_consumers(settings(nsqd, total=100, config=config), lambda topic: sink)
    assert summary.delivered == 100
    assert len(sink.done) == 100
    assert sink.flushes >= 1


async def test_a_sink_flushes_on_its_timer(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies(10))
    sink = Recorder(hold=True, tick_interval=0.05, enough=10)
    config = ClientConfig(max_in_flight=1000)  # never starved: only the timer flushes
    consume = settings(nsqd, config=config)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_consumers, consume, lambda topic: sink)
        # Both: a channel just made is empty until the topic hands it the messages.
        await trio.to_thread.run_sync(
            wait_until,
            lambda: len(sink.done) == 10 and channel_counts(nsqd) == (0, 0),
            10,
            "the timer's flush",
        )
        signal.raise_signal(signal.SIGINT)


async def test_what_no_sink_settled_is_requeued_at_the_end(nsqd: Nsqd) -> None:
    """A sink that never settles (its output never became durable): the stop requeues
    every message at once, none is FIN'd, none waits for msg_timeout."""

    class NeverSettles(Recorder):
        async def flush(self) -> None:
            self.flushes += 1

    nsqd.publish_many(TOPIC, bodies(30))
    sink = NeverSettles(hold=True, enough=30)
    summary = await run_until(sink, settings(nsqd), sink.enough_seen)
    assert summary.delivered == 30
    await all_back(nsqd, 30)


async def test_a_signal_during_a_blocked_flush_stops_within_the_grace(nsqd: Nsqd) -> None:
    """The first SIGINT while a sink's flush hangs (a full pipe, a stuck disk): the run
    ends after the stop grace, and what the sink held goes back to nsqd."""
    flushing = trio.Event()

    class StuckFlush(Recorder):
        async def flush(self) -> None:
            flushing.set()
            await trio.sleep_forever()

    nsqd.publish_many(TOPIC, bodies(20))
    sink = StuckFlush(hold=True)
    config = ClientConfig(max_in_flight=20)  # starved after one batch: a flush
    with trio.fail_after(10):
        await run_until(sink, settings(nsqd, config=config), flushing)
    await all_back(nsqd, 20)


async def test_the_budget_counts_across_topics(nsqd: Nsqd) -> None:
    for topic in ("a", "b"):
        nsqd.publish_many(topic, bodies(50, topic))
    sink = Recorder()
    summary = await run_consumers(settings(nsqd, topics=["a", "b"], total=60), lambda t: sink)
    assert summary.delivered == len(sink.done) == 60

    def the_rest_back() -> bool:  # requeued at once
        counts = [channel_counts(nsqd, topic) for topic in ("a", "b")]
        return sum(depth for depth, _ in counts) == 40 and all(n == 0 for _, n in counts)

    await trio.to_thread.run_sync(wait_until, the_rest_back, 10, "the rest requeued")


@pytest.mark.slow
async def test_a_relay_fins_only_what_its_destination_took(
    nsqd: Nsqd, durable_nsq: LocalNsq
) -> None:
    """Consume from one nsqd, publish to another with many publishes in flight, kill
    the destination mid-stream and start it again: every source message is FIN'd (the
    source channel drains) and every one is at the destination at least once."""
    count = 20_000
    published = bodies(count)
    nsqd.publish_many(TOPIC, published)
    destination = durable_nsq.nsqd("destination", extra_args=DURABLE)
    consume = settings(nsqd, config=ClientConfig(max_in_flight=500))

    def reached(mark: int) -> bool:
        try:
            return destination.topic_depth("relayed") >= mark
        except KeyError:
            return False

    relay = Relay([destination.tcp_address], "relayed")
    async with relay, trio.open_nursery() as nursery:
        nursery.start_soon(run_consumers, consume, relay.sink)
        await trio.to_thread.run_sync(wait_until, lambda: reached(5000), 60, "5000 relayed")
        # On this thread: nsqd dies with the thread that started it.
        destination.kill()
        destination.start()
        await trio.to_thread.run_sync(
            wait_until, lambda: channel_counts(nsqd) == (0, 0), 120, "the source drained"
        )
        signal.raise_signal(signal.SIGINT)
    assert await not_in_nsqd(destination, "relayed", set(published)) == set()


async def test_a_topic_that_appears_while_running_is_consumed(nsqd: Nsqd) -> None:
    nsqd.publish_many("first", [b"one"])
    sink = Recorder(enough=2)

    async def find_topics() -> list[str]:
        stats = await trio.to_thread.run_sync(nsqd.stats)
        return [topic.topic_name for topic in stats.topics]

    consume = settings(nsqd, topics=["first"], topic_refresh=0.05)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_consumers, consume, lambda topic: sink, find_topics)
        await trio.to_thread.run_sync(wait_until, lambda: sink.done == [b"one"], 10, "one")
        nsqd.publish_many("appeared", [b"two"])
        with trio.fail_after(10):
            await sink.enough_seen.wait()
        signal.raise_signal(signal.SIGINT)
    assert sink.done == [b"one", b"two"]


async def test_sighup_goes_to_who_wants_it_and_counters_are_live(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies(10))
    sink = Recorder(enough=10)
    hangups: list[int] = []
    counters = RunCounters()
    consume = settings(nsqd)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                run_consumers,
                consume,
                lambda topic: sink,
                on_hangup=lambda: hangups.append(1),
                counters=counters,
            )
        )
        with trio.fail_after(10):
            await sink.enough_seen.wait()
        assert counters.delivered == 10  # while the run goes on
        signal.raise_signal(signal.SIGHUP)
        with trio.fail_after(10):
            while not hangups:
                await trio.sleep(0.01)
        signal.raise_signal(signal.SIGINT)
    assert hangups == [1]


class Breaking(Recorder):
    """A sink that holds deliveries and breaks at its first flush (a failed fsync)."""

    async def flush(self) -> None:
        raise SinkFailed("/archive/x.log: no space left on device")


async def test_a_sink_that_breaks_ends_the_run_and_nothing_is_lost(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies(100))
    sink = Breaking(hold=True)
    config = ClientConfig(max_in_flight=40)
    with trio.fail_after(20), pytest.raises(SinkFailed, match="no space left"):
        await run_consumers(settings(nsqd, config=config), lambda topic: sink)
    assert sink.done == []
    # Every message back in the channel: nothing FIN'd that the sink did not settle.
    await all_back(nsqd, 100)


async def test_topics_are_found_at_once_not_after_a_refresh(nsqd: Nsqd) -> None:
    nsqd.publish_many("found", [b"at once"])
    sink = Recorder(enough=1)

    async def find_topics() -> list[str]:
        return ["found"]

    consume = settings(nsqd, topics=[], topic_refresh=3600)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_consumers, consume, lambda topic: sink, find_topics)
        with trio.fail_after(10):
            await sink.enough_seen.wait()
        signal.raise_signal(signal.SIGINT)
    assert sink.done == [b"at once"]


async def test_a_sink_settles_each_message_its_own_way(nsqd: Nsqd, tmp_path: Path) -> None:
    """One delivery, three fates: done (FIN), requeued (REQ, counted, with backoff) and
    refused (a dead letter, then FIN); the runtime alone answers nsqd, and the run ends
    with GivenUp counting the refused."""
    nsqd.publish_many(TOPIC, bodies(30))
    dead = tmp_path / "dead.jsonl"

    class Sorting(Recorder):
        async def accept(self, delivery: Delivery) -> None:
            fates: dict[int, list[Message]] = {0: [], 1: [], 2: []}
            for message in delivery.messages:
                fates[int(message.body.split(b"-")[1]) % 3].append(message)
            delivery.requeue(fates[1], delay=60)  # back in a minute: not in this test
            delivery.refuse(fates[2], "too big for the destination")
            delivery.done()  # the rest
            self.done.extend(message.body for message in fates[0])

    sink = Sorting()
    consume = settings(nsqd, dead_letters=DeadLetterSettings(file=dead))
    counters = RunCounters()
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            with pytest.raises(GivenUp, match=r"^10 messages were refused by the destination; "):
                await run_consumers(consume, lambda topic: sink, counters=counters)

        nursery.start_soon(run)
        await trio.to_thread.run_sync(
            wait_until,
            lambda: deferred_and_in_flight(nsqd) == (0, 0, 10),
            10,
            "every message settled",
        )
        signal.raise_signal(signal.SIGINT)
    assert sorted(sink.done) == sorted(b"m-%d" % index for index in range(0, 30, 3))
    assert counters.failed == 10
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert sorted(letter["body"] for letter in letters) == sorted(f"m-{i}" for i in range(2, 30, 3))
    assert {letter["reason"] for letter in letters} == {"too big for the destination"}
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert stats.requeue_count == 10  # the refused ones were FIN'd, not requeued


def deferred_and_in_flight(nsqd: Nsqd) -> tuple[int, int, int]:
    """(depth, in flight, deferred) of the test channel; (-1, -1, -1) until it exists
    (nsqd's /stats leaves out a topic whose asked channel has no subscriber yet)."""
    try:
        stats = nsqd.channel_stats(TOPIC, CHANNEL)
    except KeyError:
        return -1, -1, -1
    return stats.depth, stats.in_flight_count, stats.deferred_count


def test_sink_ticks_keep_a_fixed_beat_as_gos_ticker() -> None:
    """A tick that takes time does not push the next one back (a sleep after each did:
    nsq_to_file then rotated on an idle --rotate-interval a tick sooner than Go's, an
    empty file more each time); the beats a slow tick overran are skipped."""
    assert next_beat(10.0, 0.5, now=10.3) == 10.5
    assert next_beat(10.5, 0.5, now=10.5) == 11.0
    assert next_beat(10.0, 0.5, now=11.2) == 11.5  # 10.5 and 11.0 overrun: skipped
