"""Sending one request to an nsqd or nsqlookupd HTTP API and reading its answer.

A Call says everything about one request (server kind, address, method, path, query,
body) and how to read a successful answer into a typed value; nsqtools.httpapi.nsqd
and .lookupd build them. send() sends a Call on an httpx.AsyncClient, send_sync() on an
httpx.Client (the test harness runs in threads), nsqtools.httpapi.blocking on a plain
socket; the exchange is theirs, the rest is shared: an HttpAnswer (status, reason, body)
is read by read_answer(), a failed exchange told by timed_out() or request_failure().
httpx is imported by the two that use it only: the blocking path starts without it.

Addresses are "host:port" or "http(s)://host:port". Every request asks for
`Accept: application/vnd.nsq; version=1.0`; both answer shapes are read (the bare
JSON of v1.x and the older `{"status_code", "status_txt", "data"}` wrapper). Timeouts,
TLS verification and connection limits come from the caller's client. Every failure,
whatever the server sent, is an HttpApiError whose message is one short line naming
the server, its address, the method and the path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar
from urllib.parse import urlsplit

from nsqtools.errors import NsqError
from nsqtools.httpapi.json_shape import ShapeError, one_line, typed

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")

ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}
TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"

_WRAPPER_KEYS = frozenset({"status_code", "status_txt", "data"})
# How long the second look at an answer httpx could not read may take.
_PROBE_SECONDS = 2.0


class HttpApiError(NsqError):
    """An nsqd or nsqlookupd could not be asked, or gave an answer that cannot be used.

    `message` is the server's own error text ("TOPIC_NOT_FOUND"), "" when it gave none.
    """

    def __init__(self, server: str, address: str, reason: str, message: str = "") -> None:
        super().__init__(f"{server} {address}: {reason}")
        self.server = server
        self.address = address
        self.reason = reason
        self.message = message


class HttpAnswer(NamedTuple):
    """What a server answered, whatever carried it."""

    status: int
    reason: str  # the status line's reason phrase
    body: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to an NSQ HTTP API, and how to read a successful answer."""

    server: str  # "nsqd" or "nsqlookupd": names the server in error messages
    address: str
    method: str
    path: str
    read: Callable[[Any], T]  # the unwrapped JSON document -> the typed answer
    params: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    # False for calls whose success carries no document (admin calls, /pub).
    answers_json: bool = True
    # What a TOPIC_NOT_FOUND answer means when it is no failure (/lookup: no producers).
    if_topic_not_found: Callable[[], T] | None = None

    @property
    def url(self) -> str:
        """http://host:port/path for "host:port"; a URL given with its scheme is kept."""
        if self.address.startswith(("http://", "https://")):
            return f"{self.address.rstrip('/')}{self.path}"
        return f"http://{self.address}{self.path}"

    def error(self, reason: str, message: str = "") -> HttpApiError:
        return HttpApiError(
            self.server, self.address, f"{self.method} {self.path}: {reason}", message
        )


def get(server: str, address: str, path: str, read: Callable[[Any], T], **params: str) -> Call[T]:
    """A GET whose answer is a JSON document, read by `read`."""
    return Call(server, address, "GET", path, read, params)


def post(
    server: str, address: str, path: str, params: Mapping[str, str], content: bytes | None = None
) -> Call[None]:
    """A POST whose success carries no document (admin calls, /pub)."""
    return Call(server, address, "POST", path, _no_document, params, content, answers_json=False)


def _no_document(_: Any) -> None:
    return None


async def send(client: httpx.AsyncClient, call: Call[T], *, timeout_option: str = "") -> T:
    """Send the call and read its answer; `timeout_option` names the setting of the
    client's timeout in the message of a timed-out request."""
    import httpx

    try:
        with _request_errors(call, timeout_option):
            response = await client.send(_build(client, call))
    except HttpApiError as error:
        if isinstance(error.__cause__, httpx.RemoteProtocolError):
            wrong_port = await _what_answered(call.url)
            if wrong_port is not None:
                raise call.error(f"the address is {wrong_port}") from error
        raise
    return read_answer(call, _answer_of(response))


