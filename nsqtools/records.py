"""Splitting input into records, as to_nsq does: on a one-byte delimiter, which is
dropped, skipping empty records. A last record without a delimiter is kept whole
(the Go to_nsq cuts its last byte)."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterable, AsyncIterator


class DelimiterError(ValueError):
    """A delimiter that is not exactly one byte."""


def parse_delimiter(text: str) -> bytes:
    """One byte, given as itself or as an escape such as \\t, \\0 or \\x1e."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) == 1:
        return raw
    try:
        unescaped: bytes = codecs.escape_decode(raw)[0]
    except ValueError:
        unescaped = b""
    if len(unescaped) == 1:
        return unescaped
    raise DelimiterError(f"--delimiter must be a single byte, got {text!r}")


async def split_records(
    chunks: AsyncIterable[bytes], delimiter: bytes
) -> AsyncIterator[list[bytes]]:
    """The non-empty records of a byte stream, a list per chunk that completed some.

    Linear in the input, however long a record: the chunks of a record still without
    its delimiter are kept as they came and joined once, when it ends.
    """
    unfinished: list[bytes] = []  # chunks holding the start of the next record
    async for chunk in chunks:
        if delimiter not in chunk:
            unfinished.append(chunk)
            continue
        if unfinished:
            unfinished.append(chunk)
            chunk = b"".join(unfinished)
        parts = chunk.split(delimiter)
        last = parts.pop()
        unfinished = [last] if last else []
        records = [part for part in parts if part]
        if records:
            yield records
    if unfinished:
        yield [b"".join(unfinished)]
