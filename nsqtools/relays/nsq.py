"""nsq_to_nsq's data path: each topic's messages, filtered, published to destination nsqds
through one Producer, and FIN'd at the source only once the destination acknowledged.

A Relay owns the producer; relay.sink(topic) is the runtime Sink of one source topic.
Each message is settled from the producer's outcome for it as outcomes come (many MPUBs
in flight): done once acknowledged; refused when the destination refused it for good
(over its --max-msg-size or --max-body-size: the producer cuts MPUBs so that only such a
message fails, in an outcome of its own), which makes it a dead letter or, without one,
requeues it alone with backoff; requeued (with backoff) after any other failure. What
failed is never a reason to send the rest again. A destination that restarts holds
messages back while the producer redials (up to its reconnect_timeout), so nothing is
FIN'd at the source that the destination did not take.

With JSON options (jsonfilter), each message is judged before publishing, as Go's
nsq_to_nsq does: a message dropped is FIN'd at once, one to retry is requeued with
backoff, the others are published (re-encoded with --whitelist-json-field).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

import trio

from nsqtools.config import ClientConfig
from nsqtools.errors import NsqErrorResponse
from nsqtools.jsonfilter import Action, JsonFilter
from nsqtools.producer import Outcome, Producer
from nsqtools.protocol import Message
from nsqtools.relays.status import RelayStatus
from nsqtools.runtime.sinks import Delivery

log = logging.getLogger("nsqtools.relay")

# nsqd's refusals of a message it will never take (too big for it).
REFUSALS = frozenset({"E_BAD_MESSAGE", "E_BAD_BODY"})


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
        messages = delivery.messages
        if self.json_filter is None:
            bodies = delivery.bodies
        else:
            messages, bodies = self._filter(delivery)
            if not messages:
                return  # every message was dropped (FIN) or requeued already
        self._unanswered[delivery] = len(messages)
        if self.status is not None:
            self._accepted_at[delivery] = trio.current_time()
        tokens = [(delivery, message) for message in messages]
        await self.producer.put_many(topic, bodies, tokens=tokens)

    async def flush(self) -> None:
        """Wait until every message accepted has an outcome (and so every delivery too)."""
        await self.producer.flush()

    def _filter(self, delivery: Delivery) -> tuple[list[Message], list[bytes]]:
        """The messages to publish and their bodies; the others settled now (done, as
        dropped; or requeued)."""
        assert self.json_filter is not None
        messages, bodies = [], []
        for message in delivery.messages:
            verdict = self.json_filter.apply(message.body)
            if verdict.log:
                self.report(verdict.log)
            if verdict.action is Action.PUBLISH:
                messages.append(message)
                bodies.append(verdict.body)
            elif verdict.action is Action.DROP:
                delivery.done([message])
            else:
                delivery.requeue([message])
        return messages, bodies

    def _settle(self, outcome: Outcome) -> None:
        """Settle each message as its outcome says: a delivery's whole when every one of
        it came in one acknowledged outcome (one FIN write), else message by message."""
        assert outcome.tokens is not None  # every put carries its delivery and message
        now = trio.current_time()
        by_delivery: dict[Delivery, list[Message]] = {}
        for delivery, message in outcome.tokens:
            by_delivery.setdefault(delivery, []).append(message)
        for delivery, messages in by_delivery.items():
            if self.status is not None:
                self.status.record(now - self._accepted_at[delivery], len(messages), outcome.nsqd)
            left = self._unanswered[delivery] - len(messages)
            if left:
                self._unanswered[delivery] = left
            else:
                del self._unanswered[delivery]
                self._accepted_at.pop(delivery, None)
            error = outcome.error
            if error is None:
                delivery.done(None if not left and delivery.count == len(messages) else messages)
            elif isinstance(error, NsqErrorResponse) and error.code in REFUSALS:
                delivery.refuse(messages, str(error))
            else:
                delivery.requeue(messages)


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
