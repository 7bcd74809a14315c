"""Snappy and deflate as trio streams wrapped around another stream, both directions.

nsqd compresses with snappy's *framing* format or with raw deflate flushed with
Z_SYNC_FLUSH after each write. Both wrappers accept `initial`: bytes already read from
the inner stream that belong to the compressed layer (they can arrive in the same read
as the uncompressed IDENTIFY answer).
"""

from __future__ import annotations

import operator
import zlib

import snappy
import trio

from nsqtools.protocol.errors import RemoteProtocolError

RECEIVE_SIZE = 65536


class _TransformStream(trio.abc.Stream):
    """Encodes what is sent and decodes what is received, over an inner stream."""

    name = ""

    def __init__(self, inner: trio.abc.Stream, initial: bytes = b"") -> None:
        self.inner = inner
        self._undecoded = initial
        self._decoded = b""
        self._sending = False
        self._receiving = False
        self._closed = False

    def _encode(self, data: bytes) -> bytes:
        raise NotImplementedError

    def _decode(self, data: bytes) -> bytes:
        raise NotImplementedError

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError(f"another task is sending on this {self.name} stream")
        if self._closed:
            raise trio.ClosedResourceError
        self._sending = True
        try:
            encoded = self._encode(bytes(data)) if data else b""
            await self.inner.send_all(encoded)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._receiving:
            raise trio.BusyResourceError(f"another task is receiving on this {self.name} stream")
        if self._closed:
            raise trio.ClosedResourceError
        if max_bytes is not None and operator.index(max_bytes) < 1:
            raise ValueError("max_bytes must be at least 1")
        self._receiving = True
        try:
            while not self._decoded:
                raw = self._take_undecoded() or bytes(await self.inner.receive_some(RECEIVE_SIZE))
                if not raw:
                    return b""  # end of the inner stream
                self._decoded = self._checked_decode(raw)
            limit = len(self._decoded) if max_bytes is None else max_bytes
            chunk, self._decoded = self._decoded[:limit], self._decoded[limit:]
            return chunk
        finally:
            self._receiving = False

    def _take_undecoded(self) -> bytes:
        raw, self._undecoded = self._undecoded, b""
        return raw

    def _checked_decode(self, raw: bytes) -> bytes:
        try:
            return self._decode(raw)
        except (zlib.error, snappy.UncompressError, ValueError, OSError) as error:
            raise RemoteProtocolError(f"corrupt {self.name} stream from nsqd: {error}") from error

    async def aclose(self) -> None:
        self._closed = True
        await self.inner.aclose()


class SnappyStream(_TransformStream):
    """Snappy framing format in both directions."""

    name = "snappy"

    def __init__(self, inner: trio.abc.Stream, initial: bytes = b"") -> None:
        super().__init__(inner, initial)
        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()

    def _encode(self, data: bytes) -> bytes:
        encoded: bytes = self._compressor.add_chunk(data)
        return encoded

    def _decode(self, data: bytes) -> bytes:
        decoded: bytes = self._decompressor.decompress(data)
        return decoded


class DeflateStream(_TransformStream):
    """Raw deflate (no zlib header), each write ended with a sync flush."""

    name = "deflate"

    def __init__(self, inner: trio.abc.Stream, level: int = 6, initial: bytes = b"") -> None:
        super().__init__(inner, initial)
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)

    def _encode(self, data: bytes) -> bytes:
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def _decode(self, data: bytes) -> bytes:
        return self._decompressor.decompress(data)
