"""The Sink interface a consuming tool implements, and Delivery, what it is handed.

The runtime hands a sink each run of messages it may output, as a Delivery, and FINs
them only when the sink settles the delivery done(): its output is durable (written and
synced) or acknowledged (by a destination). A sink that cannot output them settles it
failed(), and the runtime requeues them with backoff. A sink may settle at once (stdout:
written is done) or later (a file: at its next sync; a relay: when the destination
answers); flush() asks it to settle everything accepted so far. What is still unsettled
when the run ends is requeued by the consumer's clean stop: never lost, never FIN'd
unwritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from nsqtools.consumer import Batch


class SinkClosed(Exception):
    """The sink's output went away for good (a closed pipe): stop, quietly."""


class SinkFailed(Exception):
    """The sink cannot go on (a full disk, a failed fsync): stop every consumer, requeue
    what it holds, and end the run with this error. A failed sink raises it again on
    every later call and settles nothing more."""


class Delivery:
    """The first `count` messages of a batch from `topic`, for a sink to output.

    Settle it once: done() FINs them; failed() requeues them (with backoff)."""

    __slots__ = ("_on_failed", "batch", "count", "settled", "topic")

    def __init__(
        self,
        topic: str,
        batch: Batch,
        count: int,
        on_failed: Callable[[Delivery], None] | None = None,
    ) -> None:
        self.topic = topic
        self.batch = batch
        self.count = count
        self.settled = False
        self._on_failed = on_failed  # the runtime's accounting: not output, not spent

    @property
    def bodies(self) -> list[bytes]:
        bodies = self.batch.bodies
        return bodies if self.count == len(bodies) else bodies[: self.count]

    def done(self) -> None:
        """The sink's output of these messages is durable or acknowledged: FIN them."""
        if not self.settled:
            self.settled = True
            self.batch.finish()

    def failed(self, *, backoff: bool = True) -> None:
        """The sink could not output them: requeue them (and slow down, with backoff)."""
        if not self.settled:
            self.settled = True
            self.batch.requeue(delay=0 if not backoff else None, backoff=backoff)
            if self._on_failed is not None:
                self._on_failed(self)


class Sink(Protocol):
    """Where a consuming tool puts the messages of one topic."""

    # Seconds between the runtime's calls of tick() (None: never).
    tick_interval: float | None

    async def accept(self, delivery: Delivery) -> None:
        """Take the delivery's messages; settle it now or later. May wait (back-pressure).
        Raise SinkClosed if the output has gone away for good, SinkFailed if it broke."""

    async def flush(self) -> None:
        """Settle every delivery accepted so far (make the output durable first).
        Raise SinkFailed if it cannot."""

    async def tick(self) -> None:
        """Called every tick_interval: what the sink does on a timer (a file rotates by
        time, then syncs); at least a flush."""
