"""nsqlookupd's HTTP API, turned into typed records: which nsqds hold a topic, and more.

This module owns the HTTP side of discovery: building URLs from the addresses users give
("host:port" or "http(s)://host:port"), the `Accept: application/vnd.nsq; version=1.0`
negotiation, reading both answer shapes (the bare JSON of v1.x and the older
`{"status_code", "status_txt", "data"}` wrapper), checking the shape of what came back
(down to ports in range: a record that cannot be dialled is a bad answer), and querying
several nsqlookupds at once so that one being down, or answering junk, never hides the
others.

Timeouts, TLS verification and connection limits come from the caller's
httpx.AsyncClient; nothing here sets its own. A trio cancel scope around a call works too.
Every failure, whatever the server sent, is a DiscoveryError whose message is one short
line naming the nsqlookupd.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import trio

from nsqtools.addresses import join_host_port
from nsqtools.errors import NsqError

T = TypeVar("T")

ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}
TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
# A server's own words in an error message are cut to this many characters: one line.
MAX_QUOTED_REASON = 80

_WRAPPER_KEYS = frozenset({"status_code", "status_txt", "data"})
_JSON_KINDS: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


class DiscoveryError(NsqError):
    """An nsqlookupd could not be asked, or gave an answer that cannot be used."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"nsqlookupd {address}: {reason}")
        self.address = address
        self.reason = reason


class _TopicNotFound(DiscoveryError):
    """nsqlookupd knows no producer of the topic (yet); lookup() turns this into []."""


class _ShapeError(ValueError):
    """Valid JSON, but not the document the endpoint is documented to return."""


@dataclass(frozen=True)
class NsqdNode:
    """One nsqd as nsqlookupd lists it (a topic's producer, or a node)."""

    broadcast_address: str
    hostname: str
    tcp_port: int
    http_port: int
    version: str

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.broadcast_address, self.tcp_port)

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)


async def lookup(client: httpx.AsyncClient, lookupd: str, topic: str) -> list[NsqdNode]:
    """The nsqds producing `topic` (GET /lookup); [] while nsqlookupd knows none."""
    try:
        return await _get(client, lookupd, "/lookup", _producers, {"topic": topic})
    except _TopicNotFound:
        return []


async def lookup_all(
    client: httpx.AsyncClient, lookupds: Sequence[str], topic: str
) -> tuple[list[NsqdNode], list[DiscoveryError]]:
    """Producers of `topic` from every lookupd, merged by tcp_address, and the failures.

    All lookupds are asked at once; the first to list an nsqd (in the order of
    `lookupds`) gives its record, and the result keeps that order.
    """
    answers, errors = await _ask_each(lookupds, lambda address: lookup(client, address, topic))
    merged: dict[str, NsqdNode] = {}
    for node in (node for found in answers for node in found):
        merged.setdefault(node.tcp_address, node)
    return list(merged.values()), errors


async def topics(client: httpx.AsyncClient, lookupd: str) -> list[str]:
    """Every topic the lookupd knows (GET /topics)."""
    return await _get(client, lookupd, "/topics", _strings("topics"))


async def lookup_topics_all(
    client: httpx.AsyncClient, lookupds: Sequence[str]
) -> tuple[list[str], list[DiscoveryError]]:
    """The sorted union of every lookupd's topics, and the failures."""
    answers, errors = await _ask_each(lookupds, lambda address: topics(client, address))
    return sorted({topic for found in answers for topic in found}), errors


async def channels(client: httpx.AsyncClient, lookupd: str, topic: str) -> list[str]:
    """The channels of `topic` the lookupd knows (GET /channels)."""
    return await _get(client, lookupd, "/channels", _strings("channels"), {"topic": topic})


async def nodes(client: httpx.AsyncClient, lookupd: str) -> list[NsqdNode]:
    """Every nsqd registered with the lookupd (GET /nodes)."""
    return await _get(client, lookupd, "/nodes", _producers)


async def _ask_each(
    addresses: Sequence[str], ask: Callable[[str], Awaitable[T]]
) -> tuple[list[T], list[DiscoveryError]]:
    """Ask every address concurrently; answers and failures, each in address order."""
    results: dict[int, T | DiscoveryError] = {}

    async def ask_one(index: int, address: str) -> None:
        try:
            results[index] = await ask(address)
        except DiscoveryError as exc:
            results[index] = exc

    async with trio.open_nursery() as nursery:
        for index, address in enumerate(addresses):
            nursery.start_soon(ask_one, index, address)
    ordered = [results[index] for index in range(len(addresses))]
    errors = [result for result in ordered if isinstance(result, DiscoveryError)]
    return [result for result in ordered if not isinstance(result, DiscoveryError)], errors


