"""The consumer: one topic/channel from many nsqds, in batches, losing nothing.

Owns the connections to nsqd (direct addresses, reconnected with exponential backoff,
also when a connection ends soon after it was made; or discovered through nsqlookupd,
reconnected while a poll still lists them), RDY flow control and backoff (policy in
flow.py), handing messages past max_attempts to a give-up hook, and the clean stop.

On the Youzan fork (found from nsqlookupd's partitions and meta, or from nsqd's
version) there is one connection per (nsqd, partition): SUB with the partition,
SUB_ORDERED for an ordered topic (one message in flight per partition: RDY 1), or
SUB_ADVANCED from a start position; messages are read as ForkMessages. A refusal that
names a moved partition drops that connection until the next lookup; an extend topic's
E_SUB_EXTEND_NEED and an ordered topic's E_SUB_ORDER_IS_MUST (partition given) are
answered by subscribing as asked.

The application reads Batches: the messages one connection delivered in one read.
Each is answered as a whole or message by message (FIN, REQ, TOUCH); a batch's
answers go out in one write, on the connection that delivered it: once that one has
closed, they are dropped (nsqd takes the messages back), never sent on its successor.
Messages past max_attempts (when set) are not handed out: they go to the give-up hook
as a Batch of their own, which answers it (by default: a warning with each message in
full, then FIN). Nothing is lost on stop: messages the application never took and
messages it left unanswered are requeued at once (REQ 0), because nsqd would otherwise
hold them until msg_timeout. With `limit`, at most that many messages are ever
delivered; any received beyond it are requeued at once, and while more are wanted
every connection keeps some RDY, so the last ones come from whichever nsqd has them.

No printing and no click here: errors are NsqError subclasses with one-line messages.
"""

from __future__ import annotations

import json
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import trio

from nsqtools import flow, formats
from nsqtools.addresses import address_key
from nsqtools.config import ClientConfig
from nsqtools.errors import (
    AuthError,
    NsqError,
    NsqErrorResponse,
    TlsError,
    single_errors,
)
from nsqtools.protocol import (
    ErrorFrame,
    Message,
    MessageBatch,
    ProtocolError,
    check_channel,
    check_topic,
    youzan,
)
from nsqtools.protocol import commands as cmd
from nsqtools.transport import Conn, open_connection

if TYPE_CHECKING:
    from nsqtools.httpapi.lookupd import TopicLookup

log = logging.getLogger("nsqtools.consumer")

# Direct nsqd addresses are redialed after 0.5s, 1s, 2s, ... up to this; the delay starts
# again at 0.5s once a connection has lasted STEADY_CONNECTION.
MAX_RECONNECT_DELAY = 30.0
STEADY_CONNECTION = 10.0
# How long a clean stop waits for nsqd's CLOSE_WAIT.
CLOSE_WAIT_TIMEOUT = 5.0
# Refresh RDY once this fraction of the last RDY has been received (the 25% rule).
READY_REFRESH_FRACTION = 0.75

# Takes a Batch of messages past max_attempts and answers it (FIN once they are kept).
GiveUpHook = Callable[["Batch"], None]
# Configuration problems: retrying cannot fix them, so they end the consumer.
FATAL_ERRORS = (AuthError, TlsError, NsqErrorResponse)


