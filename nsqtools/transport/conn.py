"""One connection to nsqd: negotiated (negotiation.py), then a reader and a writer task
that run its protocol.session: the session decides, this moves the bytes.

The reader task hands what it receives to the session and acts on what comes out:
message batches go to a sink that must not block (so a slow application never delays
a heartbeat: RDY bounds what can pile up), answers and refusals to the requests that
were owed them, the NOPs that answer heartbeats to the socket; a fatal error frame
ends the connection. Two heartbeat intervals of silence and the connection is
declared dead. One writer task sends everything queued since its last send; it fails
the connection only when the socket takes nothing for write_timeout while nsqd owes
no answer (a slow link that still moves is not a failure). No RDY policy lives here:
that is the consumer's.
"""

from __future__ import annotations

import array
import fcntl
import logging
import math
import os
import termios
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import ConnectionClosed, NsqError, single_errors
from nsqtools.protocol import Answered, ErrorFrame, MessageBatch, ProtocolError, Refused, Session
from nsqtools.transport.compression import DeflateStream, SnappyStream
from nsqtools.transport.negotiation import (
    RECEIVE_SIZE,
    identify_request,
    negotiate,
    refusal_error,
)

log = logging.getLogger("nsqtools.transport")

# Above this many queued bytes, wait_writable() makes a producer wait for the writer.
WRITE_HIGH_WATER = 4 * 1024 * 1024
# The writer hands the socket at most this much at a time, so that it sees progress.
WRITE_CHUNK = 64 * 1024
# After a write failed because the peer closed or reset the connection, how long the
# reader may take to read what the peer sent before (it ends at the close: at once).
READ_AFTER_WRITE_FAILURE = 1.0

MessageSink = Callable[["Conn", MessageBatch], None]
ErrorSink = Callable[["Conn", ErrorFrame], None]
# Told a request's answer: the response, or the error (an error frame, or the close).
AnswerSink = Callable[[bytes, NsqError | None], None]


class _Pending:
    """A request waiting for its answer: what the session is told it is owed."""

    __slots__ = ("on_answer", "written_by")

    def __init__(self, written_by: int, on_answer: AnswerSink) -> None:
        self.written_by = written_by  # the request is sent once this many bytes are
        self.on_answer = on_answer


