"""Record splitting (to_nsq's input), the keys taken from records (--shard-key,
--trace-id) and the token bucket behind --rate, without I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.flow import TokenBucket
from nsqtools.records import (
    DelimiterError,
    RecordKey,
    RecordKeyError,
    parse_delimiter,
    split_records,
)
from nsqtools.testing import AllocationMeter


async def chunks_of(data: bytes, cuts: list[int]) -> list[list[bytes]]:
    async def stream() -> AsyncIterator[bytes]:
        previous = 0
        for cut in [*sorted(set(cuts)), len(data)]:
            if cut > previous:
                yield data[previous:cut]
                previous = cut

    return [records async for records in split_records(stream(), b"\n")]


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=10))
def test_any_chunking_gives_the_non_empty_records(data: bytes, cuts: list[int]) -> None:
    batches = trio.run(chunks_of, data, [cut for cut in cuts if cut <= len(data)])
    assert [record for batch in batches for record in batch] == [r for r in data.split(b"\n") if r]


@pytest.mark.parametrize("record_size", [1 << 20, 32 << 20])
def test_a_record_with_no_delimiter_costs_work_linear_in_its_size(record_size: int) -> None:
    """Bounded by bytes allocated, not by a timer: one join at the end is the size once;
    gluing the leftover to every chunk, as split_records once did, is the size times the
    number of chunks over two (a 200 MB record took 34.6 s)."""
    chunk = b"x" * (64 * 1024)

    async def measured(meter: AllocationMeter) -> list[list[bytes]]:
        async def stream() -> AsyncIterator[bytes]:
            for _ in range(record_size // len(chunk)):
                meter.step()  # what split_records did with the chunk before
                yield chunk

        return [records async for records in split_records(stream(), b"\n")]

    with AllocationMeter() as meter:
        batches = trio.run(measured, meter)
    assert [[len(record) for record in batch] for batch in batches] == [[record_size]]
    assert meter.allocated < 2 * record_size


@pytest.mark.parametrize(
    ("text", "byte"),
    [
        ("\n", b"\n"),
        (",", b","),
        ("\\t", b"\t"),
        ("\\0", b"\0"),
        ("\\x1e", b"\x1e"),
        ("\\\\", b"\\"),
    ],
)
def test_delimiters(text: str, byte: bytes) -> None:
    assert parse_delimiter(text) == byte


@pytest.mark.parametrize("text", ["", "ab", "\\x", "é", "\\t\\t"])
def test_bad_delimiters(text: str) -> None:
    with pytest.raises(DelimiterError, match="single byte"):
        parse_delimiter(text)


def test_token_bucket_grants_the_rate_and_saves_at_most_one_second() -> None:
    bucket = TokenBucket(10, now=0.0)
    assert bucket.take(100, now=0.0) == 1  # starts with a balance of one, as Go's does
    assert bucket.take(100, now=0.5) == 5
    assert bucket.wait_time(now=0.5) == pytest.approx(0.1)
    assert bucket.take(100, now=60.0) == 10  # a long pause saves one second's worth


@given(st.lists(st.floats(0, 2), min_size=1, max_size=50), st.integers(1, 1000))
def test_token_bucket_never_exceeds_rate_times_time_plus_one_second(
    steps: list[float], rate: int
) -> None:
    bucket, now, granted = TokenBucket(rate, now=0.0), 0.0, 0
    for step in steps:
        now += step
        granted += bucket.take(10**9, now)
    assert granted <= rate * now + rate + 1


@pytest.mark.parametrize(
    ("spec", "record", "value"),
    [
        ("user", b'{"user": "ann", "n": 1}', "ann"),
        ("n", b'{"user": "ann", "n": 1}', "1"),
        ("{user}-{n}", b'{"user": "ann", "n": 1}', "ann-1"),
        ("{where}", b'{"where": {"a": [1, 2]}}', '{"a":[1,2]}'),
        ("42", b"not even json", "42"),
    ],
)
def test_record_keys_from_a_field_a_template_or_a_constant(
    spec: str, record: bytes, value: str
) -> None:
    assert RecordKey(spec).of(record) == value


@pytest.mark.parametrize(
    ("spec", "record", "reason"),
    [
        ("user", b"plain text", "not JSON"),
        ("user", b"[1, 2]", "not a JSON object"),
        ("user", b'{"name": "x"}', "no field 'user'"),
        ("{user}-{n}", b'{"user": "x"}', "no field 'n'"),
    ],
)
def test_a_record_without_its_key_says_why(spec: str, record: bytes, reason: str) -> None:
    with pytest.raises(RecordKeyError, match=reason):
        RecordKey(spec).of(record)


@pytest.mark.parametrize(("spec", "reason"), [("", "empty"), ("{", "invalid"), ("{}", "no field")])
def test_a_bad_key_is_refused_at_once(spec: str, reason: str) -> None:
    with pytest.raises(RecordKeyError, match=reason):
        RecordKey(spec)