class Batch:
    """Messages from one connection's read, answered together or one by one.

    They belong to that connection: once it has closed, an answer is dropped (nsqd takes
    the messages back itself), never written on the connection that replaced it."""

    __slots__ = ("_answered", "_conn", "_done", "_link", "_received")

    def __init__(self, link: _Link, conn: Conn, received: MessageBatch) -> None:
        self._link = link
        self._conn = conn
        self._received = received
        self._answered: set[bytes] | None = None  # ids answered one by one, if any
        self._done = False  # every message answered

    def __len__(self) -> int:
        return len(self._received)

    @property
    def messages(self) -> list[Message]:
        return self._received.messages

    @property
    def bodies(self) -> list[bytes]:
        """The bodies alone: cheaper than `messages` when that is all you need."""
        return self._received.bodies

    @property
    def nsqd_address(self) -> str:
        return self._link.address

    def unanswered(self) -> list[Message]:
        if self._done:
            return []
        if self._answered is None:
            return self.messages
        return [message for message in self.messages if message.id not in self._answered]

    def finish(self, messages: Sequence[Message] | None = None) -> None:
        """FIN these messages of this batch (default: every one not yet answered).

        Each is answered once, however often it is listed; one answered before is skipped."""
        ids = self._take(messages)
        if ids:
            self._link.answer(self._conn, cmd.fin_many(ids), len(ids))
            self._link.consumer._record_outcome(flow.Outcome.FINISHED, len(ids))

    def requeue(
        self,
        messages: Sequence[Message] | None = None,
        *,
        delay: float | None = None,
        backoff: bool = True,
    ) -> None:
        """REQ these messages (default: every one not yet answered).

        Without a delay each gets go-nsq's default, growing with its attempts. With
        backoff, the consumer slows down as go-nsq's does after a failure.
        """
        ids = self._take(messages)
        if not ids:
            return
        consumer = self._link.consumer
        if delay is None:
            answer = consumer._default_requeues(self.messages, ids)
        else:
            answer = cmd.req_many(ids, delay)
        self._link.answer(self._conn, answer, len(ids))
        outcome = flow.Outcome.FAILED if backoff else flow.Outcome.REQUEUED
        consumer._record_outcome(outcome, len(ids))

    def touch(self, messages: Sequence[Message] | None = None) -> None:
        """Reset nsqd's timeout for these unanswered messages (default: all unanswered)."""
        chosen = self.unanswered() if messages is None else messages
        if self._link.owns(self._conn):
            self._link.write(b"".join(cmd.touch(message.id) for message in chosen))

    def _take(self, messages: Sequence[Message] | None) -> list[bytes]:
        """Mark messages answered and return the ids not answered before, each once."""
        if self._done:
            return []
        if messages is None:
            if self._answered is None:
                ids = self._received.ids  # the usual case: no Message objects, no set
            else:
                ids = [message.id for message in self.unanswered()]
            self._done = True
        else:
            ids = self._take_some(messages)
        if self._done:
            self._link.open_batches.discard(self)
        return ids

    def _take_some(self, messages: Sequence[Message]) -> list[bytes]:
        given = list(dict.fromkeys(message.id for message in messages))  # each once, in order
        if not set(self._received.ids).issuperset(given):
            raise ValueError("a batch answers only its own messages")
        answered = self._answered if self._answered is not None else set()
        ids = [message_id for message_id in given if message_id not in answered]
        answered.update(ids)
        self._answered = answered
        self._done = len(answered) == len(self)
        return ids


@dataclass
class Subscription:
    """How a connection subscribes: upstream's SUB, or the Youzan fork's variants."""

    partition: int | None = None
    fork: bool = False  # the Youzan fork's nsqd: messages are read as ForkMessages
    ordered: bool = False  # SUB_ORDERED: one message in flight
    extend: bool = False  # identify extend_support; messages carry an extend header
    start: youzan.StartPosition | None = None  # SUB_ADVANCED from here

    def command(self, topic: str, channel: str) -> bytes:
        if self.ordered and self.partition is not None:
            return youzan.sub_ordered(topic, channel, self.partition)
        if self.start is not None and self.partition is not None:
            return youzan.sub_advanced(topic, channel, self.partition, self.start)
        return cmd.sub(topic, channel, self.partition)

    def layout(self) -> youzan.MessageLayout | None:
        if not self.fork:
            return None
        detail = self.partition is not None and (self.ordered or self.start is not None)
        return youzan.MessageLayout(self.partition, self.extend, detail)

    def adapt(self, error: NsqErrorResponse) -> bool:
        """Subscribe as the fork's refusal asks, if it can be; True when changed."""
        if error.code == "E_SUB_EXTEND_NEED" and not self.extend:
            self.extend = True
        elif error.code == "E_SUB_EXTEND_FORBIDDON" and self.extend:
            self.extend = False
        elif error.code == "E_SUB_ORDER_IS_MUST" and self.partition is not None:
            self.ordered = True
        else:
            return False
        return True


