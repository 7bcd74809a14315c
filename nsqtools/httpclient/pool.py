"""Sending requests over kept-alive HTTP/1.1 connections: one pool for many tasks.

Owns the connections (trio TCP streams, TLS via trio.SSLStream for https), reading the
answers, the timeouts, and saying in one line why a request failed (HttpFailure).
Requests come ready-made as bytes (nsqtools.httpclient.requests). A plain answer (one
Content-Length, nsqtools.httpclient.answers) is read without h11, which costs most of
a request's CPU; h11 reads any other, fed the same bytes, told of the request by a
stand-in of the same method, as only the method changes how an answer is framed.

    async with ConnectionPool(connect_timeout=2, request_timeout=20) as pool:
        response = await pool.send(target.request(body))   # from any number of tasks
        response.status, response.header("retry-after"), response.body

An answer's body is read to its end (so that the connection can be kept alive, as Go's
nsq_to_http reads and discards it) but only its first KEPT_BODY_BYTES are kept: what an
endpoint sends back costs bounded memory however long it is (a long answer is read by
h11, a block at a time).

Per origin, an idle connection is reused (the most recently used first), else a new one
is dialled; as with Go's http.Transport, the request is not tied to its dial: it takes
whichever comes first, a connection another request is done with or its own dial's,
and a dial that lost serves the next request waiting, or waits idle. (A request tied to
its dial waits out a slow one while connections come free: against a server with a
small accept backlog, nsq_to_http's burst of 100 dials took minutes for 500 messages,
with requeues; 0.5 s now.) So the callers bound the connections: with N requests at
once, N in use and fewer than N more idle (the dials that lost).
A connection is closed, not reused, when either side said `Connection: close`, after
any failure, and when its answer was not read to the end or came with bytes after it.
`connect_timeout` bounds the TCP connect, `tls_handshake_timeout` the TLS handshake
(Go's 10s), `request_timeout` everything (waiting for a connection, its own dial included,
sending, the whole answer), as Go's http.Client.Timeout does. The exchange itself (a
request sent, its answer read) is timed by one task of the pool's, not by a cancel scope
per request, which cost a sixth of nsq_to_http's throughput (measured): each tenth of
the timeout (a second at most) it closes the socket of every exchange past its
deadline, which fails that exchange at once. So a request may run up to a tenth over
its timeout; the rare waits (for a turn, for a new connection) have a scope each.

A server may close a kept-alive connection while it is idle; Go's Transport notices
that in the background. Here the request finds out: when a reused connection ends
before any byte of the answer, the request is sent once more on a new connection.
"""

from __future__ import annotations

import math
import ssl
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import NamedTuple, Self

import h11
import trio

from nsqtools.durations import format_duration
from nsqtools.errors import NsqError, describe_connect_failure
from nsqtools.httpclient.answers import SimpleHead, simple_head
from nsqtools.httpclient.requests import HttpOrigin, Request
from nsqtools.wrong_port import ANSWER_START, not_http

_RECEIVE_SIZE = 65536
# How often exchanges past their deadline are looked for: a tenth of the request
# timeout, at most this often and at least this rarely (seconds).
_WATCH_EVERY_AT_MOST = 1.0
_WATCH_EVERY_AT_LEAST = 0.01
# The start of an answer's body kept in HttpResponse.body: enough to quote in a log line.
KEPT_BODY_BYTES = 65536
_END = h11.EndOfMessage()
# What h11 is told was sent, by method: the real head and body are sent as given.
_STAND_INS = {
    method: h11.Request(method=method, target="/", headers=[("Host", "-")])
    for method in ("GET", "POST")
}


class HttpFailure(NsqError):
    """A request got no usable answer; str() is one line: method, origin, why."""

    def __init__(self, request: Request, reason: str) -> None:
        super().__init__(f"{request.method} {origin_url(request.origin)}: {reason}")
        self.reason = reason


class HttpResponse(NamedTuple):
    """An answer, read to its end."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]  # names in lower case, as h11 gives them
    body: bytes  # its first KEPT_BODY_BYTES: the rest was read and dropped

    def header(self, name: str) -> str | None:
        """The first value of a header (any case of `name`), or None."""
        wanted = name.lower().encode("ascii")
        for key, value in self.headers:
            if key == wanted:
                return value.decode("latin-1")
        return None


def origin_url(origin: HttpOrigin) -> str:
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    return f"{origin.scheme}://{host}:{origin.port}"


def retry_after_seconds(value: str, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delay-seconds or an HTTP-date, the past
    meaning 0), None when it is neither."""
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class _NoAnswer(Exception):
    """The connection ended before any byte of the answer."""


