"""nsq_to_http's data path: each message sent as an HTTP request by -n concurrent senders
over kept-alive connections, FIN'd once the endpoint accepted it, requeued if not.

An HttpRelay is the runtime Sink of nsq_to_http's topic. accept() samples each message
(--sample: the others are FIN'd unsent, as Go does), then hands messages to the senders
through a queue (holding at most max-in-flight messages, all nsqd sends) that a busy
sender takes from without yielding. A sender builds the request (nsqtools.httpclient.
requests: Go's bytes), sends it on the pool and settles the message in its delivery:
done on success (GET: 200; POST: any 2xx), else requeued with backoff, that message (or
batch of them) alone.
The FINs go out together: those of up to half the in-flight window, or of 2 ms (one write per
batch nsqd sent, not one per message; measured: a fifth more messages per second). A
429 or 503 with Retry-After is requeued for that long (capped by the consumer's max
requeue delay), so nsqd holds the message while the endpoint asked for quiet. Which
endpoint: the --mode's host policy (nsqtools.hostpolicy), or every endpoint in turn
with `all` (a failure at any requeues the message: Go's behaviour). Redirects are
followed where the message arrives whole, else are a failure (nsqtools.httpclient.
redirects); each redirect is logged once, not per message. An answer's body is read
and dropped (the pool keeps only its start).

With batch_size > 1 (--post only), up to that many messages of a delivery go as one
POST, their bodies each followed by a newline (NDJSON when they are JSON), settled
together.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import trio

from nsqtools.hostpolicy import make_policy
from nsqtools.httpclient.pool import ConnectionPool, HttpFailure, HttpResponse, retry_after_seconds
from nsqtools.httpclient.redirects import MAX_REDIRECTS, redirection
from nsqtools.httpclient.requests import GetTarget, PostTarget, UrlGet
from nsqtools.protocol.frames import Message
from nsqtools.relays.status import RelayStatus
from nsqtools.runtime.sinks import Delivery

log = logging.getLogger("nsqtools.http")

Target = PostTarget | GetTarget

# Host policies: how long a failing endpoint is left alone, at first and at most
# (go-hostpool's defaults, as Go's nsq_to_http uses them).
RETRY_DELAY = 30.0
MAX_RETRY_DELAY = 900.0
LATENCY_SAMPLES = 10_000  # kept for the summary's percentiles (a uniform sample)
# The FINs of successes are gathered for up to this long, or until half the messages
# that can be out at once succeeded: one send to nsqd for many, while the rest of the
# in-flight window keeps the senders busy.
FIN_GATHER_SECONDS = 0.002
TOLD_AT_MOST = 1000  # distinct lines logged once (redirects), remembered at a time


@dataclass(frozen=True)
class HttpRelaySettings:
    targets: Sequence[Target]
    mode: str  # round-robin, hostpool, epsilon-greedy or all
    senders: int  # -n
    sample: float  # fraction of messages sent (the others FIN'd unsent)
    connect_timeout: float
    request_timeout: float
    max_requeue_delay: float  # the consumer's: a Retry-After longer than this is cut
    max_in_flight: int  # the consumer's
    batch_size: int = 1


@dataclass
class HttpCounts:
    """What the run did, for the summary at exit."""

    sent: int = 0  # messages an endpoint accepted
    failed: int = 0  # messages requeued after a failed request
    sampled_out: int = 0
    latencies: list[float] = field(default_factory=list)  # a sample of them
    _seen: int = 0

    def add_latency(self, seconds: float) -> None:
        """Keep a uniform sample of every latency (reservoir sampling)."""
        self._seen += 1
        if len(self.latencies) < LATENCY_SAMPLES:
            self.latencies.append(seconds)
            return
        slot = random.randrange(self._seen)
        if slot < LATENCY_SAMPLES:
            self.latencies[slot] = seconds


@dataclass(slots=True)
class _Work:
    """Messages of one delivery sent as one request (one message unless batching)."""

    delivery: Delivery
    messages: list[Message]


class _WorkQueue:
    """Work for the senders. put() never waits: what accept() hands over is bounded by
    the consumer's max-in-flight. take() hands a sender the next work without yielding
    when there is some (it yields at once on its socket; a memory channel's receive
    yields too, a task switch per message), else waits for some; None once closed and
    empty."""

    def __init__(self) -> None:
        self._items: collections.deque[_Work] = collections.deque()
        self._idle = trio.lowlevel.ParkingLot()  # senders waiting for work
        self._closed = False

    def put(self, work: _Work) -> None:
        self._items.append(work)
        self._idle.unpark()

    def close(self) -> None:
        self._closed = True
        self._idle.unpark_all()

    async def take(self) -> _Work | None:
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._items:
            if self._closed:
                return None
            await self._idle.park()
        return self._items.popleft()


class HttpRelay:
    """The runtime Sink of nsq_to_http: messages to HTTP endpoints, -n at a time."""

    tick_interval: float | None = None

    def __init__(
        self,
        settings: HttpRelaySettings,
        status: RelayStatus,
        counts: HttpCounts,
        report: Callable[[str], None] = log.warning,
    ) -> None:
        self.settings = settings
        self.status = status
        self.counts = counts
        self.report = report
        # One address: every mode sends there; no policy to ask, on the hot path.
        self._policy = (
            make_policy(settings.mode, len(settings.targets), RETRY_DELAY, MAX_RETRY_DELAY)
            if len(settings.targets) > 1
            else None
        )
        # The senders, one request each, bound its connections.
        self._pool = ConnectionPool(settings.connect_timeout, settings.request_timeout)
        self._work = _WorkQueue()
        self._unanswered: dict[Delivery, int] = {}  # messages not yet FIN'd or requeued
        self._all_answered = trio.Event()
        self._all_answered.set()
        self._succeeded: list[tuple[_Work, float]] = []  # to FIN, with how long each took
        self._succeeded_messages = 0
        self._fin_due = trio.Event()
        # Half of what can be out at once: a round of FINs full, the other half still out.
        self._gather = min(settings.senders * settings.batch_size, settings.max_in_flight) // 2
        self._told: set[str] = set()  # lines logged once
        self._nursery_manager = trio.open_nursery()

    async def __aenter__(self) -> Self:
        await self._pool.__aenter__()  # its watch first: the senders' requests need it
        nursery = await self._nursery_manager.__aenter__()
        nursery.start_soon(self._serve)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._work.close()
        try:
            await self._nursery_manager.__aexit__(exc_type, exc, traceback)
        finally:
            await self._pool.__aexit__(None, None, None)

    # -- the runtime's side ------------------------------------------------------------

    async def accept(self, delivery: Delivery) -> None:
        """Hand the delivery's messages to the senders (at once: the channel holds them)."""
        messages = self._sampled(delivery)
        if not messages:
            return  # every one sampled out, and so done
        self._unanswered[delivery] = len(messages)
        self._all_answered = trio.Event()
        size = self.settings.batch_size
        for start in range(0, len(messages), size):
            self._work.put(_Work(delivery, messages[start : start + size]))

    async def flush(self) -> None:
        """Wait until every message accepted is FIN'd or requeued."""
        await self._all_answered.wait()

    tick = flush

    def _sampled(self, delivery: Delivery) -> list[Message]:
        messages = delivery.messages
        sample = self.settings.sample
        if sample >= 1.0:
            return messages
        kept: list[Message] = []
        dropped: list[Message] = []
        for message in messages:
            (kept if random.random() <= sample else dropped).append(message)
        if dropped:
            delivery.done(dropped)  # Go's: FIN'd, never sent
            self.counts.sampled_out += len(dropped)
        return kept

    # -- the senders -------------------------------------------------------------------

    async def _serve(self) -> None:
        """The senders until the work channel closes, with the task that FINs for them."""
        async with trio.open_nursery() as finishing:
            finishing.start_soon(self._fin_every_round)
            async with trio.open_nursery() as senders:
                for _ in range(self.settings.senders):
                    senders.start_soon(self._sender)
            self._fin_succeeded()
            finishing.cancel_scope.cancel()

    async def _fin_every_round(self) -> None:
        """A round starts at its first success and ends FIN_GATHER_SECONDS later, or
        once half the window succeeded (the senders wake this task at those two only,
        not at each success)."""
        while True:
            await self._fin_due.wait()
            self._fin_due = trio.Event()
            if self._succeeded_messages < self._gather:
                with trio.move_on_after(FIN_GATHER_SECONDS):
                    await self._fin_due.wait()
                self._fin_due = trio.Event()
            await trio.sleep(0)  # let the senders answered in this round add theirs
            self._fin_succeeded()

    def _fin_succeeded(self) -> None:
        succeeded, self._succeeded = self._succeeded, []
        self._succeeded_messages = 0
        by_delivery: dict[Delivery, list[Message]] = {}
        for work, _ in succeeded:
            by_delivery.setdefault(work.delivery, []).extend(work.messages)
        for delivery, messages in by_delivery.items():
            delivery.done(messages)  # one FIN write for each
        for work, took in succeeded:
            count = len(work.messages)
            self.counts.sent += count
            self.counts.add_latency(took)
            self.status.aggregate.record(took, count)
            self._answered(work)

    async def _sender(self) -> None:
        while (work := await self._work.take()) is not None:
            await self._send(work)

    async def _send(self, work: _Work) -> None:
        """One request to the endpoint the mode picks (every one, in turn, with "all")."""
        body = self._body(work.messages)
        started = trio.current_time()
        for index in self._targets():
            target = self.settings.targets[index]
            sent_at = trio.current_time()
            failure, retry_after = await self._request(target, body)
            took = trio.current_time() - sent_at
            self._mark(index, failure, took)
            if failure:
                self._requeue(work, failure, retry_after)
                return
            self.status.record_destination(target.address, took, len(work.messages))
            self.status.count_sent(work.delivery.topic, target.address, len(work.messages))
        self._succeeded.append((work, trio.current_time() - started))
        self._succeeded_messages += len(work.messages)
        if len(self._succeeded) == 1 or self._succeeded_messages >= self._gather:
            self._fin_due.set()  # a round starts, or is full

    def _body(self, messages: list[Message]) -> bytes:
        if len(messages) == 1 and self.settings.batch_size == 1:
            return messages[0].body
        return b"".join(message.body + b"\n" for message in messages)

    def _targets(self) -> list[int]:
        if self._policy is None:
            return list(range(len(self.settings.targets)))
        return [self._policy.pick(trio.current_time())]

    async def _request(self, target: Target, body: bytes) -> tuple[str, float | None]:
        """Why the request failed ("" if it did not), and the Retry-After it came with.
        Redirects are followed where the message arrives whole (httpclient.redirects)."""
        sent_to: Target | UrlGet = target
        for _ in range(MAX_REDIRECTS + 1):
            try:
                response = await self._pool.send(sent_to.request(body))
            except HttpFailure as error:
                return str(error), None
            if _accepted(sent_to, response):
                return "", None
            redirect = redirection(sent_to, body, response.status, response.header("location"))
            if redirect is None:
                break
            self._tell_once(redirect.why)
            if redirect.target is None:
                break
            sent_to = redirect.target
        else:
            return f"{target.address}: stopped after {MAX_REDIRECTS} redirects", None
        reason = f"{target.address}: got status code {response.status}"
        if response.status in (429, 503):
            value = response.header("retry-after")
            return reason, None if value is None else retry_after_seconds(value)
        return reason, None

    def _tell_once(self, line: str) -> None:
        """Log a line the first time only (a redirect, the same for many messages)."""
        if line not in self._told:
            if len(self._told) == TOLD_AT_MOST:
                self._told.clear()  # bounded memory; an old line may be logged again
            self._told.add(line)
            self.report(line)

    def _mark(self, index: int, failure: str, took: float) -> None:
        if self._policy is None:
            return
        now = trio.current_time()
        if failure:
            self._policy.mark_failed(index, now)
        else:
            self._policy.mark_success(index, now, took)

    def _requeue(self, work: _Work, failure: str, retry_after: float | None) -> None:
        count = len(work.messages)
        self.counts.failed += count
        if retry_after is not None:
            delay = min(retry_after, self.settings.max_requeue_delay)
            self.report(f"{failure}: {count} requeued for {delay:g}s (Retry-After)")
            work.delivery.requeue(work.messages, delay=delay)
        else:
            self.report(f"{failure}: {count} requeued")
            work.delivery.requeue(work.messages)
        self._answered(work)

    def _answered(self, work: _Work) -> None:
        delivery = work.delivery
        left = self._unanswered[delivery] - len(work.messages)
        if left:
            self._unanswered[delivery] = left
            return
        del self._unanswered[delivery]
        if not self._unanswered:
            self._all_answered.set()


def _accepted(target: Target | UrlGet, response: HttpResponse) -> bool:
    """Go's rule: a GET succeeds on 200 only, a POST on any 2xx."""
    if isinstance(target, PostTarget):
        return 200 <= response.status < 300
    return response.status == 200
