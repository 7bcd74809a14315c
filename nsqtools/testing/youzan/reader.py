"""Commands read off a client's stream as the fork's nsqd reads them, and their bytes as
received: the name, then the parameters up to the line's end, then for IDENTIFY, AUTH
and the PUB family a 4-byte size and the body. FIN, REQ and TOUCH are read at fixed
length: their ids are binary and may hold a 0x0a, so no line can be split at "\n"
before the id is read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from nsqtools.testing.youzan.wire import (
    BODY_COMMANDS,
    FIXED_ID_COMMANDS,
    ID_SIZE,
    MAX_BODY_SIZE,
    MAX_LINE_SIZE,
    Refusal,
    invalid,
)


class Closed(Exception):
    """The client closed its end (or stop() closed it)."""


@dataclass(frozen=True)
class Command:
    """One command: its name, parameters and body, and its bytes as they came."""

    name: bytes
    params: list[bytes]
    body: bytes
    raw: bytes  # the line with its "\n", and for those with a body its size and the body


def read_command(file: BinaryIO) -> Command:
    """The next command on the stream; Closed if it ends first, a Refusal if the command
    cannot be read (the stream is lost then)."""
    raw = bytearray()
    name, ended = _read_name(file, raw)
    params: list[bytes] = []
    if not ended and name in FIXED_ID_COMMANDS:
        params = _read_id_params(file, name, raw)
    elif not ended:
        line = _read_line(file, raw)
        params = line.split(b" ")
    body = _read_body(file, name, raw) if name in BODY_COMMANDS else b""
    return Command(name, params, body, bytes(raw))


def _read_name(file: BinaryIO, raw: bytearray) -> tuple[bytes, bool]:
    """The command's name, and whether the line ended with it."""
    name = bytearray()
    while True:
        byte = read_exactly(file, 1)
        raw += byte
        if byte in (b" ", b"\n"):
            return bytes(name).removesuffix(b"\r"), byte == b"\n"
        name += byte
        if len(name) > 64:
            raise invalid("invalid command")


def _read_id_params(file: BinaryIO, name: bytes, raw: bytearray) -> list[bytes]:
    message_id = read_exactly(file, ID_SIZE)
    raw += message_id
    if name != b"REQ":
        end = read_exactly(file, 1)
        raw += end
        if end != b"\n":
            raise invalid(f"{name.decode()} id must be {ID_SIZE} bytes")
        return [message_id]
    rest = _read_line(file, raw)  # " <ms>"
    return [message_id, *rest.split(b" ")[1:]]


def _read_line(file: BinaryIO, raw: bytearray) -> bytes:
    line = file.readline(MAX_LINE_SIZE)
    if len(line) == MAX_LINE_SIZE and not line.endswith(b"\n"):
        raise invalid("command line too long")
    if not line.endswith(b"\n"):
        raise Closed
    raw += line
    return line[:-1].removesuffix(b"\r")


def _read_body(file: BinaryIO, name: bytes, raw: bytearray) -> bytes:
    header = read_exactly(file, 4)
    raw += header
    (size,) = struct.unpack(">i", header)
    if not 0 <= size <= MAX_BODY_SIZE:
        raise Refusal("E_BAD_BODY", f"{name.decode()} invalid body size {size}")
    body = read_exactly(file, size)
    raw += body
    return body


def read_exactly(file: BinaryIO, size: int) -> bytes:
    """size bytes; Closed if the stream ends before."""
    data = file.read(size)
    if len(data) < size:
        raise Closed
    return data
