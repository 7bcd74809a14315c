"""nsq_to_nsq's data path: each topic's messages, filtered, published to destination nsqds
through one Producer, and FIN'd at the source only once the destination acknowledged.

A Relay owns the producer; relay.sink(topic) is the runtime Sink of one source topic. A
delivery is settled from the producer's outcomes as they come (many MPUBs in flight):
done when every message of it that was published is acknowledged, failed (requeued at
the source, with backoff) if any failed. A destination that restarts holds deliveries
back while the producer redials (up to its reconnect_timeout), so nothing is FIN'd at
the source that the destination did not take.

With JSON options (jsonfilter), each message is judged before publishing, as Go's
nsq_to_nsq does: a message dropped is FIN'd at once, one to retry is requeued with
backoff, the others are published (re-encoded with --whitelist-json-field).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

import trio

from nsqtools.config import ClientConfig
from nsqtools.jsonfilter import Action, JsonFilter
from nsqtools.producer import Outcome, Producer
from nsqtools.relays.status import RelayStatus
from nsqtools.runtime.sinks import Delivery

log = logging.getLogger("nsqtools.relay")


class Relay:
    """Publishes what its sinks accept to `destination_topic` (None: each message's own
    topic) on the destination nsqds. `report` gets the JSON filter's lines (Go's log
    lines for a body it could not decode, a required field missing)."""

    def __init__(
        self,
        addresses: Sequence[str],
        destination_topic: str | None = None,
        config: ClientConfig | None = None,
        mode: str = "all",
        *,
        json_filter: JsonFilter | None = None,
        status: RelayStatus | None = None,
        report: Callable[[str], None] = log.warning,
        **producer_options: Any,
    ) -> None:
        self.destination_topic = destination_topic
        self.report = report
        self.json_filter = json_filter if json_filter is not None and json_filter.active else None
        self.status = status
        self.producer = Producer(
            addresses, config, mode, on_outcome=self._settle, **producer_options
        )
        self._unanswered: dict[Delivery, int] = {}  # messages without an outcome yet
        self._failed: set[Delivery] = set()  # some message failed: requeue it all
        self._accepted_at: dict[Delivery, float] = {}  # for the status lines' latencies

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

    def sink(self, topic: str) -> RelaySink:
        return RelaySink(self, self.destination_topic or topic)

    async def publish(self, delivery: Delivery, topic: str) -> None:
        """Queue the delivery's messages for publishing (those the filter lets through);
        waits only for the producer's back-pressure."""
        bodies = delivery.bodies if self.json_filter is None else self._filter(delivery)
        if not bodies:
            delivery.done()  # every message was dropped (FIN) or requeued already
            return
        self._unanswered[delivery] = len(bodies)
        if self.status is not None:
            self._accepted_at[delivery] = trio.current_time()
        await self.producer.put_many(topic, bodies, tokens=[delivery] * len(bodies))

    async def flush(self) -> None:
        """Wait until every message accepted has an outcome (and so every delivery too)."""
        await self.producer.flush()

    def _filter(self, delivery: Delivery) -> list[bytes]:
        """The bodies to publish; the others answered now (FIN'd, or requeued)."""
        assert self.json_filter is not None
        batch, bodies = delivery.batch, []
        for message in batch.messages[: delivery.count]:
            verdict = self.json_filter.apply(message.body)
            if verdict.log:
                self.report(verdict.log)
            if verdict.action is Action.PUBLISH:
                bodies.append(verdict.body)
            elif verdict.action is Action.DROP:
                batch.finish([message])
            else:
                batch.requeue([message])
        return bodies

    def _settle(self, outcome: Outcome) -> None:
        assert outcome.tokens is not None  # every put carries its delivery
        now = trio.current_time()
        for delivery, count in Counter[Delivery](outcome.tokens).items():
            if self.status is not None:
                self.status.record(now - self._accepted_at[delivery], count, outcome.nsqd)
            if outcome.error is not None:
                self._failed.add(delivery)
            left = self._unanswered[delivery] - count
            if left:
                self._unanswered[delivery] = left
                continue
            del self._unanswered[delivery]
            self._accepted_at.pop(delivery, None)
            if delivery in self._failed:
                self._failed.discard(delivery)
                delivery.failed()
            else:
                delivery.done()


class RelaySink:
    """The runtime Sink of one source topic: its messages go through the relay."""

    tick_interval: float | None = None

    def __init__(self, relay: Relay, destination_topic: str) -> None:
        self.relay = relay
        self.destination_topic = destination_topic

    async def accept(self, delivery: Delivery) -> None:
        await self.relay.publish(delivery, self.destination_topic)

    async def flush(self) -> None:
        await self.relay.flush()

    tick = flush
