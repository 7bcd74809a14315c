"""The Sink interface a consuming tool implements, and Delivery, what it is handed.

The runtime hands a sink each run of messages it may output, as a Delivery. The sink
settles each message once, all together or some at a time: done() when its output is
durable (written and synced) or acknowledged (by a destination); requeue() when it could
not output it now (it comes back later, and the consumer backs off); refuse() when it
can never output it (a destination that will never take it: too big, say). It never
answers nsqd itself: the runtime alone (its Settler) turns each settlement into FIN or
REQ, keeps a refused message as a dead letter before it FINs it, counts, and backs off.
A sink may settle at once (stdout: written is done) or later (a file: at its next sync;
a relay: when the destination answers); flush() asks it to settle everything accepted
so far. What is still unsettled when the run ends is requeued by the consumer's clean
stop: never lost, never FIN'd unwritten. The runtime TOUCHes what a sink holds long
(touch()). A delivery hides the consumer's batch it came from: sinks import nothing of
the consumer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nsqtools.protocol import Message


class SinkClosed(Exception):
    """The sink's output went away for good (a closed pipe): stop, quietly."""


class SinkFailed(Exception):
    """The sink cannot go on (a full disk, a failed fsync): stop every consumer, requeue
    what it holds, and end the run with this error. A failed sink raises it again on
    every later call and settles nothing more."""


class Settler(Protocol):
    """The runtime's side of settling: what becomes of messages a sink settled.
    `messages` None means every message of the delivery, none settled before."""

    def finish(self, delivery: Delivery, messages: list[Message] | None) -> None: ...

    def requeue(
        self,
        delivery: Delivery,
        messages: list[Message] | None,
        delay: float | None,
        backoff: bool,
    ) -> None: ...

    def refuse(self, delivery: Delivery, messages: list[Message], reason: str) -> None: ...

    def touch(self, delivery: Delivery) -> None: ...


class Received(Protocol):
    """What a delivery carries: the messages of one read from one nsqd."""

    @property
    def messages(self) -> list[Message]: ...

    @property
    def bodies(self) -> list[bytes]: ...

    @property
    def nsqd_address(self) -> str: ...

    def __len__(self) -> int: ...


class Delivery:
    """The messages of one read from one nsqd, of `topic`, for a sink to output.

    Settle each message once, with done(), requeue() or refuse(); given no messages,
    these settle every one not settled yet. A message settled before is skipped."""

    __slots__ = ("_all_settled", "_own_ids", "_received", "_settled_ids", "_settler", "topic")

    def __init__(self, topic: str, received: Received, settler: Settler) -> None:
        self.topic = topic
        self._received = received
        self._settler = settler
        self._settled_ids: set[bytes] | None = None  # settled one by one, if any
        self._own_ids: set[bytes] | None = None  # the delivery's ids, once needed
        self._all_settled = False

    @property
    def count(self) -> int:
        return len(self._received)

    @property
    def messages(self) -> list[Message]:
        return self._received.messages

    @property
    def bodies(self) -> list[bytes]:
        """The bodies alone: cheaper than `messages` when that is all a sink needs."""
        return self._received.bodies

    @property
    def nsqd_address(self) -> str:
        return self._received.nsqd_address

    @property
    def settled(self) -> bool:
        """Every message settled."""
        return self._all_settled

    def done(self, messages: Sequence[Message] | None = None) -> None:
        """Their output is durable or acknowledged: FIN them."""
        chosen = self._take(messages)
        if chosen is None or chosen:
            self._settler.finish(self, chosen)

    def requeue(
        self,
        messages: Sequence[Message] | None = None,
        *,
        delay: float | None = None,
        backoff: bool = True,
    ) -> None:
        """They could not be output now: REQ them (after `delay`, else go-nsq's default
        for their attempts), and slow down (with backoff)."""
        chosen = self._take(messages)
        if chosen is None or chosen:
            self._settler.requeue(self, chosen, delay, backoff)

    def refuse(self, messages: Sequence[Message], reason: str) -> None:
        """They can never be output (`reason` says why, in a line): kept as dead letters
        and FIN'd when a dead-letter destination is set, else requeued with backoff."""
        chosen = self._take(messages)
        if chosen:
            self._settler.refuse(self, chosen, reason)

    def touch(self) -> None:
        """Ask nsqd to wait longer for the messages not settled yet (it would send them
        again after its msg_timeout): for a sink that holds them a long time."""
        if not self._all_settled:
            self._settler.touch(self)

    def _take(self, messages: Sequence[Message] | None) -> list[Message] | None:
        """Mark messages settled; those not settled before, or None for every message
        when none was settled before (the usual case: no sets, no lists)."""
        if self._all_settled:
            return []
        if messages is None:
            self._all_settled = True
            if self._settled_ids is None:
                return None
            return [message for message in self.messages if message.id not in self._settled_ids]
        if self._own_ids is None:
            self._own_ids = {message.id for message in self.messages}
        settled = self._settled_ids if self._settled_ids is not None else set()
        chosen = []
        for message in messages:
            if message.id not in self._own_ids:
                raise ValueError("a delivery settles only its own messages")
            if message.id not in settled:
                settled.add(message.id)
                chosen.append(message)
        self._settled_ids = settled
        self._all_settled = len(settled) == self.count
        return chosen


class Sink(Protocol):
    """Where a consuming tool puts the messages of one topic."""

    # Seconds between the runtime's calls of tick() (None: never).
    tick_interval: float | None

    async def accept(self, delivery: Delivery) -> None:
        """Take the delivery's messages; settle them now or later. May wait
        (back-pressure). Raise SinkClosed if the output has gone away for good,
        SinkFailed if it broke."""

    async def flush(self) -> None:
        """Settle every delivery accepted so far (make the output durable first).
        Raise SinkFailed if it cannot."""

    async def tick(self) -> None:
        """Called every tick_interval: what the sink does on a timer (a file rotates by
        time, then syncs); at least a flush."""
