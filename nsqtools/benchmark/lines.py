"""JSON documents, one per line, over a pair of trio streams: how a benchmark run and
its worker processes talk (the run over each worker's stdin and stdout)."""

from __future__ import annotations

import json
from typing import Any

import trio

MAX_LINE = 16 * 1024 * 1024  # a worker's report holds a histogram: a few hundred KB at most


class LineError(Exception):
    """The other side sent something that is not a JSON object on a line."""


class JsonLines:
    def __init__(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        self._receive = receive
        self._send = send
        self._buffer = bytearray()
        self._sending = trio.StrictFIFOLock()  # progress and the report may overlap

    async def receive(self) -> dict[str, Any] | None:
        """The next document; None once the other side closed its end."""
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > MAX_LINE:
                raise LineError(f"a line longer than {MAX_LINE} bytes")
            data = await self._receive.receive_some()
            if not data:
                if self._buffer:
                    raise LineError("the last line is cut short")
                return None
            self._buffer += data
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            document = json.loads(line)
        except ValueError as error:
            raise LineError(f"not JSON: {line[:80]!r}") from error
        if not isinstance(document, dict):
            raise LineError(f"not a JSON object: {line[:80]!r}")
        return document

    async def send(self, document: dict[str, Any]) -> None:
        data = json.dumps(document, separators=(",", ":")).encode() + b"\n"
        async with self._sending:
            await self._send.send_all(data)
