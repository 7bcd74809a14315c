"""The keep-alive pool against the recording test server: reuse, the connection limit,
and each way a request can fail (nsqtools.testing.webserver fakes the HTTP server, as
the failures are what a real server cannot be made to do on demand)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterator
from email.utils import formatdate

import pytest
import trio

from nsqtools.httpclient.pool import (
    KEPT_BODY_BYTES,
    Connection,
    ConnectionPool,
    HttpFailure,
    HttpResponse,
    retry_after_seconds,
)
from nsqtools.httpclient.requests import GetTarget, PostTarget, Request
from nsqtools.testing import TlsFiles
from nsqtools.testing.webserver import Answer, SilentListener, WebServer


@pytest.fixture
def server() -> Iterator[WebServer]:
    with WebServer() as web:
        yield web


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """For held answers: set at teardown whatever the outcome."""
    event = threading.Event()
    yield event
    event.set()


async def post(pool: ConnectionPool, server: WebServer, body: bytes = b"m") -> HttpResponse:
    return await pool.send(PostTarget(f"{server.url}/in").request(body))


async def failure(pool: ConnectionPool, server: WebServer) -> str:
    with pytest.raises(HttpFailure) as raised:
        await post(pool, server)
    return raised.value.reason


async def test_one_connection_serves_requests_one_after_another(server: WebServer) -> None:
    async with ConnectionPool() as pool:
        for index in range(5):
            response = await post(pool, server, b"%d" % index)
            assert (response.status, response.body) == (200, b"ok\n")
    assert [request.body for request in server.received] == [b"0", b"1", b"2", b"3", b"4"]
    assert server.connections == 1


async def test_each_sender_may_have_its_connection(
    server: WebServer, release: threading.Event
) -> None:
    server.script(*[Answer(hold=release)] * 6)

    async def send(pool: ConnectionPool) -> None:
        assert (await post(pool, server)).status == 200

    async with ConnectionPool() as pool:
        async with trio.open_nursery() as tasks:
            for _ in range(6):
                tasks.start_soon(send, pool)
            await trio.to_thread.run_sync(server.wait_for_requests, 6)
            assert server.connections == 6  # all in flight at once
            release.set()
        await send(pool)  # and kept alive afterwards
    assert server.connections == 6


class HeldDials(ConnectionPool):
    """A pool whose dials after the first wait for `dials_released` before connecting."""

    def __init__(self, request_timeout: float = 20.0) -> None:
        super().__init__(request_timeout=request_timeout)
        self.dials = 0
        self.dials_released = trio.Event()

    async def _connect(self, request: Request) -> Connection:
        self.dials += 1
        if self.dials > 1:
            await self.dials_released.wait()
        return await super()._connect(request)

    def idle(self) -> int:
        return sum(len(origin.idle) for origin in self._origins.values())


async def until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.001)


async def test_a_request_takes_a_connection_freed_before_its_own_dial_ends(
    server: WebServer, release: threading.Event
) -> None:
    """As Go's http.Transport: a request is not tied to its dial; the dial that lost
    waits idle for the next request."""
    server.script(Answer(hold=release))
    answered: list[int] = []

    async def send(pool: ConnectionPool) -> None:
        answered.append((await post(pool, server)).status)

    async with HeldDials() as pool, trio.open_nursery() as tasks:
        tasks.start_soon(send, pool)  # the first connection, its answer held
        await trio.to_thread.run_sync(server.wait_for_requests, 1)
        tasks.start_soon(send, pool)  # dials, held
        await until(lambda: pool.dials == 2)
        release.set()
        await until(lambda: len(answered) == 2)  # both on the first connection
        assert (server.connections, pool.idle()) == (1, 1)
        pool.dials_released.set()
        await until(lambda: pool.idle() == 2)
        for _ in range(2):
            tasks.start_soon(send, pool)
    assert answered == [200] * 4
    assert (pool.dials, server.connections) == (2, 2)


async def test_the_request_timeout_covers_waiting_for_a_connection(
    server: WebServer, release: threading.Event
) -> None:
    server.script(Answer(), Answer(hold=release))
    async with HeldDials(request_timeout=0.3) as pool:
        assert (await post(pool, server)).status == 200
        async with trio.open_nursery() as tasks:
            tasks.start_soon(failure, pool, server)  # holds the connection until it times out
            await trio.to_thread.run_sync(server.wait_for_requests, 2)
            assert await failure(pool, server) == "no complete answer within 300ms"
    assert (len(server.received), server.connections, pool.dials) == (2, 1, 2)


async def test_statuses_come_back_as_answers_with_their_headers(server: WebServer) -> None:
    server.script(
        Answer(status=500, body=b"broken"),
        Answer(status=429, headers=(("Retry-After", "7"),), body=b""),
        Answer(status=503, headers=(("Retry-After", formatdate(usegmt=True)),)),
    )
    async with ConnectionPool() as pool:
        broken, slow_down, unavailable = [await post(pool, server) for _ in range(3)]
    assert (broken.status, broken.body) == (500, b"broken")
    assert (slow_down.status, slow_down.header("retry-after")) == (429, "7")
    assert unavailable.status == 503
    retry_after = unavailable.header("Retry-After")
    assert retry_after is not None
    seconds = retry_after_seconds(retry_after)
    assert seconds is not None
    assert 0 <= seconds <= 1
    assert server.connections == 1


def test_retry_after_is_seconds_or_an_http_date() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds(" 120 ") == 120
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == 30
    assert retry_after_seconds(formatdate(now - 30, usegmt=True), now=now) == 0
    assert retry_after_seconds("-1") is None
    assert retry_after_seconds("soon") is None


async def test_a_get_sends_the_escaped_body(server: WebServer) -> None:
    async with ConnectionPool() as pool:
        await pool.send(GetTarget(f"{server.url}/?data=%s").request("a b&é".encode()))
    assert server.received[0].request_line == b"GET /?data=a+b%26%C3%A9 HTTP/1.1"


async def test_refused() -> None:
    with WebServer() as gone:
        pass
    async with ConnectionPool() as pool:
        reason = await failure(pool, gone)
    assert reason == "cannot connect: connection refused"


async def test_connect_timeout() -> None:
    with SilentListener() as silent:
        target = PostTarget(f"http://{silent.address}/")
        async with ConnectionPool(connect_timeout=0.2) as pool:
            with pytest.raises(HttpFailure) as raised:
                await pool.send(target.request(b"m"))
    assert (
        str(raised.value) == f"POST http://{silent.address}: cannot connect: timed out after 200ms"
    )


async def test_no_answer_within_the_request_timeout(
    server: WebServer, release: threading.Event
) -> None:
    server.script(Answer(hold=release))
    async with ConnectionPool(request_timeout=0.3) as pool:
        assert await failure(pool, server) == "no complete answer within 300ms"
        release.set()
        # The late answer is never read as the next one's: that connection is gone.
        assert (await post(pool, server)).status == 200
    assert server.connections == 2


async def test_no_answer_over_tls_within_the_request_timeout(
    tls_files: TlsFiles, release: threading.Event
) -> None:
    """The pool's watch closes the socket under the TLS stream: the exchange fails as a
    plain one does, and the next request has a new connection."""
    with WebServer(tls=tls_files) as server:
        server.script(Answer(hold=release))
        trusted = ssl.create_default_context(cafile=str(tls_files.ca))
        async with ConnectionPool(request_timeout=0.3, ssl_context=trusted) as pool:
            assert await failure(pool, server) == "no complete answer within 300ms"
            release.set()
            assert (await post(pool, server)).status == 200
    assert server.connections == 2


async def test_a_pool_sends_only_inside_async_with(server: WebServer) -> None:
    with pytest.raises(RuntimeError, match="inside `async with`"):
        await post(ConnectionPool(), server)


async def test_reset_instead_of_an_answer(server: WebServer) -> None:
    server.script(Answer(reset=True))
    async with ConnectionPool() as pool:
        assert await failure(pool, server) == "connection lost: connection reset by peer"


@pytest.mark.parametrize("fault", [Answer(reset=True), Answer(close=True)])
async def test_a_reused_connection_that_died_idle_is_replaced(
    server: WebServer, fault: Answer
) -> None:
    """The server closed (or reset) the kept-alive connection: the request goes again,
    once, on a new one."""
    after_answering = fault if fault.close else Answer()
    server.script(after_answering, *([] if fault.close else [fault]))
    async with ConnectionPool() as pool:
        assert (await post(pool, server, b"1")).status == 200
        assert (await post(pool, server, b"2")).status == 200
    assert server.connections == 2
    assert server.received[-1].body == b"2"


async def test_the_server_closed_without_answering_a_new_connection(server: WebServer) -> None:
    server.script(Answer(raw=b"", close=True))
    async with ConnectionPool() as pool:
        reason = await failure(pool, server)
    assert reason == "the server closed the connection without answering"


async def test_a_body_shorter_than_its_content_length(server: WebServer) -> None:
    server.script(Answer(body=b"abc", content_length=10, close=True))
    async with ConnectionPool() as pool:
        reason = await failure(pool, server)
    assert reason.startswith("bad answer: peer closed connection without sending complete")


async def test_bytes_beyond_the_content_length_end_the_connection(server: WebServer) -> None:
    server.script(Answer(body=b"abc", content_length=1))
    async with ConnectionPool() as pool:
        assert (await post(pool, server)).body == b"a"
        assert (await post(pool, server)).body == b"ok\n"
    assert server.connections == 2


LONG_BODY = b"start" + b"x" * (3 * KEPT_BODY_BYTES)


def chunked(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


@pytest.mark.parametrize(
    "long_answer",
    [Answer(body=LONG_BODY[:5], filler=len(LONG_BODY) - 5), Answer(raw=chunked(LONG_BODY))],
    ids=["content-length", "chunked"],
)
async def test_a_long_body_is_kept_in_part_and_the_connection_reused(
    server: WebServer, long_answer: Answer
) -> None:
    """Only the start of a long answer is kept; the rest is read off the connection,
    which then carries the next request."""
    server.script(long_answer)
    async with ConnectionPool() as pool:
        assert (await post(pool, server)).body == LONG_BODY[:KEPT_BODY_BYTES]
        assert (await post(pool, server)).body == b"ok\n"
    assert server.connections == 1


async def test_no_http_in_the_answer(server: WebServer) -> None:
    server.script(Answer(raw=b"SSH-2.0-OpenSSH\r\n\r\n"))
    async with ConnectionPool() as pool:
        reason = await failure(pool, server)
    assert reason.startswith("bad answer: ")


async def test_connection_close_from_either_side_ends_the_connection(server: WebServer) -> None:
    server.script(Answer(headers=(("Connection", "close"),)))
    closing = PostTarget(f"{server.url}/", headers={"Connection": "close"})
    async with ConnectionPool() as pool:
        await post(pool, server)
        await pool.send(closing.request(b"m"))
        await post(pool, server)
    assert [request.connection for request in server.received] == [0, 1, 2]


async def test_https(tls_files: TlsFiles) -> None:
    with WebServer(tls=tls_files) as server:
        trusted = ssl.create_default_context(cafile=str(tls_files.ca))
        async with ConnectionPool(ssl_context=trusted) as pool:
            assert (await post(pool, server)).status == 200
            assert (await post(pool, server)).status == 200
        async with ConnectionPool() as pool:
            reason = await failure(pool, server)
    assert server.connections == 2
    assert reason.startswith("TLS handshake failed: ")
    assert "certificate verify failed" in reason
