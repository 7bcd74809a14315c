"""--metrics-address: a consuming tool's counters served to Prometheus, from the tool's
own trio event loop, and the families the runtime counts.

serving_metrics(address, collect) binds the address before its block starts (an address
in use is a MetricsAddressError: one line, exit 1, before anything is consumed), serves
for the block, and stops with it. Each scrape reads the counters as they are then
(each collect()) and writes them in Prometheus's text format (nsqtools.exposition): GET
/metrics is answered 200, any other request 404, junk 400, each on a connection of
its own, closed after the answer. The server never holds the consumers back: a
connection has REQUEST_SECONDS for the whole exchange, a request head at most
MAX_HEAD bytes, at most MAX_CONNECTIONS are served at once (others are closed at once),
and whatever goes wrong with one connection ends that connection only.

run_families() are what every consuming tool counts (RunCounters and each topic's
TopicProgress): messages received, FIN'd, requeued, output (`written`, for the tools
that write), given up by reason; in flight and the age of the oldest one the sink
holds unsettled. The relays add what each destination took (relays.status).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from nsqtools.addresses import AddressError, join_host_port, split_bind_address
from nsqtools.errors import NsqError, single_errors
from nsqtools.exposition import CONTENT_TYPE, Family, counter, exposition, gauge
from nsqtools.runtime.deadletters import PAST_MAX_ATTEMPTS, REFUSED

if TYPE_CHECKING:
    from nsqtools.runtime.consuming import RunCounters, TopicProgress

log = logging.getLogger("nsqtools.metrics")

Collect = Callable[[], Iterable[Family]]

REQUEST_SECONDS = 5.0  # to read a request and write its answer, whatever the scraper does
MAX_HEAD = 8192  # bytes of request line and headers
MAX_CONNECTIONS = 16  # served at once; more are closed unanswered
REASONS = {PAST_MAX_ATTEMPTS: "max_attempts", REFUSED: "refused"}  # label values


class MetricsAddressError(NsqError):
    """--metrics-address cannot be listened on (in use, not local, not host:port)."""


@asynccontextmanager
async def serving_metrics(address: str | None, *collects: Collect) -> AsyncIterator[None]:
    """Serve the families of every collect() at http://address/metrics for the block
    (nothing when address is None); raises MetricsAddressError before the block if it
    cannot."""
    if address is None:
        yield
        return
    listeners = await _listen(address)
    with single_errors():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, listeners, collects)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()


async def _listen(address: str) -> list[trio.SocketListener]:
    try:
        host, port = split_bind_address(address)
        listeners = await trio.open_tcp_listeners(port, host=host or None)
    except (AddressError, OSError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise MetricsAddressError(f"--metrics-address {address}: {reason}") from None
    bound = listeners[0].socket.getsockname()
    log.info("metrics on http://%s/metrics", join_host_port(bound[0], bound[1]))
    return listeners


async def _serve(listeners: list[trio.SocketListener], collects: tuple[Collect, ...]) -> None:
    serving = 0

    async def answer(stream: trio.SocketStream) -> None:
        nonlocal serving
        if serving >= MAX_CONNECTIONS:
            await stream.aclose()
            return
        serving += 1
        try:
            with trio.move_on_after(REQUEST_SECONDS):
                await _answer(stream, collects)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the scraper went away: its loss
        finally:
            serving -= 1
            await trio.aclose_forcefully(stream)

    await trio.serve_listeners(answer, listeners)


async def _answer(stream: trio.SocketStream, collects: tuple[Collect, ...]) -> None:
    head = await _read_head(stream)
    if head is None:
        await stream.send_all(_response(400, b"400 Bad Request\n"))
        return
    method, target = head
    if method == b"GET" and target.partition(b"?")[0] == b"/metrics":
        body = exposition(family for collect in collects for family in collect()).encode()
        await stream.send_all(_response(200, body, CONTENT_TYPE))
    else:
        await stream.send_all(_response(404, b"404 page not found\n"))


async def _read_head(stream: trio.SocketStream) -> tuple[bytes, bytes] | None:
    """The request's method and target; None if what came is no HTTP/1 request head
    (or one longer than MAX_HEAD)."""
    received = b""
    while b"\r\n\r\n" not in received:
        if len(received) > MAX_HEAD:
            return None
        data = await stream.receive_some(MAX_HEAD)
        if not data:
            return None
        received += data
    words = received.partition(b"\r\n")[0].split(b" ")
    if len(words) != 3 or not words[2].startswith(b"HTTP/1."):
        return None
    return words[0], words[1]


_REASON_PHRASES = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def _response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASON_PHRASES[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def run_families(counters: RunCounters, channel: str, output: str | None = None) -> list[Family]:
    """What the run counts, per topic (labels topic and channel): `output` names the
    output's verb ("written") when the tool writes its messages itself (nsq_tail,
    nsq_to_file); a relay counts what it sent per destination instead."""
    now = trio.current_time()
    topics = sorted(counters.topics.items())

    def per_topic(value: Callable[[TopicProgress], float]) -> list[tuple[dict[str, str], float]]:
        return [({"topic": name, "channel": channel}, value(progress)) for name, progress in topics]

    families = [
        counter(
            "nsqtools_messages_received_total",
            "Messages received from nsqd (each attempt).",
            per_topic(lambda progress: progress.consumer.received),
        ),
        counter(
            "nsqtools_messages_finished_total",
            "Messages FIN'd: output, dropped on purpose (--sample, JSON filters) or kept "
            "as dead letters.",
            per_topic(lambda progress: progress.consumer.finished),
        ),
        counter(
            "nsqtools_messages_requeued_total",
            "Messages REQ'd: their output failed, or they came past -n or the stop.",
            per_topic(lambda progress: progress.consumer.requeued),
        ),
        counter(
            "nsqtools_messages_given_up_total",
            "Messages given up (max_attempts: past it; refused: by their destination), "
            "kept as dead letters or logged, then FIN'd.",
            [
                ({"channel": channel, "reason": label}, counters.given_up[reason])
                for reason, label in REASONS.items()
            ],
        ),
        gauge(
            "nsqtools_messages_in_flight",
            "Messages received from the connected nsqds and not answered yet (FIN, REQ).",
            per_topic(lambda progress: progress.consumer.in_flight),
        ),
        gauge(
            "nsqtools_oldest_unanswered_message_age_seconds",
            "Seconds since the oldest message the output holds unanswered was handed to "
            "it (0: none).",
            per_topic(lambda progress: progress.oldest_unsettled_age(now)),
        ),
    ]
    if output is not None:
        families.insert(
            1,
            counter(
                f"nsqtools_messages_{output}_total",
                f"Messages {output} to the output (a file: and synced), then FIN'd.",
                per_topic(lambda progress: progress.output),
            ),
        )
    return families
