"""Link: one subscribed connection to an nsqd (one partition of it, on the Youzan fork),
and the consumer's state for it: RDY, messages in flight, the batches it delivered that
are not answered yet, and the subscription's close (CLS, then nsqd's CLOSE_WAIT).

A link lives as long as its connection: a reconnect makes a new one. Answers (FIN, REQ,
TOUCH) go out on the link's own connection; once that has closed they are dropped here
(nsqd takes those messages back itself), never written on the connection that replaced
it. The link tells its consumer what happens through LinkHooks: messages received,
messages answered (for the backoff), when RDY may need to change, and a failure.

A link also knows whether nsqd has nothing more to send it (found_empty): it had room
(RDY above what it holds in flight: nsqd pushes whatever the channel has then, from
memory or disk) for a quiet while, was sent nothing, and had a heartbeat meanwhile
(nsqd's sending loop is alive: a frozen nsqd is not an empty one). Once found so it
stays so until a message comes, even if its RDY is later taken away (a few RDY units
rotating over many nsqds).

The Youzan fork's messages are checked here before anything sees them: a message sent
again at once with the same id and attempts (the fork's duplicate first delivery) is
dropped, and a message from another partition than the one subscribed to is given back
(REQ) and fails the consumer: it would be shown under the wrong partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from nsqtools import flow
from nsqtools.config import ClientConfig
from nsqtools.consumer.batch import ReceivedBatch
from nsqtools.consumer.subscription import Subscription
from nsqtools.errors import NsqError
from nsqtools.protocol import ErrorFrame, Message, MessageBatch, ProtocolError
from nsqtools.protocol import commands as cmd
from nsqtools.protocol.youzan import MessageLayout
from nsqtools.transport import Conn

log = logging.getLogger("nsqtools.consumer")

# How long a clean stop waits for nsqd's CLOSE_WAIT.
CLOSE_WAIT_TIMEOUT = 5.0
# Refresh RDY once this fraction of the last RDY has been received (the 25% rule).
READY_REFRESH_FRACTION = 0.75


@dataclass(frozen=True)
class LinkHooks:
    """What a link tells its consumer; each runs at once and never blocks."""

    received: Callable[[Link, MessageBatch], None]  # messages to hand out
    answered: Callable[[flow.Outcome, int], None]  # count messages answered so (backoff)
    rebalance: Callable[[], None]  # RDY may need to change
    failed: Callable[[BaseException], None]  # the consumer cannot go on


class Link:
    """One connection to nsqd, subscribed: its RDY, in-flight count and open batches."""

    def __init__(
        self,
        address: str,
        subscription: Subscription,
        config: ClientConfig,
        hooks: LinkHooks,
    ) -> None:
        self.address = address
        self.subscription = subscription
        self.config = config
        self.hooks = hooks
        # The flow policy's name for it: one nsqd may serve several partitions.
        partition = subscription.partition
        self.key = address if partition is None else f"{address}/{partition}"
        self.conn: Conn | None = None  # set once subscribed; never replaced
        self.layout = subscription.layout()
        self.ready = 0
        self.fresh = True  # no message yet: RDY starts at 1 until the first arrives
        self.in_flight = 0
        self.received_since_ready = 0
        self.last_message_at = trio.current_time()
        self.ready_set_at = 0.0  # when RDY was last set above 0 (go-nsq's LastRdyTime)
        self.room_since: float | None = None  # since when RDY is above in_flight
        self.heartbeats_at_room = 0  # the connection's heartbeats when room_since was set
        self.found_empty_at: float | None = None  # when found_empty() last saw it quiet
        self.open_batches: set[ReceivedBatch] = set()
        self.ready_refresh_due = False  # the 25% rule: re-send RDY with the next answers
        self.cls_sent = False
        self.subscription_closed = trio.Event()
        self.last_received: tuple[bytes, int] | None = None  # id and attempts (the fork's)

    @property
    def live(self) -> bool:
        return self.conn is not None and not self.conn.closed

    def attach(self, conn: Conn) -> None:
        """The connection is subscribed: the link is its own from now on."""
        assert self.conn is None, "a link serves one connection"
        self.conn = conn
        self.layout = self.subscription.layout()  # now that nsqd said whether it is the fork
        self.last_message_at = trio.current_time()

    def view(self, now: float) -> flow.ConnectionView:
        assert self.conn is not None
        return flow.ConnectionView(
            self.key,
            self.conn.identify.max_rdy_count,
            self.ready,
            idle_for=now - self.last_message_at,
            held_for=now - self.ready_set_at,
        )

    # -- answers ---------------------------------------------------------------------

    def finish(self, ids: list[bytes]) -> None:
        self._answer(cmd.fin_many(ids), len(ids))
        self.hooks.answered(flow.Outcome.FINISHED, len(ids))

    def requeue(
        self, messages: list[Message], ids: list[bytes], delay: float | None, backoff: bool
    ) -> None:
        """REQ ids (of messages) after delay, else go-nsq's default for their attempts."""
        if delay is None:
            answer = self._default_requeues(messages, ids)
        else:
            answer = cmd.req_many(ids, delay)
        self._answer(answer, len(ids))
        self.hooks.answered(flow.Outcome.FAILED if backoff else flow.Outcome.REQUEUED, len(ids))

    def touch(self, ids: list[bytes]) -> None:
        if ids:
            self._write(b"".join(cmd.touch(message_id) for message_id in ids))

    def _default_requeues(self, messages: list[Message], ids: list[bytes]) -> bytes:
        """REQ for each of ids with go-nsq's default delay, from its message's attempts."""
        wanted = set(ids)
        config = self.config
        return b"".join(
            cmd.req(
                message.id,
                flow.requeue_delay(
                    message.attempts, config.default_requeue_delay, config.max_requeue_delay
                ),
            )
            for message in messages
            if message.id in wanted
        )

    def _answer(self, data: bytes, count: int) -> None:
        """Answer count messages this connection delivered; dropped once it has closed:
        nsqd takes those back."""
        if not self.live:
            return
        self.in_flight -= count
        self._note_room()
        if self.ready_refresh_due:
            # The refresh rides with the answers: one send, and it is only useful once
            # answers free room in the in-flight window anyway.
            self.ready_refresh_due = False
            self.received_since_ready = 0
            data += cmd.rdy(self.ready)
        self._write(data)

    def _write(self, data: bytes) -> None:
        # A closed connection's messages come back from nsqd after msg_timeout.
        if self.conn is not None and not self.conn.closed:
            self.conn.write(data)

    # -- flow ------------------------------------------------------------------------

    def send_ready(self, count: int) -> None:
        self.ready = count
        if count > 0:
            self.ready_set_at = trio.current_time()
        self.received_since_ready = 0
        self.ready_refresh_due = False
        self._note_room()
        self._write(cmd.rdy(count))

    def _note_room(self) -> None:
        """Keep room_since: when nsqd may send more since (None while it may not)."""
        if self.ready <= self.in_flight:
            self.room_since = None
        elif self.room_since is None:
            self.room_since = trio.current_time()
            self.heartbeats_at_room = self.conn.heartbeats if self.conn is not None else 0

    def found_empty(self, quiet: float, now: float) -> bool:
        """nsqd has nothing more for this link: it had room for `quiet` seconds and was
        sent nothing meanwhile, now or at an earlier look, and nothing came since. A
        heartbeat must have come since the room began: nsqd's loop that sends messages
        sends heartbeats too, so an nsqd that stalls (frozen, or too busy to send) is not
        taken for an empty one."""
        room_since = self.room_since
        if (
            room_since is not None
            and now - max(room_since, self.last_message_at) >= quiet
            and self._heartbeat_since_room()
        ):
            self.found_empty_at = now
        return self.found_empty_at is not None and self.found_empty_at > self.last_message_at

    def _heartbeat_since_room(self) -> bool:
        return self.conn is not None and self.conn.heartbeats > self.heartbeats_at_room

    def on_messages(self, conn: Conn, received: MessageBatch) -> None:
        """The connection's message sink: runs in its reader task, never blocks."""
        if self.layout is not None:
            received = self._fork_messages(received, self.layout)
        count = len(received)
        if not count:
            return
        self.in_flight += count
        self.received_since_ready += count
        self.last_message_at = trio.current_time()
        self._note_room()
        self.hooks.received(self, received)
        if self.fresh:
            self.fresh = False
            self.hooks.rebalance()
        elif self.ready and self.received_since_ready >= READY_REFRESH_FRACTION * self.ready:
            self.ready_refresh_due = True

    def _fork_messages(self, received: MessageBatch, layout: MessageLayout) -> MessageBatch:
        """The fork's messages read, without duplicates, each checked to come from the
        partition subscribed to: if one does not, all are given back and none goes on."""
        messages = [message for message in layout.read_all(received) if not self._is_copy(message)]
        asked = self.subscription.partition
        stray = next((m for m in messages if asked not in (None, m.origin_partition)), None)
        if stray is None:
            return MessageBatch(messages)
        self._write(cmd.req_many([message.id for message in messages]))
        self.hooks.failed(
            NsqError(
                f"{self.address}: subscribed to partition {asked}, was sent a message of "
                f"partition {stray.origin_partition} (given back, not shown)"
            )
        )
        return MessageBatch()

    def _is_copy(self, message: Message) -> bool:
        """The message received just before, again, same id and attempts: the copy the
        fork's first SUB_ORDERED on a channel created over HTTP sends (spec, "Observed
        on a running fork"). Not in flight: handed out it would be shown twice, counted
        twice for -n, and its FIN would fail. (Anything nsqd sends again has its
        attempts raised.)"""
        key = (message.id, message.attempts)
        copy = key == self.last_received
        self.last_received = key
        if copy:
            log.debug("%s: message %s came twice: the copy is dropped", self.address, key[0].hex())
        return copy

    def on_error(self, conn: Conn, frame: ErrorFrame) -> None:
        log.warning("%s: %s", self.address, frame)

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
