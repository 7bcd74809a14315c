"""Calls sent from blocking code, on the standard library's sockets: for a program
that must start fast (nsq_stat, nsq topics), without trio or httpx to import.

One request per connection (`Connection: close`), plain HTTP only (an https:// address
is refused in one line). A plain answer (nsqtools.httpclient.answers: one
Content-Length) is read here; h11, imported only then, reads any other (chunked, when
an answer outgrows Go's buffer) and judges a bad one, as the trio pool does. The
connect timeout bounds the connection, the request timeout each send and receive after
it, as httpx's do. The answer is read, and a failure told, by nsqtools.httpapi.call as
for httpx. Several calls at once run on daemon threads: a signal that ends the program
never waits for a slow server.

    client = BlockingClient(connect_timeout=2.0, request_timeout=5.0)
    stats = client.send(nsqd.stats("127.0.0.1:4151", topic="events"))
    both = client.send_each([nsqd.stats("127.0.0.1:4151"), nsqd.stats("127.0.0.1:4251")])
    result = client.run(plan)  # a plan (nsqtools.httpapi.plans), its batches on threads
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import SplitResult, urlencode, urlsplit

from nsqtools.httpapi.call import (
    ACCEPT_V1,
    Call,
    HttpAnswer,
    HttpApiError,
    read_answer,
    request_failure,
    timed_out,
)
from nsqtools.httpapi.plans import Plan
from nsqtools.httpclient.answers import simple_head
from nsqtools.wrong_port import ANSWER_START, not_http

T = TypeVar("T")
R = TypeVar("R")

_READ_SIZE = 64 * 1024
# What may go wrong in an exchange besides a timeout: the OS's errors, an answer that
# cannot be read (h11's errors are raised as ValueError), an address that cannot be (a
# bad port, a name IDNA refuses).
_FAILURES = (OSError, ValueError)


class BlockingClient:
    """Sends Calls with these timeouts (seconds) and extra headers (a User-Agent)."""

    def __init__(
        self, connect_timeout: float, request_timeout: float, headers: Mapping[str, str] = {}
    ) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.headers = {**headers, **ACCEPT_V1, "Connection": "close"}

    def send(self, call: Call[T], *, timeout_option: str = "") -> T:
        """The call's typed answer; an HttpApiError for any failure, as send() does."""
        return read_answer(call, self._exchange(call, timeout_option))

    def send_each(
        self, calls: Sequence[Call[T]], *, timeout_option: str = ""
    ) -> list[T | HttpApiError]:
        """Every call at once, each on a thread; each one's answer or failure, in order."""
        results: dict[int, T | HttpApiError] = {}

        def send_one(index: int) -> None:
            try:
                results[index] = self.send(calls[index], timeout_option=timeout_option)
            except HttpApiError as error:
                results[index] = error

        threads = [
            threading.Thread(target=send_one, args=(index,), daemon=True)
            for index in range(len(calls))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [results[index] for index in range(len(calls))]

    def run(self, plan: Plan[R]) -> R:
        """What the plan makes of the answers to its batches, each sent with send_each."""
        try:
            batch = next(plan)
            while True:
                batch = plan.send(self.send_each(batch.calls, timeout_option=batch.timeout_option))
        except StopIteration as finished:
            result: R = finished.value
            return result

    def _exchange(self, call: Call[Any], timeout_option: str) -> HttpAnswer:
        url = urlsplit(call.url)
        if url.scheme != "http":
            raise call.error(f"{url.scheme}: not supported here, plain HTTP only")
        connecting = True
        try:
            with _connect(url, self.connect_timeout) as connection:
                connecting = False
                connection.settimeout(self.request_timeout)
                return self._ask(connection, call, url)
        except TimeoutError as exc:
            raise timed_out(call, timeout_option) from exc
        except _FAILURES as exc:
            raise request_failure(call, exc, connecting=connecting) from exc

    def _ask(self, connection: socket.socket, call: Call[Any], url: SplitResult) -> HttpAnswer:
        """Send the request on the connection and read the whole answer."""
        connection.sendall(self._request(call, url))
        first = _answer_start(connection)
        if not first:
            raise ConnectionError("server disconnected without sending a response")
        if (wrong_port := not_http(first)) is not None:
            raise call.error(f"the address is {wrong_port}")
        head = simple_head(first)
        if head is None:
            return _read_with_h11(connection, call, [first])
        received = [first]
        end = head.size + head.content_length
        length = len(first)
        while length < end:
            data = connection.recv(_READ_SIZE)
            received.append(data)
            if not data:  # cut short: h11 says how, as for any bad answer
                return _read_with_h11(connection, call, received)
            length += len(data)
        body = b"".join(received)[head.size : end]
        return HttpAnswer(head.status, head.reason.decode("ascii", "ignore"), body)

    def _request(self, call: Call[Any], url: SplitResult) -> bytes:
        """The request's bytes: head and body."""
        target = f"{url.path}?{urlencode(call.params)}" if call.params else url.path
        headers = {"Host": url.netloc, **self.headers}
        if call.method != "GET":
            headers["Content-Length"] = str(len(call.content or b""))
        lines = [f"{call.method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
        head = "".join(line + "\r\n" for line in lines) + "\r\n"
        return head.encode("ascii") + (call.content or b"")


def _read_with_h11(connection: socket.socket, call: Call[Any], received: list[bytes]) -> HttpAnswer:
    """The answer read by h11 from what `received` holds (an empty last part: the
    connection ended) and from the connection; a bad one is a ValueError."""
    import h11

    http = h11.Connection(h11.CLIENT)
    http.send(h11.Request(method=call.method, target="/", headers=[("Host", "-")]))
    http.send(h11.EndOfMessage())
    for data in received:
        http.receive_data(data)
    head: h11.Response | None = None
    body = bytearray()
    try:
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                data = connection.recv(_READ_SIZE)
                if not data and head is None:
                    raise ConnectionError("server disconnected without sending a response")
                http.receive_data(data)
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                reason = head.reason.decode("ascii", "ignore")
                return HttpAnswer(head.status_code, reason, bytes(body))
    except h11.ProtocolError as exc:
        raise ValueError(str(exc)) from exc


def _answer_start(connection: socket.socket) -> bytes:
    """The answer's first ANSWER_START bytes (fewer if it ends sooner), which say what
    answered when it is not HTTP: NSQ's servers write theirs in pieces."""
    start = b""
    while len(start) < ANSWER_START:
        data = connection.recv(_READ_SIZE)
        if not data:
            break
        start += data
    return start


def _connect(url: SplitResult, timeout: float) -> socket.socket:
    """A connection to the URL's host and port. An ASCII host goes as bytes, which
    getaddrinfo takes as they are: given a str, it would load the IDNA codec (~2 ms of
    start-up) to encode it the same."""
    host = url.hostname or ""
    address = (host.encode() if host.isascii() else host, url.port or 80)
    return socket.create_connection(address, timeout)  # type: ignore[arg-type]  # bytes too