class _NotHttp(Exception):
    """The answer is NSQ's TCP protocol: the port is nsqd's or nsqlookupd's TCP one."""


class _Stale(Exception):
    """A reused connection failed before any byte of the answer: the server may have
    closed it while it was idle, so the request is worth sending on a new one."""


class Connection:
    """One HTTP/1.1 connection over a trio stream: sends a request, reads its answer.

    A plain answer (answers.simple_head) whose body is kept whole is read here; any
    other is read by h11, fed every byte received for it so far."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        # A plain TCP connection is used through its socket: SocketStream's checks and
        # error translation cost a tenth of a request (measured), and the pool reads
        # OSError as well as BrokenResourceError.
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.reused = False
        self.answer_started = False
        # When the exchange under way must be over (trio's clock), and whether the
        # pool's watch closed the connection because it was not.
        self.deadline = math.inf
        self.timed_out = False
        # The last answer ended cleanly: both sides keep the connection alive and
        # nothing came after the answer.
        self.clean_end = False

    async def exchange(self, request: Request) -> HttpResponse:
        """Send the request and read the whole answer."""
        self.answer_started = False
        self.clean_end = False
        await self._send_all(request.data)
        first = await self._receive_some()
        if not first:
            raise _NoAnswer
        self.answer_started = True
        # Any status line is longer; NSQ's TCP servers write theirs in pieces.
        while len(first) < ANSWER_START and (more := await self._receive_some()):
            first += more
        if (wrong_port := not_http(first[:ANSWER_START])) is not None:
            raise _NotHttp(wrong_port)
        head = simple_head(first)
        if head is None or head.content_length > KEPT_BODY_BYTES:
            return await self._read_with_h11(request, [first])
        return await self._read_plain(request, head, first)

    async def _read_plain(self, request: Request, head: SimpleHead, first: bytes) -> HttpResponse:
        """The rest of a plain answer: up to its Content-Length's end."""
        received = [first]
        end = head.size + head.content_length
        length = len(first)
        while length < end:
            data = await self._receive_some()
            received.append(data)
            if not data:
                # Cut short: h11 says how, as for any bad answer.
                return await self._read_with_h11(request, received)
            length += len(data)
        # Bytes after the answer (length > end) are no answer to anything we sent.
        self.clean_end = head.keep_alive and length == end
        return HttpResponse(head.status, head.headers, b"".join(received)[head.size : end])

    async def _read_with_h11(self, request: Request, received: list[bytes]) -> HttpResponse:
        """The answer read by h11 from what `received` holds (an empty last part: the
        connection ended) and from the stream."""
        answer = h11.Connection(h11.CLIENT)
        answer.send(_STAND_INS[request.method])
        answer.send(_END)
        for data in received:
            answer.receive_data(data)
        status, headers = await self._head(answer)
        body = await self._body(answer)
        self.clean_end = (
            answer.our_state is h11.DONE
            and answer.their_state is h11.DONE
            and not answer.trailing_data[0]
        )
        return HttpResponse(status, headers, body)

    async def _head(self, answer: h11.Connection) -> tuple[int, list[tuple[bytes, bytes]]]:
        while True:
            event = answer.next_event()
            if event is h11.NEED_DATA:
                answer.receive_data(await self._receive_some())
            elif type(event) is h11.Response:
                return event.status_code, list(event.headers)
            elif type(event) is not h11.InformationalResponse:
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")

    async def _body(self, answer: h11.Connection) -> bytes:
        """The body's first KEPT_BODY_BYTES; the rest is read and dropped as it comes."""
        kept = bytearray()
        while True:
            event = answer.next_event()
            if type(event) is h11.Data:
                kept += event.data[: KEPT_BODY_BYTES - len(kept)]
            elif event is h11.NEED_DATA:
                answer.receive_data(await self._receive_some())
            elif type(event) is h11.EndOfMessage:
                return bytes(kept)
            else:
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")

    async def _send_all(self, data: bytes) -> None:
        if self._socket is None:
            await self.stream.send_all(data)
            return
        view = memoryview(data)
        while view:
            view = view[await self._socket.send(view) :]

    async def _receive_some(self) -> bytes:
        """What came next; b"" when the connection ended."""
        if self._socket is not None:
            return await self._socket.recv(_RECEIVE_SIZE)
        return bytes(await self.stream.receive_some(_RECEIVE_SIZE))

    def time_out(self) -> None:
        """Close the socket under the exchange under way: the task waiting on it fails
        at once (trio wakes it with ClosedResourceError). No await: the watch's task
        must not wait for a stream another task is using."""
        self.timed_out = True
        stream = self.stream
        while isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        if isinstance(stream, trio.SocketStream):
            stream.socket.close()

    def reusable(self, request: Request) -> bool:
        """Both sides done, nobody asked to close, nothing unread after the answer, not
        closed by the pool's watch."""
        if request.closes or not self.clean_end or self.timed_out:
            return False
        self.reused = True
        return True


