"""The common answer's head read without h11 (pure, no IO): the pool's fast path.

Owns telling a plain answer's head from the rest: a complete head with one
Content-Length, no Transfer-Encoding, a final status whose body that length frames
(not 1xx, 204 or 304; the pool never sends HEAD or CONNECT). Such heads are most of
what a server sends and h11 reads them at several times the cost; anything else
(chunked, no length, an odd or malformed line, obs-fold, a head not yet complete) is
None, and the pool lets h11 read it from the same bytes, so h11 stays the one judge
of odd answers. What is accepted here, h11 accepts too and reads the same way:

    head = simple_head(b"HTTP/1.1 200 OK\\r\\nContent-Length: 3\\r\\n\\r\\nok\\n")
    head.status, head.reason, head.headers, head.size, head.content_length, head.keep_alive
    # 200, b"OK", ((b"content-length", b"3"),), 38, 3, True

A server sends the same head again and again (nginx's changes with its Date header, once
a second): heads are read once and kept, the last _KEPT_HEADS of them (reading one was a
tenth of nsq_to_http's CPU; measured).
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

# h11's grammar (h11._abnf), so that a line matched here is one h11 reads alike: a
# value's characters are any byte but NUL and whitespace, with inner runs of spaces
# and tabs; names are RFC 9110 tokens. Both are fullmatched against one line.
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_HEADER_LINE = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*"
)
# Statuses whose body is not framed by the Content-Length.
_UNFRAMED = frozenset({204, 304})
# h11's limit: a longer Content-Length is a bad answer.
_LENGTH_MAX_DIGITS = 20
# Heads kept once read: a few per origin a relay posts to.
_KEPT_HEADS = 16


class SimpleHead(NamedTuple):
    """A plain answer's head, as h11 would give it."""

    status: int
    reason: bytes  # the status line's reason phrase
    headers: tuple[tuple[bytes, bytes], ...]  # names in lower case, as h11 gives them
    size: int  # bytes up to the end of the blank line: the body starts there
    content_length: int
    keep_alive: bool  # HTTP/1.1 and no `Connection: close`, as h11 judges it


def simple_head(data: bytes) -> SimpleHead | None:
    """The head at the start of `data` when it is complete and plain, else None."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    return _plain_head(data[: end + 4])


@functools.lru_cache(maxsize=_KEPT_HEADS)
def _plain_head(head: bytes) -> SimpleHead | None:
    """A complete head (up to its blank line), read when it is plain."""
    status_line, *lines = head[:-4].split(b"\r\n")
    status_match = _STATUS_LINE.fullmatch(status_line)
    if status_match is None:
        return None
    status = int(status_match[2])
    if status < 200 or status in _UNFRAMED:
        return None
    headers = []
    for line in lines:
        field = _HEADER_LINE.fullmatch(line)
        if field is None:
            return None
        headers.append((field[1].lower(), field[2]))
    length = _content_length(headers)
    if length is None:
        return None
    keep_alive = status_match[1] == b"1" and not _says_close(headers)
    reason = status_match[3] or b""
    return SimpleHead(status, reason, tuple(headers), len(head), length, keep_alive)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The one Content-Length of a head without Transfer-Encoding; None for anything
    else (duplicates and lists included: h11 has rules for those)."""
    lengths = []
    for name, value in headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            lengths.append(value)
    if len(lengths) != 1:
        return None
    value = lengths[0]
    if not value.isdigit() or len(value) > _LENGTH_MAX_DIGITS:
        return None
    return int(value)


def _says_close(headers: list[tuple[bytes, bytes]]) -> bool:
    """A `close` among the Connection headers' comma-separated tokens, any case."""
    return any(
        token.strip() == b"close"
        for name, value in headers
        if name == b"connection"
        for token in value.lower().split(b",")
    )
