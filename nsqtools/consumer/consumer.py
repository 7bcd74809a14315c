"""The Consumer: one topic/channel from many nsqds, handed out in batches, losing
nothing; and open_consumer(), which runs one for the body of a block.

Owns what the application sees: the queue of ReceivedBatches (the messages one
connection delivered in one read), RDY flow control and backoff (policy in flow.py),
the -n Budget, handing messages past max_attempts to a give-up hook, and the clean
stop. Its connections are Connections' (connections.py), each a Link (link.py).

Messages past max_attempts (when set) are not handed out: they go to the give-up hook
as a batch of their own, which answers it (by default: a warning with each message in
full, then FIN). Nothing is lost on stop: messages the application never took and
messages it left unanswered are requeued at once (REQ 0), because nsqd would otherwise
hold them until msg_timeout. With a budget, at most that many messages are handed out
(by every consumer sharing it); any received beyond it are requeued at once, and while
more are wanted every connection keeps some RDY, so the last ones come from whichever
nsqd has them.

No printing and no click here: errors are NsqError subclasses with one-line messages.
"""

from __future__ import annotations

import json
import logging
import random
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Self

import trio

from nsqtools import flow, formats
from nsqtools.config import ClientConfig
from nsqtools.consumer.batch import ReceivedBatch
from nsqtools.consumer.connections import Connections
from nsqtools.consumer.link import Link, LinkHooks
from nsqtools.consumer.options import ConsumerOptions
from nsqtools.errors import single_errors
from nsqtools.protocol import Message, MessageBatch, check_channel, check_topic
from nsqtools.protocol import commands as cmd

log = logging.getLogger("nsqtools.consumer")


