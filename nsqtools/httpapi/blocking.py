"""Calls sent from blocking code, on the standard library's sockets and h11: for a
program that must start fast (nsq_stat), without trio or httpx to import.

One request per connection (`Connection: close`), plain HTTP only (an https:// address
is refused in one line); h11 reads any framing nsqd uses (Content-Length, or chunked
when an answer outgrows Go's buffer). The connect timeout bounds the connection, the
request timeout each send and receive after it, as httpx's do. The answer is read,
and a failure told, by nsqtools.httpapi.call as for httpx. Several calls at once run
on daemon threads: a signal that ends the program never waits for a slow server.

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

import h11

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
from nsqtools.protocol.wrong_port import ANSWER_START, not_http

T = TypeVar("T")
R = TypeVar("R")

_READ_SIZE = 64 * 1024
# What may go wrong in an exchange besides a timeout: the OS's errors, an answer h11
# cannot read, an address that cannot be (a bad port, a name IDNA refuses).
_FAILURES = (OSError, h11.ProtocolError, ValueError)


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
        http = h11.Connection(h11.CLIENT)
        connection.sendall(self._request(http, call, url))
        start = _answer_start(connection)
        if not start:
            raise ConnectionError("server disconnected without sending a response")
        if (wrong_port := not_http(start)) is not None:
            raise call.error(f"the address is {wrong_port}")
        http.receive_data(start)
        head: h11.Response | None = None
        body = bytearray()
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
                return HttpAnswer(
                    head.status_code, head.reason.decode("ascii", "ignore"), bytes(body)
                )

    def _request(self, http: h11.Connection, call: Call[Any], url: SplitResult) -> bytes:
        """The request's bytes: head, body, end."""
        target = f"{url.path}?{urlencode(call.params)}" if call.params else url.path
        headers = {"Host": url.netloc, **self.headers}
        if call.method != "GET":
            headers["Content-Length"] = str(len(call.content or b""))
        events: list[h11.Event] = [
            h11.Request(method=call.method, target=target, headers=list(headers.items()))
        ]
        if call.content:
            events.append(h11.Data(data=call.content))
        events.append(h11.EndOfMessage())
        return b"".join(http.send(event) or b"" for event in events)


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
