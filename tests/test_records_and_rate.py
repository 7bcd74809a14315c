"""Record splitting (to_nsq's input) and the token bucket behind --rate, without I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.flow import TokenBucket
from nsqtools.records import DelimiterError, parse_delimiter, split_records


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