async def _what_answered(url: str) -> str | None:
    """What an answer httpx could not read came from, when it was NSQ's TCP protocol:
    asked again on a connection of our own, whose first bytes httpx does not show."""
    import anyio

    from nsqtools.wrong_port import ANSWER_START, not_http

    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return None
    try:
        with anyio.fail_after(_PROBE_SECONDS):
            async with await anyio.connect_tcp(parts.hostname, parts.port or 80) as stream:
                await stream.send(b"GET / HTTP/1.0\r\n\r\n")
                start = b""
                while len(start) < ANSWER_START:
                    start += await stream.receive(ANSWER_START - len(start))
    except anyio.EndOfStream:
        pass  # what came is all there is
    except (OSError, TimeoutError, anyio.BrokenResourceError):
        return None
    return not_http(start)


def send_sync(client: httpx.Client, call: Call[T], *, timeout_option: str = "") -> T:
    """send() for synchronous code: the same request, the same reading, the same errors."""
    with _request_errors(call, timeout_option):
        response = client.send(_build(client, call))
    return read_answer(call, _answer_of(response))


def _build(client: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
    return client.build_request(
        call.method, call.url, params=dict(call.params), content=call.content, headers=ACCEPT_V1
    )


def _answer_of(response: httpx.Response) -> HttpAnswer:
    return HttpAnswer(response.status_code, response.reason_phrase, response.content)


@contextmanager
def _request_errors(call: Call[Any], timeout_option: str) -> Iterator[None]:
    """httpx's failures to send or to receive, as one-line HttpApiErrors."""
    import httpx

    try:
        yield
    except httpx.TimeoutException as exc:
        raise timed_out(call, timeout_option) from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise request_failure(call, exc, connecting=isinstance(exc, httpx.ConnectError)) from exc


def read_answer(call: Call[T], answer: HttpAnswer) -> T:
    """The typed answer of a success; an HttpApiError for anything else."""
    try:
        status, message, data = _read(call, answer)
        if 200 <= status < 300:
            return call.read(data)
    except ShapeError as exc:
        raise call.error(f"invalid answer: {exc}") from exc
    if message == TOPIC_NOT_FOUND and call.if_topic_not_found is not None:
        return call.if_topic_not_found()
    raise call.error(f"HTTP {status} {one_line(message)}".rstrip(), message)


def _read(call: Call[Any], answer: HttpAnswer) -> tuple[int, str, Any]:
    """(status, message, data) from either answer shape; the wrapper's status wins."""
    if answer.is_success and not call.answers_json:
        return answer.status, "", None
    try:
        document = json.loads(answer.body)
    except RecursionError as exc:  # `[[[[...` nested deeper than the parser's stack
        return _unreadable(answer, "JSON nested too deeply", exc)
    except ValueError as exc:
        return _unreadable(answer, "not JSON", exc)
    if isinstance(document, dict) and {"status_code", "data"} <= document.keys() <= _WRAPPER_KEYS:
        status_txt = str(document.get("status_txt", ""))
        return typed(document, "status_code", int), status_txt, document["data"]
    message = document.get("message") if isinstance(document, dict) else None
    reason = message if isinstance(message, str) else answer.reason
    return answer.status, reason, document


def _unreadable(answer: HttpAnswer, reason: str, cause: Exception) -> tuple[int, str, Any]:
    """A body that is no JSON: a bad answer on success, else the status says enough."""
    if answer.is_success:
        raise ShapeError(reason) from cause
    return answer.status, answer.reason, None


def timed_out(call: Call[Any], timeout_option: str) -> HttpApiError:
    """A timed-out exchange, naming the setting its timeout came from when there is one."""
    hint = f" ({timeout_option})" if timeout_option else ""
    return call.error(f"timed out{hint}")


def request_failure(call: Call[Any], exc: Exception, *, connecting: bool) -> HttpApiError:
    """Any other failed exchange as one line: "connection refused" when the OS said so,
    else what went wrong, after "cannot connect: " when no connection was made."""
    if any(isinstance(cause, ConnectionRefusedError) for cause in _causes(exc)):
        return call.error("connection refused")
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return call.error(f"cannot connect: {detail}" if connecting else detail)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what caused it, and so on, following the first of any group."""
    cause: BaseException | None = exc
    while cause is not None:
        yield cause
        if isinstance(cause, BaseExceptionGroup):
            cause = cause.exceptions[0]
        else:
            cause = cause.__cause__ or cause.__context__
