"""A recording HTTP/1.1 server on 127.0.0.1 that can be told how to fail, for the tests
of every tool that sends HTTP requests (nsq_to_http and its client).

Raw sockets, one thread per connection, so that it can do what a well-behaved server
never does: each request is recorded byte for byte (ReceivedRequest: the head and the body as
they arrived, and which connection carried it), then answered as the next scripted
Answer says (in order of arrival; when none is left, `default`, which may be changed
at any time; the requests answered 2xx are kept apart in `accepted`): any status and
headers (a 429 with Retry-After), a body of any length streamed from a small
block (hundreds of MB without holding them), a held answer (past a client's timeout, until
released or the server stops), a reset instead of an answer, a Content-Length that
does not match the body, bytes that are no HTTP, or closing the connection after
answering. Connections are kept alive otherwise. With TlsFiles, it serves https.

SilentListener is an address whose connects hang (a listener whose queue is full and
never accepts), for connect timeouts.

    with WebServer() as server:
        server.script(Answer(status=500), Answer(reset=True))
        ... send requests to server.url ...
        server.wait_for_requests(2)
        server.received[0].raw, server.received[0].connection
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from nsqtools.testing.cluster import TlsFiles, wait_until
from nsqtools.testing.lifetime import StartsAndStops

_HEAD_END = b"\r\n\r\n"
_WAIT = 10.0
_FILLER_BLOCK = 1 << 20


@dataclass(frozen=True)
class Answer:
    """How to answer one request."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b"ok\n"
    # This many more bytes of body after `body`, sent a block at a time, never held
    # whole in memory (and counted in the Content-Length).
    filler: int = 0
    # The Content-Length to claim, when it should not be the body's length.
    content_length: int | None = None
    # Close the connection after answering, without saying so (as a server closing an
    # idle connection does); add ("Connection", "close") to `headers` to say it.
    close: bool = False
    # Reset the connection (RST) instead of answering.
    reset: bool = False
    # Hold the answer until this is set (or the server stops, which closes it unanswered).
    hold: threading.Event | None = None
    # Send these bytes instead of a well-formed answer.
    raw: bytes | None = None

    def encode(self) -> bytes:
        if self.raw is not None:
            return self.raw
        length = (
            len(self.body) + self.filler if self.content_length is None else self.content_length
        )
        lines = [f"HTTP/1.1 {self.status} Status {self.status}", f"Content-Length: {length}"]
        lines += [f"{key}: {value}" for key, value in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as it arrived."""

    head: bytes  # request line and headers, up to and including the empty line
    body: bytes
    connection: int  # which accepted connection carried it, from 0

    @property
    def raw(self) -> bytes:
        return self.head + self.body

    @property
    def request_line(self) -> bytes:
        return self.head.split(b"\r\n", 1)[0]

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode("ascii")
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.lower() == wanted:
                return value.strip().decode("latin-1")
        return None


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    answers: list[Answer] = field(default_factory=list)
    received: list[ReceivedRequest] = field(default_factory=list)
    accepted: list[ReceivedRequest] = field(default_factory=list)  # answered with a 2xx status
    sockets: list[socket.socket] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)


class WebServer(StartsAndStops):
    def __init__(
        self,
        default: Answer | None = None,
        tls: TlsFiles | None = None,
        backlog: int | None = None,  # of connections not yet accepted (the system's default)
    ) -> None:
        self.default = default or Answer()
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._tls.load_cert_chain(tls.cert, tls.key)
        self._state = _State()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self._threads: list[threading.Thread] = []
        self.address = _address_of(self._listener)

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self.address}"

    @property
    def received(self) -> list[ReceivedRequest]:
        with self._state.lock:
            return list(self._state.received)

    @property
    def accepted(self) -> list[ReceivedRequest]:
        """The requests answered with a 2xx status, so far."""
        with self._state.lock:
            return list(self._state.accepted)

    @property
    def connections(self) -> int:
        """How many connections were accepted so far."""
        with self._state.lock:
            return len(self._state.sockets)

    def script(self, *answers: Answer) -> None:
        """Answer the next requests so, in order of arrival."""
        with self._state.lock:
            self._state.answers.extend(answers)

    def wait_for_requests(self, count: int, timeout: float = _WAIT) -> list[ReceivedRequest]:
        wait_until(lambda: len(self.received) >= count, timeout, f"{count} requests")
        return self.received

    def start(self) -> None:
        self._spawn(self._accept)

    def stop(self) -> None:
        self._state.stopped.set()
        _close(self._listener)
        with self._state.lock:
            sockets = list(self._state.sockets)
        for connection in sockets:
            _close(connection)
        # The accepting thread first: once it has ended, no connection thread starts.
        if self._threads:
            self._threads[0].join()
        for thread in self._threads[1:]:
            thread.join()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # the listener was closed: the server stops
                return
            with self._state.lock:
                number = len(self._state.sockets)
                self._state.sockets.append(connection)
            if self._state.stopped.is_set():
                _close(connection)
            self._spawn(self._serve, connection, number)

    def _serve(self, connection: socket.socket, number: int) -> None:
        buffer = b""
        try:
            if self._tls is not None:
                connection = self._tls.wrap_socket(connection, server_side=True)
                with self._state.lock:  # what stop() closes: the plain one is detached
                    self._state.sockets[number] = connection
            while True:
                request, buffer = _read_request(connection, buffer, number)
                if request is None:
                    return
                answer = self._record(request)
                if not self._answer(connection, answer):
                    return
        except OSError:  # the client went away, or stop() closed the socket
            return
        finally:
            _close(connection)

    def _record(self, request: ReceivedRequest) -> Answer:
        with self._state.lock:
            self._state.received.append(request)
            answer = self._state.answers.pop(0) if self._state.answers else self.default
            if 200 <= answer.status < 300 and not (answer.reset or answer.raw):
                self._state.accepted.append(request)
            return answer

    def _answer(self, connection: socket.socket, answer: Answer) -> bool:
        """Answer; False when the connection is closed, or to be."""
        if answer.hold is not None:
            while not answer.hold.wait(0.05):
                if self._state.stopped.is_set():
                    return False
        if answer.reset:
            # A zero linger time makes close() send RST, not FIN.
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()
            return False
        connection.sendall(answer.encode())
        _send_filler(connection, answer.filler)
        return not answer.close


def _read_request(
    connection: socket.socket, buffer: bytes, number: int
) -> tuple[ReceivedRequest | None, bytes]:
    """The next request (Content-Length bodies only: what the clients send), or None at
    end of stream."""
    while _HEAD_END not in buffer:
        chunk = connection.recv(65536)
        if not chunk:
            return None, buffer
        buffer += chunk
    head, _, buffer = buffer.partition(_HEAD_END)
    head += _HEAD_END
    length = int(ReceivedRequest(head, b"", number).header("Content-Length") or 0)
    while len(buffer) < length:
        chunk = connection.recv(65536)
        if not chunk:
            return None, buffer
        buffer += chunk
    return ReceivedRequest(head, buffer[:length], number), buffer[length:]


def _send_filler(connection: socket.socket, size: int) -> None:
    block = b"x" * _FILLER_BLOCK
    while size > 0:
        connection.sendall(block[:size])
        size -= len(block)


def _address_of(listener: socket.socket) -> str:
    """host:port, kept: it is still named in messages once the listener is closed."""
    host, port = listener.getsockname()[:2]
    return f"{host}:{port}"


def _close(sock: socket.socket) -> None:
    """Close, and wake a thread blocked in accept() or recv() on it."""
    with contextlib.suppress(OSError):  # not connected, or closed already
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class SilentListener(StartsAndStops):
    """A listening socket with a full accept queue: connecting to `address` hangs, as
    to a host that drops packets (Linux drops the SYN when the queue is full)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        self._fillers: list[socket.socket] = []
        self.address = _address_of(self._listener)

    def start(self) -> None:
        """Fill the queue: with a backlog of 0 it holds one connection; two to be sure."""
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(self._listener.getsockname())
            self._fillers.append(filler)

    def stop(self) -> None:
        for sock in [*self._fillers, self._listener]:
            sock.close()