async def _get(
    client: httpx.AsyncClient,
    address: str,
    path: str,
    parse: Callable[[Any], T],
    params: dict[str, str] | None = None,
) -> T:
    """GET `path` from `address` and parse the (unwrapped) JSON document it answers."""
    url = f"{_base_url(address)}{path}"
    try:
        response = await client.get(url, params=params, headers=ACCEPT_V1)
    except httpx.TimeoutException as exc:
        raise DiscoveryError(address, f"GET {path}: timed out (lookupd_poll_timeout)") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise DiscoveryError(address, f"GET {path}: {_request_failure(exc)}") from exc
    try:
        status, message, data = _read(response)
        if 200 <= status < 300:
            return parse(data)
    except _ShapeError as exc:
        raise DiscoveryError(address, f"GET {path}: invalid answer: {exc}") from exc
    error = _TopicNotFound if message == TOPIC_NOT_FOUND else DiscoveryError
    raise error(address, f"GET {path}: HTTP {status} {_one_line(message)}".rstrip())


def _read(response: httpx.Response) -> tuple[int, str, Any]:
    """(status, message, data) from either answer shape; the wrapper's status wins."""
    try:
        document = response.json()
    except RecursionError as exc:  # `[[[[...` nested deeper than the parser's stack
        return _unreadable(response, "JSON nested too deeply", exc)
    except ValueError as exc:
        return _unreadable(response, "not JSON", exc)
    if isinstance(document, dict) and {"status_code", "data"} <= document.keys() <= _WRAPPER_KEYS:
        status_txt = str(document.get("status_txt", ""))
        return _typed(document, "status_code", int), status_txt, document["data"]
    message = document.get("message") if isinstance(document, dict) else None
    reason = message if isinstance(message, str) else response.reason_phrase
    return response.status_code, reason, document


def _unreadable(response: httpx.Response, reason: str, cause: Exception) -> tuple[int, str, Any]:
    """A body that is no JSON: a bad answer on success, else the status says enough."""
    if response.is_success:
        raise _ShapeError(reason) from cause
    return response.status_code, response.reason_phrase, None


def _request_failure(exc: Exception) -> str:
    """A short reason for a failed request; "connection refused" when the OS said so."""
    if any(isinstance(cause, ConnectionRefusedError) for cause in _causes(exc)):
        return "connection refused"
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return f"cannot connect: {detail}" if isinstance(exc, httpx.ConnectError) else detail


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what caused it, and so on, following the first of any group."""
    cause: BaseException | None = exc
    while cause is not None:
        yield cause
        if isinstance(cause, BaseExceptionGroup):
            cause = cause.exceptions[0]
        else:
            cause = cause.__cause__ or cause.__context__


def _base_url(address: str) -> str:
    """http://host:port for "host:port"; a URL given with its scheme is kept as it is."""
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    return f"http://{address}"


def _producers(data: Any) -> list[NsqdNode]:
    return [_node(producer) for producer in _array(data, "producers")]


def _node(document: Any) -> NsqdNode:
    broadcast_address = _typed(document, "broadcast_address", str)
    if not broadcast_address:
        raise _ShapeError("'broadcast_address' is empty")
    return NsqdNode(
        broadcast_address=broadcast_address,
        hostname=_typed(document, "hostname", str),
        tcp_port=_port(document, "tcp_port"),
        http_port=_port(document, "http_port"),
        version=_typed(document, "version", str),
    )


def _port(document: Any, key: str) -> int:
    port = _typed(document, key, int)
    if not 0 < port < 65536:
        raise _ShapeError(f"{key!r} is {port}, not a port number")
    return port


def _strings(key: str) -> Callable[[Any], list[str]]:
    """A parser for a document whose `key` is an array of strings."""

    def parse(data: Any) -> list[str]:
        values = _array(data, key)
        if not all(isinstance(value, str) for value in values):
            raise _ShapeError(f"{key!r} holds something other than strings")
        return values

    return parse


def _array(data: Any, key: str) -> list[Any]:
    """The array at `key`; JSON null counts as an empty array."""
    value = _member(data, key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _ShapeError(f"{key!r} is {_kind(value)}, not an array")
    return value


def _typed(data: Any, key: str, kind: type[T]) -> T:
    value = _member(data, key)
    if type(value) is not kind:
        raise _ShapeError(f"{key!r} is {_kind(value)}, not {_JSON_KINDS[kind]}")
    return value


def _member(data: Any, key: str) -> Any:
    if not isinstance(data, dict):
        raise _ShapeError(f"expected an object with {key!r}, got {_kind(data)}")
    if key not in data:
        raise _ShapeError(f"no {key!r} in the answer")
    return data[key]


def _one_line(text: str) -> str:
    """A server's text fit for one line of a log: whitespace folded, length bounded."""
    folded = " ".join(text.split())
    if len(folded) <= MAX_QUOTED_REASON:
        return folded
    return folded[: MAX_QUOTED_REASON - 3] + "..."


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)