class Conn:
    """A negotiated connection. Use open_connection() to get one with its tasks running."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        session: Session[_Pending],
        config: ClientConfig,
        on_messages: MessageSink | None,
        on_error: ErrorSink | None,
    ) -> None:
        self.address = session.address
        self.identify = session.identify
        self.auth = session.auth
        self.error: BaseException | None = None  # why the connection ended, unless we closed it
        self._stream = stream
        self._session = session  # set up already
        self._config = config
        self._on_messages = on_messages
        self._on_error = on_error
        self._outgoing: list[bytes] = []
        self._outgoing_size = 0
        self._sending = False
        self._write_error: BaseException | None = None  # the peer went away under a write
        self._bytes_queued = 0  # every byte ever given to write()
        self._bytes_sent = 0  # every byte the socket has taken
        self._last_progress = 0.0  # when the socket last took bytes, or an answer came
        self._send_scope: trio.CancelScope | None = None  # the send under way
        self._send_began = trio.Event()
        self._moved = trio.Event()  # set when the send under way makes progress
        self._tcp_socket = _tcp_socket(stream)
        # A plain TCP stream's socket, written to directly when nothing is queued.
        self._raw_fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None
        self._writer_wakeup = trio.Event()
        self._progress = trio.Event()  # set (and replaced) after each send, and at close
        self._closed = trio.Event()
        self._tasks = trio.CancelScope()

    # -- writing ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def heartbeats(self) -> int:
        """How many heartbeats nsqd has sent since the set-up."""
        return self._session.heartbeats

    def write(self, data: bytes) -> None:
        """Send bytes now if the socket takes them, else queue them for the writer task;
        never blocks. Raises if the connection closed (or can no longer be written)."""
        if self._closed.is_set() or self._write_error is not None:
            raise self._closed_error()
        self._bytes_queued += len(data)
        if self._raw_fd is not None and not self._outgoing and not self._sending:
            # A FIN sent now, not after a hop through the writer task, lets nsqd refill
            # the in-flight window sooner. Errors are left for the writer to report.
            try:
                sent = os.write(self._raw_fd, data)
            except OSError:
                sent = 0
            self._bytes_sent += sent
            if sent == len(data):
                return
            data = data[sent:]
        self._outgoing.append(data)
        self._outgoing_size += len(data)
        self._writer_wakeup.set()

    def send_request(self, data: bytes, on_answer: AnswerSink) -> None:
        """Send a command that nsqd answers (SUB, PUB, MPUB, DPUB, CLS); never blocks.

        on_answer gets the answer, or the error (NsqErrorResponse for an error frame,
        ConnectionClosed when the connection ends first), called from the reader task in
        the order the requests were sent; it must not block. Raises if closed already.
        """
        self.write(data)
        self._session.expect_answer(_Pending(self._bytes_queued, on_answer))

    async def request(self, data: bytes) -> bytes:
        """send_request(), then wait for the answer: return it, or raise the error."""
        answered = trio.Event()
        answer: list[tuple[bytes, NsqError | None]] = []

        def on_answer(response: bytes, error: NsqError | None) -> None:
            answer.append((response, error))
            answered.set()

        self.send_request(data, on_answer)
        await answered.wait()
        response, error = answer[0]
        if error is not None:
            raise error
        return response

    async def wait_writable(self) -> None:
        """Wait while more than WRITE_HIGH_WATER bytes are queued (producer back-pressure)."""
        while self._outgoing_size > WRITE_HIGH_WATER:
            await self._wait_progress()

    async def flush(self) -> None:
        """Wait until everything queued so far has been handed to the socket."""
        while self._outgoing or self._sending:
            await self._wait_progress()

    async def _wait_progress(self) -> None:
        if self._closed.is_set():
            raise self._closed_error()
        await self._progress.wait()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # -- tasks -----------------------------------------------------------------------

    async def _run(self) -> None:
        with self._tasks:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_loop)
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._watch_sends)

    async def _read_loop(self) -> None:
        # Without heartbeats there is no traffic to expect, so no deadline.
        interval = self._config.heartbeat_interval
        silence_limit = 2 * interval if interval > 0 else math.inf
        try:
            self._dispatch()  # frames that came with the set-up
            # One scope whose deadline moves after every read: cheaper on the hot path
            # than a new timeout scope per read.
            with trio.CancelScope() as watchdog:
                while True:
                    watchdog.deadline = trio.current_time() + silence_limit
                    data = await self._stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        raise ConnectionClosed(f"{self.address} closed the connection")
                    self._session.receive_data(data)
                    self._dispatch()
            raise ConnectionClosed(
                f"{self.address} sent nothing for {format_duration(silence_limit)}, "
                "two heartbeat_intervals: connection presumed dead"
            )
        except trio.ClosedResourceError:
            # aclose() closed the stream while this task was between checkpoints, before
            # the cancellation that comes with it reached here: the end was asked for.
            self._end(None)
        except (trio.BrokenResourceError, OSError, ProtocolError, NsqError) as error:
            self._end(error)

    def _dispatch(self) -> None:
        """Act on what the session made of the bytes received."""
        for event in self._session.next_events():
            if type(event) is MessageBatch:
                assert self._on_messages is not None  # the session refuses messages otherwise
                self._on_messages(self, event)
            elif type(event) is Answered:
                self._answered(event.request, event.data, None)
            elif type(event) is Refused:
                self._refused(event)
            elif type(event) is ErrorFrame:
                self._answer_failed(event)
        if outgoing := self._session.data_to_send():
            self.write(outgoing)

    def _answered(self, request: _Pending, response: bytes, error: NsqError | None) -> None:
        request.on_answer(response, error)
        if self._sending:
            self._note_progress()

    def _refused(self, refused: Refused[_Pending]) -> None:
        error = refusal_error(self.address, refused.frame)
        if refused.request is not None:
            self._answered(refused.request, b"", error)
        else:
            log.error("%s", error)
        if refused.frame.fatal:
            # nsqd closes the connection after a fatal error and reads nothing more: end
            # it now, so requests sent after the one refused fail at once, in order.
            self.error = error
            self._end(error)

    def _answer_failed(self, frame: ErrorFrame) -> None:
        """A FIN, REQ or TOUCH failed: the message timed out or was already answered."""
        if self._on_error is not None:
            self._on_error(self, frame)
        else:
            log.warning("%s: %s", self.address, frame)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._writer_wakeup.wait()
                self._writer_wakeup = trio.Event()
                data = b"".join(self._outgoing)
                self._outgoing.clear()
                self._outgoing_size = 0
                self._sending = True
                await self._send(data)
                self._sending = False
                self._progress.set()
                self._progress = trio.Event()
        except trio.ClosedResourceError:
            self._end(None)  # as in _read_loop: aclose() closed the stream under a send
        except (trio.BrokenResourceError, OSError) as error:
            await self._let_reader_finish(error)
        except (ProtocolError, NsqError) as error:
            self._end(error)

    async def _let_reader_finish(self, error: BaseException) -> None:
        """The peer closed or reset the connection under a write. What it sent before,
        often the error that says why, can still be in the receive buffer: the reader
        ends the connection once it has read that, or this does after a short grace."""
        self._write_error = error
        with trio.move_on_after(READ_AFTER_WRITE_FAILURE):
            await self._closed.wait()
        self._end(error)

    async def _send(self, data: bytes) -> None:
        """Send data a chunk at a time; _watch_sends cancels it if nothing moves.

        As go-nsq's write deadline does for each command: a slow link that still moves,
        however slowly, is not a failure; a socket that takes nothing for write_timeout
        while nsqd owes no answer is.
        """
        view = memoryview(data)
        self._last_progress = trio.current_time()
        with trio.CancelScope() as scope:
            self._send_scope = scope
            self._send_began.set()
            for start in range(0, len(view), WRITE_CHUNK):
                chunk = view[start : start + WRITE_CHUNK]
                await self._stream.send_all(chunk)
                self._bytes_sent += len(chunk)
                self._note_progress()
        self._send_scope = None
        self._moved.set()
        if scope.cancelled_caught:
            limit = format_duration(self._config.write_timeout)
            raise ConnectionClosed(
                f"writing to {self.address} made no progress for {limit} "
                "(raise it with the write_timeout option)"
            )

    async def _watch_sends(self) -> None:
        """Cancel a send once nothing has moved until _write_deadline().

        Moving: a chunk handed to the socket, an answer from nsqd, or the kernel's
        queue of unsent bytes shrinking. The last is what shows a slow link at work:
        the kernel only wakes a blocked writer after half its (megabytes of) send
        buffer has drained, which can take longer than write_timeout.
        """
        while True:
            await self._send_began.wait()
            self._send_began = trio.Event()
            queued = _unsent_bytes(self._tcp_socket)
            while self._send_scope is not None:
                self._moved = trio.Event()
                with trio.move_on_at(self._write_deadline()):
                    await self._moved.wait()
                    continue
                still_queued = _unsent_bytes(self._tcp_socket)
                if still_queued is not None and queued is not None and still_queued < queued:
                    queued = still_queued
                    self._last_progress = trio.current_time()
                elif self._send_scope is not None:
                    self._send_scope.cancel()
                    break

    def _note_progress(self) -> None:
        self._last_progress = trio.current_time()
        self._moved.set()

    def _write_deadline(self) -> float:
        """write_timeout after the last progress; none while nsqd owes an answer to a
        request it has been sent whole: it is busy with that one (an MPUB it fsyncs
        message by message), and the reader's silence limit says whether it is alive."""
        owed = self._session.oldest_owed
        if owed is not None and owed.written_by <= self._bytes_sent:
            return math.inf
        return self._last_progress + self._config.write_timeout

    # -- closing ---------------------------------------------------------------------

    def _closed_error(self) -> ConnectionClosed:
        error = self.error or self._write_error
        if isinstance(error, ConnectionClosed):
            return error
        reason = f": {error}" if error is not None else ""
        return ConnectionClosed(f"connection to {self.address} is closed{reason}")

    def _end(self, error: BaseException | None) -> None:
        """Mark the connection closed, fail what waits on it and stop its tasks."""
        if self._closed.is_set():
            return
        if self.error is None:
            self.error = error
        self._closed.set()
        self._tasks.cancel()
        failure = self._closed_error()
        for request in self._session.close():
            request.on_answer(b"", failure)
        self._progress.set()

    async def aclose(self) -> None:
        """Send what is queued (bounded by write_timeout), then close. Safe twice."""
        try:
            if not self._closed.is_set():
                with trio.move_on_after(self._config.write_timeout):
                    await self.flush()
        except ConnectionClosed:
            pass
        finally:
            self._end(None)
            await trio.aclose_forcefully(self._stream)


