"""A sink that publishes: each delivery goes to a destination topic through a Producer,
and is done when every nsqd it was meant for acknowledged every one of its messages.

What a relay (nsq_to_nsq) stands on: many publishes in flight, a delivery settled from
the producer's outcomes as they come, failed (requeued at the source, with backoff) if
any of its messages failed. A destination that restarts holds deliveries back while the
producer redials (up to its reconnect_timeout), so nothing is FIN'd at the source that
the destination did not take.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

from nsqtools.config import ClientConfig
from nsqtools.producer import Outcome, Producer
from nsqtools.runtime.sinks import Delivery


class PublishSink:
    """Publishes each delivery's messages to `topic` (None: the topic they came from)."""

    tick_interval: float | None = None

    def __init__(
        self,
        addresses: Sequence[str],
        topic: str | None = None,
        config: ClientConfig | None = None,
        mode: str = "all",
        **producer_options: Any,
    ) -> None:
        self.topic = topic
        self.producer = Producer(
            addresses, config, mode, on_outcome=self._settle, **producer_options
        )
        self._unanswered: dict[Delivery, int] = {}  # messages without an outcome yet
        self._failed: set[Delivery] = set()  # some message failed: requeue it all

    async def __aenter__(self) -> Self:
        await self.producer.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.producer.__aexit__(exc_type, exc, traceback)

    async def accept(self, delivery: Delivery) -> None:
        """Queue the messages for publishing; waits only for the producer's back-pressure."""
        self._unanswered[delivery] = delivery.count
        topic = self.topic or delivery.topic
        await self.producer.put_many(topic, delivery.bodies, tokens=[delivery] * delivery.count)

    async def flush(self) -> None:
        """Wait until every message accepted has an outcome (and so every delivery too)."""
        await self.producer.flush()

    tick = flush

    def _settle(self, outcome: Outcome) -> None:
        assert outcome.tokens is not None  # every put carries its delivery
        for delivery, count in Counter[Delivery](outcome.tokens).items():
            if outcome.error is not None:
                self._failed.add(delivery)
            left = self._unanswered[delivery] - count
            if left:
                self._unanswered[delivery] = left
                continue
            del self._unanswered[delivery]
            if delivery in self._failed:
                self._failed.discard(delivery)
                delivery.failed()
            else:
                delivery.done()
