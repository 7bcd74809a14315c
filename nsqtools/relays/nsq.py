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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import trio

from nsqtools.config import ClientConfig
from nsqtools.errors import NsqErrorResponse
from nsqtools.jsonfilter import Action, JsonFilter
from nsqtools.producer import Producer, PublishOutcome, open_producer
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

    producer: Producer  # while the relay is open

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
        self._producing = open_producer(
            addresses, config, mode, on_outcome=self._settle, **producer_options
        )
        # What was put, by its first token: each message's token is its place in the
        # order of puts, so an outcome's (ascending) tokens say whose messages it holds.
        self._published: dict[int, _Published] = {}
        self._firsts: list[int] = []  # the keys of _published, ascending
        self._next_token = 0

    async def __aenter__(self) -> Self:
        self.producer = await self._producing.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._producing.__aexit__(exc_type, exc, traceback)

    def sink(self, topic: str) -> RelaySink:
        return RelaySink(self, self.destination_topic or topic)

    async def publish(self, delivery: Delivery, topic: str) -> None:
        """Queue the delivery's messages for publishing (those the filter lets through);
        waits only for the producer's back-pressure."""
        messages = None
        if self.json_filter is None:
            bodies = delivery.bodies  # not its Messages: made only if one fails
        else:
            messages, bodies = self._filter(delivery)
            if not messages:
                return  # every message was dropped (FIN) or requeued already
        first = self._next_token
        self._next_token += len(bodies)
        accepted_at = trio.current_time() if self.status is not None else 0.0
        self._published[first] = _Published(delivery, messages, len(bodies), accepted_at)
        self._firsts.append(first)
        tokens = range(first, self._next_token)
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

    def _settle(self, outcome: PublishOutcome) -> None:
        """Settle the messages of each delivery the outcome holds, as it says."""
        assert outcome.tokens is not None  # every put has its tokens
        tokens = outcome.tokens
        now = trio.current_time()
        position = 0
        while position < len(tokens):
            first = self._firsts[bisect_right(self._firsts, tokens[position]) - 1]
            published = self._published[first]
            end = bisect_left(tokens, first + published.count, position)
            if self.status is not None:
                self.status.record(now - published.accepted_at, end - position, outcome.nsqd)
                if outcome.error is None:
                    self._count_sent(published.delivery.topic, end - position, outcome.nsqd)
            published.left -= end - position
            if not published.left:
                del self._published[first]
                self._firsts.remove(first)
            self._settle_some(published, first, tokens[position:end], outcome.error)
            position = end

    def _count_sent(self, topic: str, count: int, nsqd: str | None) -> None:
        """Messages acknowledged by `nsqd`, or (None: the `all` mode) by every one."""
        assert self.status is not None
        for destination in [nsqd] if nsqd is not None else self.producer.addresses:
            self.status.count_sent(topic, destination, count)

    def _settle_some(
        self,
        published: _Published,
        first: int,
        tokens: Sequence[int],
        error: Exception | None,
    ) -> None:
        """Settle these of a delivery's published messages (by their tokens, from
        `first`): the whole delivery in one FIN when one outcome acknowledged all of it."""
        delivery = published.delivery
        if error is None and len(tokens) == published.count:
            delivery.done()  # the usual case: no Message made, one FIN write
            return
        messages = published.messages if published.messages is not None else delivery.messages
        chosen = [messages[token - first] for token in tokens]
        if error is None:
            delivery.done(chosen)
        elif isinstance(error, NsqErrorResponse) and error.code in REFUSALS:
            delivery.refuse(chosen, str(error))
        else:
            # Why the destination did not take them, each time, as Go's logs say each try.
            log.warning("%s: %d messages requeued: %s", delivery.topic, len(chosen), error)
            delivery.requeue(chosen)


@dataclass(slots=True)
class _Published:
    """A delivery's messages put for publishing, until each has its outcome."""

    delivery: Delivery
    messages: list[Message] | None  # those the JSON filter let through (None: all)
    count: int
    accepted_at: float  # for the status lines' latencies
    left: int = field(init=False)

    def __post_init__(self) -> None:
        self.left = self.count


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
