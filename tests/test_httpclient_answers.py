"""The plain answers read without h11 (answers.simple_head, Connection's fast path):
they come out as h11 reads them, and any other answer is still h11's.

The reference is h11 alone, fed the reads as they come, as the pool fed it before the
fast path. Connection is driven by a scripted stream, as only that can split an
answer at a chosen byte: a real socket may merge or split reads at will.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import h11
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqtools.httpclient.answers import simple_head
from nsqtools.httpclient.pool import Connection
from nsqtools.httpclient.requests import PostTarget

REQUEST = PostTarget("http://127.0.0.1:1/").request(b"m")


class Answer(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    reusable: bool


Outcome = Answer | str  # an answer, or "bad answer: " and h11's words


def h11_reads(parts: Sequence[bytes]) -> Outcome:
    """What h11 alone makes of the answer coming in `parts`, then the end of the
    connection: what the pool did before the fast path."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="POST", target="/", headers=[("Host", "-")]))
    connection.send(h11.EndOfMessage())
    reads = iter(parts)
    status, headers, body = 0, [], b""
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as error:
            return f"bad answer: {error}"
        if event is h11.NEED_DATA:
            connection.receive_data(next(reads, b""))
        elif type(event) is h11.Response:
            status, headers = event.status_code, list(event.headers)
        elif type(event) is h11.Data:
            body += event.data
        elif type(event) is h11.EndOfMessage:
            break
        elif type(event) is not h11.InformationalResponse:
            return f"bad answer: unexpected {type(event).__name__}"
    reusable = connection.their_state is connection.our_state is h11.DONE
    return Answer(status, headers, body, reusable and not connection.trailing_data[0])


class ScriptedStream(trio.abc.Stream):
    """Gives `parts` as its reads, then the end of the stream."""

    def __init__(self, parts: Sequence[bytes]) -> None:
        self.parts = list(parts)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.parts.pop(0) if self.parts else b""

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def connection_reads(parts: Sequence[bytes]) -> Outcome:
    connection = Connection(ScriptedStream(parts))
    try:
        response = await connection.exchange(REQUEST)
    except h11.RemoteProtocolError as error:
        return f"bad answer: {error}"
    reusable = connection.reusable(REQUEST)
    return Answer(response.status, list(response.headers), response.body, reusable)


OK = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 3\r\n\r\nok\n"


class Case(NamedTuple):
    answer: bytes
    plain: bool  # read without h11
    expected: tuple[int, bytes, bool] | str  # status, body, reusable; or the failure


CASES = {
    "simple": Case(OK, True, (200, b"ok\n", True)),
    "keep-alive": Case(
        b"HTTP/1.1 201 Created\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
        True,
        (201, b"", True),
    ),
    "close": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Keep-Alive, CLOSE\r\n\r\nok",
        True,
        (200, b"ok", False),
    ),
    "HTTP/1.0": Case(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", True, (200, b"ok", False)),
    # h11 never keeps an HTTP/1.0 connection, whatever the server says.
    "HTTP/1.0 keep-alive": Case(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
        True,
        (200, b"ok", False),
    ),
    "no reason, names in any case, spaces around values": Case(
        b"HTTP/1.1 503\r\nRETRY-after: \t7 \r\ncontent-LENGTH:2\t\r\nX-Empty:\r\n\r\nno",
        True,
        (503, b"no", True),
    ),
    "pipelined bytes after": Case(OK + OK, True, (200, b"ok\n", False)),
    "chunked": Case(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nok\n\r\n0\r\n\r\n",
        False,
        (200, b"ok\n", True),
    ),
    "chunked and a length": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nok\n\r\n0\r\n\r\n",
        False,
        (200, b"ok\n", True),
    ),
    # Reusable as h11 leaves it (the pool learns the end when it next sends: _Stale).
    "no length: up to the end": Case(b"HTTP/1.1 200 OK\r\n\r\nall", False, (200, b"all", True)),
    "bad length": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nok", False, "bad answer: bad Content-Length"
    ),
    "same length twice": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        False,
        (200, b"ok", True),
    ),
    "a list of lengths": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", False, (200, b"ok", True)
    ),
    "conflicting lengths": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        False,
        "bad answer: conflicting Content-Length headers",
    ),
    "too long a length": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 000000000000000000002\r\n\r\nok",
        False,
        "bad answer: bad Content-Length",
    ),
    "obs-fold": Case(
        b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
        False,
        (200, b"ok", True),
    ),
    "1xx first": Case(b"HTTP/1.1 100 Continue\r\n\r\n" + OK, False, (200, b"ok\n", True)),
    "204 ignores its length": Case(
        b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n", False, (204, b"", True)
    ),
    "bare line feeds": Case(
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok\r\n\r\n", False, (200, b"ok", False)
    ),
    "HTTP/2.0": Case(b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok", False, (200, b"ok", True)),
    "no HTTP": Case(
        b"SSH-2.0-OpenSSH\r\n\r\n",
        False,
        "bad answer: illegal status line: bytearray(b'SSH-2.0-OpenSSH')",
    ),
    "NUL in a value": Case(
        b"HTTP/1.1 200 OK\r\nX-A: a\x00\r\nContent-Length: 0\r\n\r\n",
        False,
        "bad answer: illegal header line: bytearray(b'X-A: a\\x00')",
    ),
    "body cut short": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        True,
        "bad answer: peer closed connection without sending complete message body "
        "(received 3 bytes, expected 10)",
    ),
    "head cut short": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n",
        False,
        "bad answer: peer unexpectedly closed connection",
    ),
}