class _Link:
    """The consumer's state for one nsqd (one partition of it, on the Youzan fork): its
    connection, RDY and in-flight count."""

    def __init__(self, consumer: Consumer, address: str, subscription: Subscription) -> None:
        self.consumer = consumer
        self.address = address
        self.subscription = subscription
        self.layout = subscription.layout()
        # The flow policy's name for it: one nsqd may serve several partitions.
        partition = subscription.partition
        self.key = address if partition is None else f"{address}/{partition}"
        self.conn: Conn | None = None
        self.ready = 0
        self.fresh = True  # no message yet: RDY starts at 1 until the first arrives
        self.in_flight = 0
        self.received_since_ready = 0
        self.last_message_at = 0.0
        self.ready_set_at = 0.0  # when RDY was last set above 0 (go-nsq's LastRdyTime)
        self.open_batches: set[Batch] = set()
        self.running = False
        self.ready_refresh_due = False  # the 25% rule: re-send RDY with the next answers
        self.cls_sent = False
        self.subscription_closed = trio.Event()

    @property
    def live(self) -> bool:
        return self.conn is not None and not self.conn.closed

    def view(self, now: float) -> flow.ConnectionView:
        assert self.conn is not None
        return flow.ConnectionView(
            self.key,
            self.conn.identify.max_rdy_count,
            self.ready,
            idle_for=now - self.last_message_at,
            held_for=now - self.ready_set_at,
        )

    def attach(self, conn: Conn) -> None:
        self.conn = conn
        self.layout = self.subscription.layout()
        self.ready = self.in_flight = self.received_since_ready = 0
        self.ready_refresh_due = False
        self.fresh = True
        self.cls_sent = False
        self.subscription_closed = trio.Event()
        self.last_message_at = trio.current_time()

    def detach(self) -> None:
        # nsqd requeues (after msg_timeout) whatever was in flight on a lost connection.
        self.conn = None
        self.ready = self.in_flight = 0
        self.open_batches.clear()

    def write(self, data: bytes) -> None:
        # A lost connection's messages come back from nsqd after msg_timeout.
        if self.conn is not None and not self.conn.closed:
            self.conn.write(data)

    def owns(self, conn: Conn) -> bool:
        """Whether conn is this link's live connection (not one that closed before)."""
        return conn is self.conn and not conn.closed

    def answer(self, conn: Conn, data: bytes, count: int) -> None:
        """Answer count messages conn delivered; dropped if conn has closed since: nsqd
        takes those back, and the in-flight count is the new connection's own."""
        if not self.owns(conn):
            return
        self.in_flight -= count
        if self.ready_refresh_due:
            # The refresh rides with the answers: one send, and it is only useful once
            # answers free room in the in-flight window anyway.
            self.ready_refresh_due = False
            self.received_since_ready = 0
            data += cmd.rdy(self.ready)
        self.write(data)

    def send_ready(self, count: int) -> None:
        self.ready = count
        if count > 0:
            self.ready_set_at = trio.current_time()
        self.received_since_ready = 0
        self.ready_refresh_due = False
        self.write(cmd.rdy(count))

    def on_messages(self, conn: Conn, received: MessageBatch) -> None:
        """The connection's message sink: runs in its reader task, never blocks."""
        if self.layout is not None:
            received = self.layout.read(received)
        count = len(received)
        self.in_flight += count
        self.received_since_ready += count
        self.last_message_at = trio.current_time()
        consumer = self.consumer
        consumer.received += count
        consumer._accept(self, conn, received)
        if self.fresh:
            self.fresh = False
            consumer._rebalance()
        elif self.ready and self.received_since_ready >= READY_REFRESH_FRACTION * self.ready:
            self.ready_refresh_due = True

    async def close_subscription(self) -> None:
        """CLS once, and wait for CLOSE_WAIT: every message nsqd sent before it has been
        received (and, while stopping, requeued); nsqd sends nothing more."""
        if not self.cls_sent:
            self.cls_sent = True
            try:
                with trio.move_on_after(CLOSE_WAIT_TIMEOUT):
                    if self.conn is not None:
                        await self.conn.request(cmd.CLS)
            except (NsqError, ProtocolError):
                pass
            finally:
                self.subscription_closed.set()
        await self.subscription_closed.wait()

    def on_error(self, conn: Conn, frame: ErrorFrame) -> None:
        log.warning("%s: %s", self.address, frame)