class Consumer:
    """Subscribes one topic/channel; iterate it for ReceivedBatches. Made by
    open_consumer()."""

    def __init__(
        self,
        topic: str,
        channel: str,
        config: ClientConfig,
        options: ConsumerOptions,
        rng: random.Random | None = None,
    ) -> None:
        if bool(options.nsqd_tcp_addresses) == bool(options.lookupd_http_addresses):
            raise ValueError("give nsqd TCP addresses or nsqlookupd HTTP addresses, not both")
        if options.partition is not None:
            cmd.check_partition(options.partition)
        if (
            options.start_at is not None
            and options.partition is None
            and options.nsqd_tcp_addresses
        ):
            raise ValueError("a start position with nsqd addresses needs a partition")
        self.topic = check_topic(topic)
        self.channel = check_channel(channel)
        self.config = config
        self.budget = options.budget
        self.give_up = options.give_up or self._log_and_finish
        self.error: BaseException | None = None
        self.received = 0  # messages received from nsqd, including any requeued unseen
        self.finished = 0
        self.requeued = 0
        self._rng = rng or random.Random()
        self._backoff = flow.Backoff(
            config.backoff_strategy,
            config.backoff_multiplier,
            config.max_backoff_duration,
            self._rng,
        )
        self._low_ready = flow.LowReadyTimeouts(config.low_rdy_idle_timeout, config.low_rdy_timeout)
        hooks = LinkHooks(self._accept, self._record_outcome, self._rebalance, self._fail)
        self._connections = Connections(
            self.topic, self.channel, config, options, hooks, self._fail, self._rng
        )
        self._queue: deque[ReceivedBatch] = deque()
        self._wakeup = trio.Event()
        self._stopping = False
        self._nursery: trio.Nursery | None = None

    # -- the application's side ------------------------------------------------------

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ReceivedBatch:
        while not self._queue:
            if self.error is not None:
                raise self.error
            if self._stopping or self._budget_spent():
                raise StopAsyncIteration
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        return self._queue.popleft()

    def stop(self) -> None:
        """Stop taking messages: iteration ends, nsqd is told to stop sending (CLS)."""
        if self._stopping:
            return
        self._stopping = True
        self._connections.stop_dialing()
        self._wakeup.set()
        self._rebalance()
        if self._nursery is not None:
            for link in self._connections.live():
                self._nursery.start_soon(link.close_subscription)

    def give_back(self, count: int) -> None:
        """count messages handed out were requeued for another try (their output
        failed): with a budget, that many more may be handed out."""
        if self.budget is not None:
            self.budget.give_back(count)
            self._rebalance()

    def is_starved(self) -> bool:
        """True when nsqd will send no more until messages are answered, and every
        message received has been handed out: flush now."""
        if self._queue:
            return False  # more to hand out first: a flush now would answer only part
        links = self._connections.live()
        in_flight = {link.key: link.in_flight for link in links}
        return flow.starved(in_flight, {link.key: link.ready for link in links})

    def at_end(self, quiet: float) -> bool:
        """True when nsqd has nothing more for this consumer: every nsqd there is (each
        direct address; through nsqlookupd, each of the last lookup, once one answered)
        is subscribed and was found empty (Link.found_empty: ready for more, sent
        nothing for `quiet` seconds), and everything received was handed out. Messages
        deferred, or in flight to another consumer of the channel, are not there yet.
        Ask it again and again: each look notes the links found empty."""
        links = self._connections.expected_links()
        if links is None or self._queue:
            return False
        now = trio.current_time()
        return all([link.found_empty(quiet, now) for link in links])  # each looked at

    @property
    def unreachable(self) -> list[str]:
        """Why each nsqd there is to read could not be reached at its last dial."""
        return list(self._connections.unreachable.values())

    @property
    def window(self) -> int:
        """How many messages may be in flight at once: max_in_flight, or less when the
        connected nsqds' max_rdy_count allow less (0 while none is connected)."""
        links = self._connections.live()
        granted = sum(link.conn.identify.max_rdy_count for link in links if link.conn)
        return min(self.config.max_in_flight, granted)

    @property
    def msg_timeout(self) -> float | None:
        """The shortest msg_timeout the connected nsqds granted (None: none connected)."""
        links = self._connections.live()
        return min((link.conn.identify.msg_timeout for link in links if link.conn), default=None)

    @property
    def max_msg_timeout(self) -> float | None:
        """The shortest max_msg_timeout of the connected nsqds (None: none connected):
        how long a message may be held, however often it is TOUCHed."""
        links = self._connections.live()
        return min(
            (link.conn.identify.max_msg_timeout for link in links if link.conn), default=None
        )

    @property
    def in_flight(self) -> int:
        """Messages the connected nsqds sent that are not answered yet (FIN, REQ)."""
        return sum(link.in_flight for link in self._connections.live())

    @property
    def connected_addresses(self) -> list[str]:
        return [link.address for link in self._connections.live()]

    # -- messages in -----------------------------------------------------------------

    def _accept(self, link: Link, received: MessageBatch) -> None:
        """A link's messages: handed out within the budget, the rest requeued at once."""
        self.received += len(received)
        if self._stopping or self._budget_spent():
            ReceivedBatch(link, received).requeue(delay=0, backoff=False)
            return
        max_attempts = self.config.max_attempts
        if max_attempts and received.max_attempts > max_attempts:
            received = self._hand_up_exhausted(link, received.messages, max_attempts)
        if self.budget is not None:
            granted = self.budget.take(len(received))
            if granted < len(received):
                messages = received.messages
                past = ReceivedBatch(link, MessageBatch(messages[granted:]))
                past.requeue(delay=0, backoff=False)
                received = MessageBatch(messages[:granted])
        if not received:
            return
        batch = ReceivedBatch(link, received)
        link.open_batches.add(batch)
        self._queue.append(batch)
        self._wakeup.set()
        if self._near_budget():
            self._rebalance()  # near the limit RDY shrinks toward it, and is 0 once reached

    def _hand_up_exhausted(
        self, link: Link, messages: list[Message], max_attempts: int
    ) -> MessageBatch:
        """Messages past max_attempts go to the give-up hook as a batch of their own, for
        it to answer; the others go on."""
        exhausted = ReceivedBatch(
            link, MessageBatch(m for m in messages if m.attempts > max_attempts)
        )
        link.open_batches.add(exhausted)  # requeued at the stop if the hook has not answered
        self.give_up(exhausted)
        return MessageBatch(message for message in messages if message.attempts <= max_attempts)

    def _log_and_finish(self, exhausted: ReceivedBatch) -> None:
        """The give-up hook when none is given: each message in full in a warning (its
        JSON envelope, body included), then FIN."""
        origin = formats.Origin(self.topic, self.channel, exhausted.nsqd_address)
        for message in exhausted.messages:
            log.warning(
                "giving up on message %s after %d attempts (max_attempts %d): %s",
                formats.message_id(message),
                message.attempts,
                self.config.max_attempts,
                json.dumps(formats.envelope(message, origin), ensure_ascii=False),
            )
        exhausted.finish()

    def _near_budget(self) -> bool:
        return self.budget is not None and self.budget.left < self.config.max_in_flight

    def _budget_spent(self) -> bool:
        return self.budget is not None and self.budget.spent

    # -- answers and backoff ---------------------------------------------------------

    def _record_outcome(self, outcome: flow.Outcome, count: int) -> None:
        if outcome is flow.Outcome.FINISHED:
            self.finished += count
        else:
            self.requeued += count
        if self._near_budget():
            self._rebalance()  # less held in flight: RDY shrinks with it, to what is wanted
        if outcome is flow.Outcome.FAILED or self._backoff.active:
            self._apply_backoff(self._backoff.record(outcome))

    def _apply_backoff(self, action: flow.BackoffAction) -> None:
        if action is flow.BackoffAction.NOTHING:
            return
        if action is flow.BackoffAction.PAUSE:
            log.warning(
                "backing off for %.3fs (level %d)",
                self._backoff.pause_duration,
                self._backoff.level,
            )
            if self._nursery is not None:
                self._nursery.start_soon(self._end_pause, self._backoff.pause_duration)
        self._rebalance()

    async def _end_pause(self, duration: float) -> None:
        await trio.sleep(duration)
        self._backoff.pause_ended()
        self._rebalance()

    # -- RDY -------------------------------------------------------------------------

    def _rebalance(self) -> None:
        """Send RDY wherever the plan for the current state differs from what was sent."""
        links = self._connections.live()
        if not links:
            return
        now = trio.current_time()
        views = [link.view(now) for link in links]
        if self._stopping or self._budget_spent() or self._backoff.paused:
            targets = dict.fromkeys((link.key for link in links), 0)
        elif self._backoff.active:
            targets = _keep_probe(links) or flow.probe_ready(views, self._rng)
        else:
            targets = flow.plan_ready(self._max_in_flight(), views, self._low_ready, self._rng)
            if self.budget is not None:
                # RDY is nsqd's window of messages in flight: what a connection holds
                # unanswered (a peek holds all it printed) comes on top of its share of
                # what is still wanted, else nsqd sends nothing more while it is held.
                held = {link.key: link.in_flight for link in links}
                targets = {
                    view.key: min(targets[view.key] + held[view.key], view.max_rdy_count)
                    for view in views
                }
        for link in links:
            target = targets[link.key]
            if link.fresh or link.subscription.ordered:
                # A new connection starts at RDY 1; an ordered one has 1 in flight.
                target = min(target, 1)
            if target != link.ready:
                link.send_ready(target)

    def _max_in_flight(self) -> int:
        """max_in_flight, or toward a budget what is still wanted (within what
        max_in_flight leaves beside the messages held in flight); but while anything is,
        every live connection keeps RDY 1 (max_in_flight allowing): the last messages
        wanted may be on any nsqd, and what comes past the budget is requeued at once."""
        if self.budget is None:
            return self.config.max_in_flight
        links = self._connections.live()
        room = max(self.config.max_in_flight - sum(link.in_flight for link in links), 0)
        wanted = max(self.budget.left, len(links))
        return min(room, wanted)

    async def _redistribute_periodically(self) -> None:
        """When RDY is scarcer than connections, rotate it so every nsqd gets drained."""
        while True:
            await trio.sleep(self.config.rdy_redistribute_interval)
            if len(self._connections.live()) > self._max_in_flight():
                self._rebalance()

    # -- starting and stopping -------------------------------------------------------

    async def _start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        nursery.start_soon(self._redistribute_periodically)
        await self._connections.start(nursery)

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self._wakeup.set()

    async def _shutdown(self) -> None:
        """Requeue everything not answered, flush the answers and close every connection."""
        self.stop()
        links = self._connections.live()
        async with trio.open_nursery() as nursery:
            for link in links:
                nursery.start_soon(link.close_subscription)
        while self._queue:
            self._queue.popleft().requeue(delay=0, backoff=False)
        for link in links:
            for batch in list(link.open_batches):
                batch.requeue(delay=0, backoff=False)
        for link in links:
            if link.conn is not None:
                await link.conn.aclose()


def _keep_probe(links: list[Link]) -> dict[flow.Key, int] | None:
    """While testing the water, keep RDY 1 where it already is."""
    holders = [link for link in links if link.ready == 1]
    if len(holders) != 1:
        return None
    return {link.key: (1 if link is holders[0] else 0) for link in links}


@asynccontextmanager
async def open_consumer(
    topic: str,
    channel: str,
    config: ClientConfig,
    options: ConsumerOptions,
    starting: trio.CancelScope | None = None,
) -> AsyncIterator[Consumer]:
    """Run a consumer for the body of the block; on exit, stop cleanly.

    Connecting to direct nsqd addresses happens before the body starts, so a refused
    address, a TLS or AUTH failure raises here. Cancelling `starting` ends that at once
    (a dial that hangs with it): the body starts with the connections made by then, which
    close as cleanly as any. On exit, what the application did not answer is requeued at
    once (within options.stop_timeout), then connections close.
    """
    consumer = Consumer(topic, channel, config, options)
    with single_errors():
        async with trio.open_nursery() as nursery:
            with starting or trio.CancelScope():
                await consumer._start(nursery)
            try:
                yield consumer
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(options.stop_timeout):
                    await consumer._shutdown()
                nursery.cancel_scope.cancel()
