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


class RecordKeyError(ValueError):
    """A record that has no value for a --shard-key or --trace-id."""


class RecordKey:
    """A value taken from each record (to_nsq's --shard-key and --trace-id): a field of
    a JSON object record ("user_id"), or a template over its fields ("{user}-{region}").
    A literal without braces that is all digits is a constant (a --trace-id for all)."""

    def __init__(self, spec: str) -> None:
        if not spec:
            raise RecordKeyError("the key is empty")
        self.spec = spec
        self.constant = spec if spec.isdigit() else None
        self.template = "{" in spec
        if self.template:
            import string

            try:
                names = [name for _, name, _, _ in string.Formatter().parse(spec) if name]
            except ValueError as error:
                raise RecordKeyError(f"invalid template {spec!r}: {error}") from None
            if not names:
                raise RecordKeyError(f"template {spec!r} names no field")

    def of(self, record: bytes) -> str:
        """The key's value for this record, or RecordKeyError saying why there is none."""
        if self.constant is not None:
            return self.constant
        import json

        try:
            document = json.loads(record)
        except ValueError:
            raise RecordKeyError("the record is not JSON") from None
        if not isinstance(document, dict):
            raise RecordKeyError("the record is not a JSON object")
        if not self.template:
            if self.spec not in document:
                raise RecordKeyError(f"the record has no field {self.spec!r}")
            return _text(document[self.spec])
        try:
            return self.spec.format_map({name: _text(value) for name, value in document.items()})
        except (KeyError, IndexError, ValueError) as error:
            raise RecordKeyError(f"the record has no field {error}") from None


def _text(value: object) -> str:
    """A JSON value as key text: strings as they are, anything else as JSON."""
    import json

    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