@asynccontextmanager
async def open_connection(
    address: str,
    config: ClientConfig,
    *,
    on_messages: MessageSink | None = None,
    on_error: ErrorSink | None = None,
    extend_support: bool = False,
) -> AsyncIterator[Conn]:
    """Connect, negotiate and run the connection's tasks for the body of the block.

    on_messages receives each batch of messages as it arrives (consumers only); it runs
    in the reader task and must not block. on_error receives non-fatal error frames.
    extend_support: identify it to the Youzan fork's nsqd, for an extend topic's SUB.
    """
    request = identify_request(config, extend_support)
    accepts_messages = on_messages is not None
    session: Session[_Pending] = Session(
        address, request, config.auth_secret, accepts_messages=accepts_messages
    )
    stream = await negotiate(session, config)
    conn = Conn(stream, session, config, on_messages, on_error)
    with single_errors():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._run)
            try:
                yield conn
            finally:
                with trio.CancelScope(shield=True):
                    await conn.aclose()


def _tcp_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """The TCP socket under any TLS and compression layers."""
    while not isinstance(stream, trio.SocketStream):
        if isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        elif isinstance(stream, SnappyStream | DeflateStream):
            stream = stream.inner
        else:
            return None
    return stream.socket


def _unsent_bytes(sock: trio.socket.SocketType | None) -> int | None:
    """Bytes the kernel still holds for the socket's peer (SIOCOUTQ); None if unknown."""
    if sock is None or sock.fileno() < 0:  # none, or closed already
        return None
    count = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, count)
    except OSError:
        return None
    return count[0]