class _Waiting:
    """A request waiting for a connection: its own dial's, or one freed first."""

    __slots__ = ("connection", "failure", "ready")

    def __init__(self) -> None:
        self.connection: Connection | None = None
        self.failure: HttpFailure | None = None  # its own dial's, when that failed
        self.ready = trio.Event()


class _OriginConnections:
    """The idle connections to one origin and the requests waiting for one."""

    def __init__(self) -> None:
        self.idle: list[Connection] = []
        self.waiting: deque[_Waiting] = deque()  # the longest waiting first

    def give(self, connection: Connection) -> None:
        """A connection free for a request: to the one waiting longest, else idle."""
        if self.waiting:
            waiting = self.waiting.popleft()
            waiting.connection = connection
            waiting.ready.set()
        else:
            self.idle.append(connection)

    def stop_waiting(self, waiting: _Waiting) -> None:
        """The request no longer waits: out of the line, and what it was given passed on."""
        if waiting.connection is not None:
            self.give(waiting.connection)
        elif waiting in self.waiting:
            self.waiting.remove(waiting)


class ConnectionPool(trio.abc.AsyncResource):
    """Kept-alive connections per origin, shared by any number of tasks; used in `async
    with`, which runs the task that times the exchanges out."""

    def __init__(
        self,
        connect_timeout: float = 2.0,
        request_timeout: float = 20.0,
        ssl_context: ssl.SSLContext | None = None,
        tls_handshake_timeout: float = 10.0,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._tls_handshake_timeout = tls_handshake_timeout
        self._ssl_context = ssl_context
        self._origins: defaultdict[HttpOrigin, _OriginConnections] = defaultdict(_OriginConnections)
        self._exchanging: set[Connection] = set()  # each with its deadline
        self._watch_manager = trio.open_nursery()
        self._watch: trio.Nursery | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        self._watch = await self._watch_manager.__aenter__()
        self._watch.start_soon(self._time_out_exchanges)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._watch is not None
        self._watch.cancel_scope.cancel()
        try:
            # The block's own exception goes on as it is, not in an exception group.
            await self._watch_manager.__aexit__(None, None, None)
        finally:
            await self.aclose()

    async def send(self, request: Request) -> HttpResponse:
        """The whole answer to `request`, or HttpFailure."""
        if self._watch is None:
            raise RuntimeError("a ConnectionPool sends only inside `async with` it")
        deadline = trio.current_time() + self._request_timeout
        return await self._send_on(self._origins[request.origin], request, deadline)

    def _timed_out(self, request: Request) -> HttpFailure:
        after = format_duration(self._request_timeout)
        return HttpFailure(request, f"no complete answer within {after}")

    async def _send_on(
        self, origin: _OriginConnections, request: Request, deadline: float
    ) -> HttpResponse:
        if origin.idle:
            connection = origin.idle.pop()
        else:
            connection = await self._first_free(origin, request, deadline)
        try:
            response = await self._exchange(connection, request, deadline)
        except _Stale:
            connection = await self._open(request, deadline)
            response = await self._exchange(connection, request, deadline)
        if not self._closed and connection.reusable(request):
            origin.give(connection)
        else:
            with trio.move_on_at(deadline):  # cancelled, aclose still closes
                await connection.stream.aclose()
        return response

    async def _exchange(
        self, connection: Connection, request: Request, deadline: float
    ) -> HttpResponse:
        """The answer; else the connection is closed and HttpFailure (or _Stale) raised."""
        connection.deadline = deadline
        connection.timed_out = False
        self._exchanging.add(connection)
        try:
            return await connection.exchange(request)
        except BaseException as error:
            await trio.aclose_forcefully(connection.stream)
            if connection.timed_out and isinstance(error, Exception):
                raise self._timed_out(request) from None
            reason = _failure_reason(error)
            if reason is None:
                raise
            if connection.reused and not connection.answer_started:
                raise _Stale from error
            raise HttpFailure(request, reason) from error
        finally:
            self._exchanging.discard(connection)

    async def _time_out_exchanges(self) -> None:
        """The pool's watch: closes the connection of every exchange past its deadline."""
        every = self._request_timeout / 10
        every = min(max(every, _WATCH_EVERY_AT_LEAST), _WATCH_EVERY_AT_MOST)
        while True:
            await trio.sleep(every)
            now = trio.current_time()
            for connection in [c for c in self._exchanging if c.deadline <= now]:
                connection.time_out()

    async def _first_free(
        self, origin: _OriginConnections, request: Request, deadline: float
    ) -> Connection:
        """The first connection free for the request: its own dial's, or one another
        request is done with before that dial ends."""
        assert self._watch is not None
        waiting = _Waiting()
        origin.waiting.append(waiting)
        self._watch.start_soon(self._dial, origin, request, deadline, waiting)
        try:
            with trio.move_on_at(deadline):
                await waiting.ready.wait()
        except BaseException:
            origin.stop_waiting(waiting)
            raise
        if waiting.connection is not None:
            return waiting.connection
        if waiting.failure is not None:
            raise waiting.failure
        origin.stop_waiting(waiting)
        raise self._timed_out(request)

    async def _dial(
        self, origin: _OriginConnections, request: Request, deadline: float, waiting: _Waiting
    ) -> None:
        """A new connection for the request waiting longest (or idle); a failure is told
        to the request the dial is for, if it still waits."""
        try:
            connection = await self._open(request, deadline)
        except HttpFailure as failure:
            if waiting in origin.waiting:
                origin.waiting.remove(waiting)
                waiting.failure = failure
                waiting.ready.set()
            return
        if self._closed:
            await trio.aclose_forcefully(connection.stream)
        else:
            origin.give(connection)

    async def _open(self, request: Request, deadline: float) -> Connection:
        """A new connection, opened by the request's deadline."""
        with trio.move_on_at(deadline):
            return await self._connect(request)
        raise self._timed_out(request)

    async def _connect(self, request: Request) -> Connection:
        origin = request.origin
        try:
            with trio.fail_after(self._connect_timeout):
                stream: trio.abc.Stream = await trio.open_tcp_stream(origin.host, origin.port)
        except trio.TooSlowError:
            after = format_duration(self._connect_timeout)
            raise HttpFailure(request, f"cannot connect: timed out after {after}") from None
        except OSError as error:
            reason = describe_connect_failure(error)
            raise HttpFailure(request, f"cannot connect: {reason}") from error
        if origin.scheme == "https":
            stream = await self._start_tls(request, stream)
        return Connection(stream)

    async def _start_tls(
        self, request: Request, tcp: trio.abc.Stream
    ) -> trio.SSLStream[trio.abc.Stream]:
        if self._ssl_context is None:
            # Made at the first https dial and kept: a context loads every CA certificate
            # (~30 ms of CPU), and serves any number of connections.
            self._ssl_context = ssl.create_default_context()
        tls = trio.SSLStream(
            tcp, self._ssl_context, server_hostname=request.origin.host, https_compatible=True
        )
        try:
            with trio.fail_after(self._tls_handshake_timeout):
                await tls.do_handshake()
        except BaseException as error:
            await trio.aclose_forcefully(tls)
            if isinstance(error, trio.TooSlowError):
                after = format_duration(self._tls_handshake_timeout)
                raise HttpFailure(request, f"TLS handshake timed out after {after}") from None
            if isinstance(error, trio.BrokenResourceError):
                reason = _tls_failure(error.__cause__)
                raise HttpFailure(request, f"TLS handshake failed: {reason}") from error
            raise
        return tls

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        for origin in self._origins.values():
            while origin.idle:
                await trio.aclose_forcefully(origin.idle.pop().stream)


def _failure_reason(error: BaseException) -> str | None:
    """One line for what went wrong mid-request; None for what is no HTTP failure
    (a cancellation, a bug), which goes on as it is."""
    if isinstance(error, _NoAnswer):
        return "the server closed the connection without answering"
    if isinstance(error, _NotHttp):
        return f"the address is {error}"
    if isinstance(error, h11.RemoteProtocolError):
        return f"bad answer: {error}"
    if isinstance(error, trio.BrokenResourceError):
        return f"connection lost: {_cause(error)}"
    if isinstance(error, OSError):
        return f"connection lost: {describe_connect_failure(error)}"
    return None


def _tls_failure(error: BaseException | None) -> str:
    """ "certificate verify failed: self-signed certificate", not the ssl module's
    "[SSL: CERTIFICATE_VERIFY_FAILED] ... (_ssl.c:1006)"."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {error.verify_message}"
    if isinstance(error, ssl.SSLError) and error.reason:
        return error.reason.lower().replace("_", " ")
    return "the connection closed" if error is None else describe_connect_failure(error)


def _cause(error: BaseException) -> str:
    """Why trio says a stream broke: its cause, in plain words."""
    cause = error.__cause__
    if cause is None:
        return str(error) or "closed"
    return describe_connect_failure(cause)