def summary(outcome: Outcome) -> tuple[int, bytes, bool] | str:
    if isinstance(outcome, str):
        return outcome
    return outcome.status, outcome.body, outcome.reusable


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_an_answer_split_anywhere_is_read_as_h11_reads_it(case: Case) -> None:
    assert (simple_head(case.answer) is not None) is case.plain
    whole = h11_reads([case.answer])
    assert summary(whole) == case.expected
    assert await connection_reads([case.answer]) == whole
    for cut in range(1, len(case.answer)):
        parts = [case.answer[:cut], case.answer[cut:]]
        assert await connection_reads(parts) == h11_reads(parts), cut


async def test_a_body_in_many_reads() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    parts = [head + b"a", b"b", b"c", b"d", b"e"]
    assert await connection_reads(parts) == Answer(200, [(b"content-length", b"5")], b"abcde", True)


# The grammar h11 reads, to write well-formed answers from.
TOKEN = st.text("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
VALUE_BYTE = st.integers(0x01, 0xFF).filter(lambda byte: byte not in b" \t\n\r\x0b\x0c")
WORD = st.lists(VALUE_BYTE, min_size=1, max_size=8).map(bytes)
VALUE = st.lists(WORD, max_size=3).map(b" ".join)
OWS = st.sampled_from([b"", b" ", b"\t", b" \t "])
REASON = st.one_of(st.just(b""), st.binary(max_size=20).map(lambda reason: b" " + reason))


@st.composite
def plain_answers(draw: st.DrawFn) -> bytes:
    version = draw(st.sampled_from([b"1.0", b"1.1"]))
    status = draw(st.integers(200, 999).filter(lambda status: status not in (204, 304)))
    reason = draw(REASON).translate(None, b"\x00\r\n\x0b\x0c")
    names = st.builds(str.encode, TOKEN.filter(bool)).filter(
        lambda name: name.lower() not in (b"content-length", b"transfer-encoding")
    )
    fields = draw(st.lists(st.tuples(names, VALUE)))
    connection = [b"close", b"Close", b"keep-alive", b"upgrade", b"x, close ,y"]
    fields += [(b"Connection", value) for value in draw(st.lists(st.sampled_from(connection)))]
    body = draw(st.binary(max_size=50))
    length = draw(st.sampled_from([b"", b"0", b"00"])) + b"%d" % len(body)
    length_name = draw(st.sampled_from([b"Content-Length", b"content-length", b"CONTENT-length"]))
    fields.insert(draw(st.integers(0, len(fields))), (length_name, length))
    lines = [b"HTTP/%s %d%s" % (version, status, reason)]
    lines += [name + b":" + draw(OWS) + value + draw(OWS) for name, value in fields]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body + draw(st.sampled_from([b"", b"X", OK]))


def fast_path_reads(answer: bytes) -> Outcome | None:
    """What simple_head and the body's bytes make of an answer read at once."""
    head = simple_head(answer)
    if head is None:
        return None
    end = head.size + head.content_length
    body = answer[head.size : end]
    if len(body) < head.content_length:
        return None  # h11 says what is wrong with it
    return Answer(head.status, list(head.headers), body, head.keep_alive and len(answer) == end)


@pytest.mark.slow
@settings(max_examples=250, deadline=None)
@given(plain_answers())
def test_plain_answers_are_read_without_h11_as_h11_reads_them(answer: bytes) -> None:
    assert fast_path_reads(answer) == h11_reads([answer])


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(plain_answers(), st.data())
def test_what_the_fast_path_takes_h11_takes_alike(answer: bytes, data: st.DataObject) -> None:
    """An answer with a byte changed: simple_head may leave it to h11, but when it
    takes it, it reads it as h11 does."""
    at = data.draw(st.integers(0, len(answer) - 1))
    byte = data.draw(st.sampled_from(b"\x00\t\n\r \x0b,:0aA\x7f\x80"))
    changed = answer[:at] + bytes([byte]) + answer[at + 1 :]
    fast = fast_path_reads(changed)
    if fast is not None:
        assert fast == h11_reads([changed])


def h11_reason(answer: bytes) -> bytes:
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="GET", target="/", headers=[("Host", "-")]))
    connection.send(h11.EndOfMessage())
    connection.receive_data(answer)
    event = connection.next_event()
    assert isinstance(event, h11.Response)
    return event.reason


@settings(max_examples=100, deadline=None)
@given(plain_answers())
def test_the_reason_phrase_is_read_as_h11_reads_it(answer: bytes) -> None:
    """The blocking client reports it (HTTP 404 Not Found)."""
    head = simple_head(answer)
    assert head is not None
    assert head.reason == h11_reason(answer)
