"""What put() queued and the Producer has not yet cut into batches: a queue for each
topic, delay and the fork's partition and tracing, with its messages' tokens and trace
ids, and the signal that a queue was started (the Producer's sending task then batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import trio

from nsqtools.protocol import check_topic


class QueueKey(NamedTuple):
    """What messages must share to be batched together."""

    topic: str
    delay: float | None
    partition: int | None = None  # the Youzan fork's
    traced: bool = False


class PutQueue:
    """Messages put for one key, not yet batched, with their tokens and trace ids."""

    __slots__ = ("bodies", "tokens", "trace_ids")

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.tokens: list[Any] | None = None
        self.trace_ids: list[int] | None = None

    def add(
        self,
        bodies: Sequence[bytes],
        tokens: Sequence[Any] | None,
        trace_ids: Sequence[int] | None = None,
    ) -> None:
        if tokens is not None and self.tokens is None:
            self.tokens = [None] * len(self.bodies)
        if trace_ids is not None and self.trace_ids is None:
            self.trace_ids = [0] * len(self.bodies)
        self.bodies.extend(bodies)
        if self.tokens is not None:
            self.tokens.extend([None] * len(bodies) if tokens is None else tokens)
        if self.trace_ids is not None:
            self.trace_ids.extend([0] * len(bodies) if trace_ids is None else trace_ids)


class PutQueues:
    """The queues by key. A topic's name is checked when its first queue starts."""

    def __init__(self) -> None:
        self._queues: dict[QueueKey, PutQueue] = {}
        self._topics: set[str] = set()  # names already checked
        self._started = trio.Event()  # set when a new queue starts

    @property
    def count(self) -> int:
        """Messages queued."""
        return sum(len(queue.bodies) for queue in self._queues.values())

    def add(
        self,
        key: QueueKey,
        bodies: Sequence[bytes],
        tokens: Sequence[Any] | None,
        trace_ids: Sequence[int] | None,
    ) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._start(key)
        queue.add(bodies, tokens, trace_ids)

    def take(self) -> dict[QueueKey, PutQueue]:
        """Every queue, emptying them."""
        queues, self._queues = self._queues, {}
        return queues

    async def wait_started(self) -> None:
        """Wait until a queue starts (at once if one did since the last wait)."""
        await self._started.wait()
        self._started = trio.Event()

    def _start(self, key: QueueKey) -> PutQueue:
        topic = key.topic
        if topic not in self._topics:
            check_topic(topic)
            self._topics.add(topic)
        queue = PutQueue()
        self._queues[key] = queue
        self._started.set()
        return queue
