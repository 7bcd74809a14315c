"""Snappy and deflate stream wrappers: trio's stream contract, and bytes handed over."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

import pytest
import snappy
import trio
import trio.testing

from nsqtools.protocol import RemoteProtocolError
from nsqtools.transport.compression import DeflateStream, SnappyStream

Wrapper = Callable[[trio.abc.Stream], trio.abc.Stream]
WRAPPERS: dict[str, Wrapper] = {"snappy": SnappyStream, "deflate": DeflateStream}


@pytest.mark.parametrize("wrap", WRAPPERS.values(), ids=WRAPPERS.keys())
async def test_stream_contract(wrap: Wrapper) -> None:
    async def make_pair() -> tuple[trio.abc.Stream, trio.abc.Stream]:
        left, right = trio.testing.memory_stream_pair()
        return wrap(left), wrap(right)

    await trio.testing.check_two_way_stream(make_pair, None)


@pytest.mark.parametrize("wrap", WRAPPERS.values(), ids=WRAPPERS.keys())
async def test_large_writes_round_trip(wrap: Wrapper) -> None:
    left, right = trio.testing.memory_stream_pair()
    sender, receiver = wrap(left), wrap(right)
    payload = os.urandom(200_000) + b"a" * 300_000  # incompressible, then compressible
    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.send_all, payload)
        while len(received) < len(payload):
            received += await receiver.receive_some()
    assert received == payload


async def test_snappy_initial_bytes_are_decoded_first() -> None:
    """Compressed bytes that arrived with the plain IDENTIFY answer are not lost."""
    compressed = snappy.StreamCompressor().add_chunk(b"\x00\x00\x00\x06\x00\x00\x00\x00OK")
    left, _ = trio.testing.memory_stream_pair()
    stream = SnappyStream(left, initial=compressed)
    assert await stream.receive_some() == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


async def test_deflate_initial_bytes_are_decoded_first() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    compressed = compressor.compress(b"hello") + compressor.flush(zlib.Z_SYNC_FLUSH)
    left, _ = trio.testing.memory_stream_pair()
    stream = DeflateStream(left, initial=compressed)
    assert await stream.receive_some() == b"hello"


@pytest.mark.parametrize("wrap", WRAPPERS.values(), ids=WRAPPERS.keys())
async def test_corrupt_input_is_a_remote_protocol_error(wrap: Wrapper) -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = wrap(right)
    await left.send_all(b"\xff\x06\x00\x00sNaPpY\x00\x05\x00\x00garbage" * 3)
    with pytest.raises(RemoteProtocolError, match="corrupt"):
        await stream.receive_some()