class Consumer:
    """Subscribes one topic/channel; iterate it for Batches. Made by open_consumer()."""

    def __init__(
        self,
        topic: str,
        channel: str,
        config: ClientConfig,
        *,
        nsqd_tcp_addresses: Sequence[str] = (),
        lookupd_http_addresses: Sequence[str] = (),
        limit: int | None = None,
        give_up: GiveUpHook | None = None,
        rng: random.Random | None = None,
        partition: int | None = None,
        start_at: youzan.StartPosition | None = None,
    ) -> None:
        if bool(nsqd_tcp_addresses) == bool(lookupd_http_addresses):
            raise ValueError("give nsqd TCP addresses or nsqlookupd HTTP addresses, not both")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.topic = check_topic(topic)
        self.channel = check_channel(channel)
        self.config = config
        self.nsqd_tcp_addresses = _distinct(nsqd_tcp_addresses)
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.limit = limit
        # The Youzan fork's: only this partition; start new channels here (SUB_ADVANCED).
        self.partition = None if partition is None else cmd.check_partition(partition)
        self.start_at = start_at
        if start_at is not None and partition is None and nsqd_tcp_addresses:
            raise ValueError("a start position with nsqd addresses needs a partition")
        self.give_up = give_up or self._log_and_finish
        self.error: BaseException | None = None
        self.received = 0  # messages received from nsqd, including any requeued unseen
        self.delivered = 0  # messages handed to the application
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
        self._links: dict[str, _Link] = {}  # by address_key: one per nsqd
        self._queue: deque[Batch] = deque()
        self._wakeup = trio.Event()
        self._lookup_soon = trio.Event()  # set to poll nsqlookupd at once
        self._stopping = False
        self._nursery: trio.Nursery | None = None

    # -- the application's side ------------------------------------------------------

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Batch:
        while not self._queue:
            if self.error is not None:
                raise self.error
            if self._stopping or self._limit_reached():
                raise StopAsyncIteration
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        return self._queue.popleft()

    def stop(self) -> None:
        """Stop taking messages: iteration ends, nsqd is told to stop sending (CLS)."""
        if self._stopping:
            return
        self._stopping = True
        self._wakeup.set()
        self._rebalance()
        if self._nursery is not None:
            for link in self._live_links():
                self._nursery.start_soon(link.close_subscription)

    def give_back(self, count: int) -> None:
        """count messages delivered were requeued for another try (their output failed):
        with a limit, that many more may be delivered."""
        self.delivered -= count
        if self.limit is not None:
            self._rebalance()

    def is_starved(self) -> bool:
        """True when nsqd will send no more until messages are answered, and every
        message received has been handed out: flush now."""
        if self._queue:
            return False  # more to hand out first: a flush now would answer only part
        links = self._live_links()
        in_flight = {link.key: link.in_flight for link in links}
        return flow.starved(in_flight, {link.key: link.ready for link in links})

    @property
    def window(self) -> int:
        """How many messages may be in flight at once: max_in_flight, or less when the
        connected nsqds' max_rdy_count allow less (0 while none is connected)."""
        links = self._live_links()
        granted = sum(link.conn.identify.max_rdy_count for link in links if link.conn)
        return min(self.config.max_in_flight, granted)

    @property
    def msg_timeout(self) -> float | None:
        """The shortest msg_timeout the connected nsqds granted (None: none connected)."""
        links = self._live_links()
        return min((link.conn.identify.msg_timeout for link in links if link.conn), default=None)

    @property
    def connected_addresses(self) -> list[str]:
        return [link.address for link in self._live_links()]

    # -- messages in -----------------------------------------------------------------

    def _accept(self, link: _Link, conn: Conn, received: MessageBatch) -> None:
        if self._stopping or self._limit_reached():
            Batch(link, conn, received).requeue(delay=0, backoff=False)
            return
        max_attempts = self.config.max_attempts
        if max_attempts and received.max_attempts > max_attempts:
            received = self._hand_up_exhausted(link, conn, received.messages, max_attempts)
        if self.limit is not None:
            room = self.limit - self.delivered
            if len(received) > room:
                messages = received.messages
                Batch(link, conn, MessageBatch(messages[room:])).requeue(delay=0, backoff=False)
                received = MessageBatch(messages[:room])
        if not received:
            return
        batch = Batch(link, conn, received)
        link.open_batches.add(batch)
        self.delivered += len(received)
        self._queue.append(batch)
        self._wakeup.set()
        if self.limit is not None and self.limit - self.delivered < self.config.max_in_flight:
            self._rebalance()  # near the limit RDY shrinks toward it, and is 0 once reached

    def _hand_up_exhausted(
        self, link: _Link, conn: Conn, messages: list[Message], max_attempts: int
    ) -> MessageBatch:
        """Messages past max_attempts go to the give-up hook as a Batch of their own, for
        it to answer; the others go on."""
        exhausted = Batch(
            link, conn, MessageBatch(m for m in messages if m.attempts > max_attempts)
        )
        link.open_batches.add(exhausted)  # requeued at the stop if the hook has not answered
        self.give_up(exhausted)
        return MessageBatch(message for message in messages if message.attempts <= max_attempts)

    def _log_and_finish(self, exhausted: Batch) -> None:
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

    def _limit_reached(self) -> bool:
        return self.limit is not None and self.delivered >= self.limit

    # -- answers ---------------------------------------------------------------------

    def _default_requeues(self, messages: list[Message], ids: list[bytes]) -> bytes:
        """REQ for each of ids with go-nsq's default delay, from its message's attempts."""
        wanted = set(ids)
        return b"".join(
            cmd.req(
                message.id,
                flow.requeue_delay(
                    message.attempts,
                    self.config.default_requeue_delay,
                    self.config.max_requeue_delay,
                ),
            )
            for message in messages
            if message.id in wanted
        )

    def _record_outcome(self, outcome: flow.Outcome, count: int) -> None:
        if outcome is flow.Outcome.FINISHED:
            self.finished += count
        else:
            self.requeued += count
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

    def _live_links(self) -> list[_Link]:
        return [link for link in self._links.values() if link.live]

    def _rebalance(self) -> None:
        """Send RDY wherever the plan for the current state differs from what was sent."""
        links = self._live_links()
        if not links:
            return
        now = trio.current_time()
        views = [link.view(now) for link in links]
        if self._stopping or self._limit_reached() or self._backoff.paused:
            targets = dict.fromkeys((link.key for link in links), 0)
        elif self._backoff.active:
            targets = self._keep_probe(links) or flow.probe_ready(views, self._rng)
        else:
            targets = flow.plan_ready(self._max_in_flight(), views, self._low_ready, self._rng)
        for link in links:
            target = targets[link.key]
            if link.fresh or link.subscription.ordered:
                # A new connection starts at RDY 1; an ordered one has 1 in flight.
                target = min(target, 1)
            if target != link.ready:
                link.send_ready(target)

    def _keep_probe(self, links: list[_Link]) -> dict[flow.Key, int] | None:
        """While testing the water, keep RDY 1 where it already is."""
        holders = [link for link in links if link.ready == 1]
        if len(holders) != 1:
            return None
        return {link.key: (1 if link is holders[0] else 0) for link in links}

    def _max_in_flight(self) -> int:
        """max_in_flight, or toward a limit what is still wanted; but while anything is,
        every live connection keeps RDY 1 (max_in_flight allowing): the last messages
        wanted may be on any nsqd, and what comes past the limit is requeued at once."""
        if self.limit is None:
            return self.config.max_in_flight
        wanted = max(self.limit - self.delivered, len(self._live_links()))
        return min(self.config.max_in_flight, wanted)

    async def _redistribute_periodically(self) -> None:
        """When RDY is scarcer than connections, rotate it so every nsqd gets drained."""
        while True:
            await trio.sleep(self.config.rdy_redistribute_interval)
            if len(self._live_links()) > self._max_in_flight():
                self._rebalance()

    # -- connections -----------------------------------------------------------------

    async def _start(self, nursery: trio.Nursery) -> None:
        """Connect to every direct nsqd (failing on the first that cannot be reached),
        or start polling nsqlookupd."""
        self._nursery = nursery
        nursery.start_soon(self._redistribute_periodically)
        for address in self.nsqd_tcp_addresses:
            await nursery.start(self._serve_direct, address)
        if self.lookupd_http_addresses:
            nursery.start_soon(self._discover)

    def _link(self, address: str, subscription: Subscription | None = None) -> _Link:
        """The link to this nsqd (and partition); made with `subscription` if new."""
        subscription = subscription or Subscription(self.partition, start=self.start_at)
        key = address_key(address)
        if subscription.fork and subscription.partition is not None:
            key = f"{key}/{subscription.partition}"
        if key not in self._links:
            self._links[key] = _Link(self, address, subscription)
        return self._links[key]

    async def _serve_direct(
        self, address: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep a connection to a given nsqd, redialing with exponential backoff.

        The first attempt must succeed: a refused address at start is an error. A
        connection that ends within STEADY_CONNECTION of its dial counts as a failed
        one: an nsqd that takes SUB and then breaks the protocol is not redialed at
        full speed forever."""
        await self._connect_and_serve(self._link(address), task_status)
        failures = 0  # redials in a row that failed, or whose connection did not last
        while not self._stopping:
            delay = min(0.5 * 2**failures, MAX_RECONNECT_DELAY)
            delay *= 1 + self._rng.random() * 0.2
            log.info("%s: reconnecting in %.1fs", address, delay)
            await trio.sleep(delay)
            dialed_at = trio.current_time()
            try:
                await self._connect_and_serve(self._link(address), trio.TASK_STATUS_IGNORED)
            except (NsqError, ProtocolError, OSError) as error:
                log.warning("%s: %s", address, error)
                failures += 1
                continue
            steady = trio.current_time() - dialed_at >= STEADY_CONNECTION
            failures = 0 if steady else failures + 1

    async def _serve_discovered(self, link: _Link) -> None:
        """One connection to a discovered nsqd; the next poll reconnects it if listed."""
        link.running = True
        try:
            await self._connect_and_serve(link, trio.TASK_STATUS_IGNORED, discovered=True)
        except (NsqError, ProtocolError, OSError) as error:
            log.warning("%s: %s", link.address, error)
        finally:
            link.running = False

    async def _connect_and_serve(
        self, link: _Link, task_status: trio.TaskStatus[None], *, discovered: bool = False
    ) -> None:
        """Connect, SUB, then serve until the connection ends; fatal errors end the consumer.

        On the Youzan fork, a refusal that a different SUB answers is answered so at
        once; one that names a moved partition ends only this link (discovered ones)."""
        while True:
            try:
                await self._serve(link, task_status)
                return
            except NsqErrorResponse as error:
                if link.subscription.adapt(error):
                    log.info("%s: %s; subscribing again as asked", link.address, error)
                    continue
                if discovered and error.code in youzan.REROUTE_ERRORS:
                    log.warning("%s; looking the topic up again", error)
                    self._lookup_soon.set()
                    return
                self._fail(error)
                raise
            except FATAL_ERRORS as error:
                self._fail(error)
                raise
            finally:
                link.detach()
                self._rebalance()

    async def _serve(self, link: _Link, task_status: trio.TaskStatus[None]) -> None:
        subscription = link.subscription
        async with open_connection(
            link.address,
            self.config,
            on_messages=link.on_messages,
            on_error=link.on_error,
            extend_support=subscription.extend,
        ) as conn:
            self._recognise(subscription, conn)
            await conn.request(subscription.command(self.topic, self.channel))
            link.attach(conn)
            # A start position is the channel's first client's: a reconnect goes on.
            subscription.start = None
            self._rebalance()
            task_status.started()
            where = "" if subscription.partition is None else f" partition {subscription.partition}"
            log.info("%s: subscribed to %s/%s%s", link.address, self.topic, self.channel, where)
            await conn.wait_closed()
            if conn.error is not None and not self._stopping:
                log.warning("%s: connection lost: %s", link.address, conn.error)

    def _recognise(self, subscription: Subscription, conn: Conn) -> None:
        """Whether nsqd is the Youzan fork, from its version; the fork's options need it."""
        subscription.fork = youzan.is_fork_version(conn.identify.version)
        if subscription.fork:
            return
        if subscription.partition is not None or subscription.start is not None:
            version = conn.identify.version or "an unknown version"
            raise NsqError(
                f"{conn.address} is NSQ {version}, not the Youzan fork: "
                "partitions and start positions need the fork"
            )

    async def _discover(self) -> None:
        # Imported here: httpx (and the rich it pulls in) costs ~100ms at start-up, and
        # consumers of direct nsqd addresses never need it.
        import httpx

        from nsqtools import discovery

        config = self.config
        async with httpx.AsyncClient(
            timeout=config.lookupd_poll_timeout, headers=config.lookupd_headers()
        ) as client:
            asked_for_lookupds = False
            while not self._stopping:
                found, errors = await discovery.lookup_topic_all(
                    client, self.lookupd_http_addresses, self.topic
                )
                for error in errors:
                    log.warning("%s", error)
                if found.is_fork and not asked_for_lookupds:
                    asked_for_lookupds = True
                    more = await discovery.more_lookupds(client, self.lookupd_http_addresses)
                    self.lookupd_http_addresses.extend(more)
                for address, subscription in self._subscriptions(found):
                    link = self._link(address, subscription)
                    if not link.running and self._nursery is not None:
                        self._nursery.start_soon(self._serve_discovered, link)
                jitter = self._rng.random() * config.lookupd_poll_jitter
                self._lookup_soon = trio.Event()
                with trio.move_on_after(config.lookupd_poll_interval * (1 + jitter)):
                    await self._lookup_soon.wait()

    def _subscriptions(self, found: TopicLookup) -> list[tuple[str, Subscription]]:
        """Where to subscribe: each producer, or on the Youzan fork each partition's
        leader (only the partition asked for, if one was)."""
        if not found.is_fork:
            if found.producers and (self.partition is not None or self.start_at is not None):
                self._fail(NsqError("partitions and start positions need the Youzan fork"))
            return [(node.tcp_address, Subscription()) for node in found.producers]
        meta = found.meta
        return [
            (
                node.tcp_address,
                Subscription(
                    partition,
                    fork=True,
                    ordered=meta is not None and meta.ordered,
                    extend=meta is not None and meta.extend_support,
                    start=self.start_at,
                ),
            )
            for partition, node in found.partitions.items()
            if self.partition in (None, partition)
        ]

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self._wakeup.set()

    # -- stopping --------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Requeue everything not answered, flush the answers and close every connection."""
        self.stop()
        links = self._live_links()
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


def _distinct(addresses: Sequence[str]) -> list[str]:
    """Each nsqd once, as first spelled. Two connections to one nsqd would share its
    _Link, each answering messages the other received (E_FIN_FAILED) and never its own."""
    chosen: dict[str, str] = {}
    for address in addresses:
        chosen.setdefault(address_key(address), address)
    return list(chosen.values())


@asynccontextmanager
async def open_consumer(
    topic: str,
    channel: str,
    config: ClientConfig,
    *,
    nsqd_tcp_addresses: Sequence[str] = (),
    lookupd_http_addresses: Sequence[str] = (),
    limit: int | None = None,
    give_up: GiveUpHook | None = None,
    stop_timeout: float = 30.0,
    partition: int | None = None,
    start_at: youzan.StartPosition | None = None,
) -> AsyncIterator[Consumer]:
    """Run a consumer for the body of the block; on exit, stop cleanly.

    Connecting to direct nsqd addresses happens before the body starts, so a refused
    address, a TLS or AUTH failure raises here. On exit, what the application did not
    answer is requeued at once (within stop_timeout), then connections close.
    partition and start_at are the Youzan fork's (see Consumer).
    """
    consumer = Consumer(
        topic,
        channel,
        config,
        nsqd_tcp_addresses=nsqd_tcp_addresses,
        lookupd_http_addresses=lookupd_http_addresses,
        limit=limit,
        give_up=give_up,
        partition=partition,
        start_at=start_at,
    )
    with single_errors():
        async with trio.open_nursery() as nursery:
            await consumer._start(nursery)
            try:
                yield consumer
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(stop_timeout):
                    await consumer._shutdown()
                nursery.cancel_scope.cancel()
