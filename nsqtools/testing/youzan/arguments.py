"""What a command carries, read and checked: PUB-family bodies (plain, traced, with an
extend header, batched) as drafts to store, the answer a publish gets, partition
parameters, topic and channel names, and SUB_ADVANCED's start positions.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from typing import Any

from nsqtools.testing.youzan.state import Draft, StoredMessage
from nsqtools.testing.youzan.wire import OK, TAG_KEY, TRACE_ID_KEY, Refusal, trace_answer

TOPIC_NAME = re.compile(r"^[.a-zA-Z0-9_-]{1,64}$")
CHANNEL_NAME = re.compile(r"^[.a-zA-Z0-9_-]{1,64}(#ephemeral)?$")


def _payload(name: str, body: bytes) -> bytes:
    if not body:
        raise Refusal("E_BAD_MESSAGE", f"{name} invalid message body size 0")
    return body


def _traced_draft(name: str, data: bytes) -> Draft:
    """[8-byte BE trace id][payload]."""
    if len(data) < 8:
        raise Refusal("E_BAD_BODY", f"{name} body too short for a trace id")
    (trace_id,) = struct.unpack(">Q", data[:8])
    return Draft(_payload(name, data[8:]), trace_id=trace_id, traced=True)


def _ext_draft(name: str, data: bytes) -> Draft:
    """[2-byte BE json len][json header][payload]."""
    if len(data) < 2:
        raise Refusal("E_BAD_BODY", f"{name} body too short for an extend header")
    (size,) = struct.unpack(">H", data[:2])
    ext, payload = data[2 : 2 + size], data[2 + size :]
    if len(ext) < size:
        raise Refusal("E_BAD_BODY", f"{name} extend header longer than the body")
    header = _json_header(ext) if ext else {}
    trace = _trace_id(header)
    tag = header.get(TAG_KEY, "")
    if not isinstance(tag, str):
        raise Refusal("E_BAD_TAG")
    return Draft(
        _payload(name, payload), trace_id=trace or 0, traced=trace is not None, ext=ext, tag=tag
    )


def _trace_id(header: dict[str, Any]) -> int | None:
    """ "##trace_id": a decimal string of a 64-bit id; None without one."""
    trace = header.get(TRACE_ID_KEY)
    if trace is None:
        return None
    if not (isinstance(trace, str) and trace.isascii() and trace.isdigit()):
        raise Refusal("E_INVALID_JSON_HEADER", f"{TRACE_ID_KEY} is not a decimal string")
    if int(trace) >= 2**64:
        raise Refusal("E_INVALID_JSON_HEADER", f"{TRACE_ID_KEY} is out of range")
    return int(trace)


def _json_header(ext: bytes) -> dict[str, Any]:
    try:
        header = json.loads(ext)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise Refusal("E_INVALID_JSON_HEADER")
    return header


def _split_batch(name: str, body: bytes) -> list[bytes]:
    """[4B count] then [4B size][data] for each message."""
    if len(body) < 4:
        raise Refusal("E_BAD_BODY", f"{name} failed to read message count")
    (count,) = struct.unpack(">i", body[:4])
    if count <= 0:
        raise Refusal("E_BAD_BODY", f"{name} invalid message count {count}")
    parts, position = [], 4
    for index in range(count):
        header = body[position : position + 4]
        size = struct.unpack(">i", header)[0] if len(header) == 4 else -1
        data = body[position + 4 : position + 4 + size] if size >= 0 else b""
        if size < 0 or len(data) < size:
            raise Refusal("E_BAD_BODY", f"{name} failed to read message({index}) body")
        parts.append(data)
        position += 4 + size
    if position != len(body):
        raise Refusal("E_BAD_BODY", f"{name} body has bytes after its messages")
    return parts


def read_drafts(name: bytes, body: bytes) -> list[Draft]:
    text = name.decode()
    read_one: Callable[[str, bytes], Draft] = {
        b"PUB": lambda n, d: Draft(_payload(n, d)),
        b"PUB_TRACE": _traced_draft,
        b"PUB_EXT": _ext_draft,
    }[name.removeprefix(b"M")]
    if name.startswith(b"M"):
        return [read_one(text, data) for data in _split_batch(text, body)]
    return [read_one(text, body)]


def publish_answer(name: bytes, drafts: list[Draft], stored: list[StoredMessage]) -> bytes:
    first = stored[0]
    if name == b"MPUB_TRACE":
        # The first message's id and offset, trace id 0, the batch's total raw size.
        total = sum(message.raw_size for message in stored)
        return trace_answer(first.internal_id, 0, first.offset, total)
    if name in (b"PUB_TRACE", b"PUB_EXT") and drafts[0].traced:
        return trace_answer(first.internal_id, first.trace_id, first.offset, first.raw_size)
    # MPUB_EXT: the page does not say; plain OK, as MPUB.
    return OK


def partition_param(value: bytes) -> int | None:
    """A partition parameter; -1 is none, as the fork's clients send it."""
    try:
        number = int(value)
    except ValueError:
        raise Refusal("E_BAD_PARTITION", f"topic partition is not valid: {value!r}") from None
    return None if number == -1 else number


def check_name(command: str, kind: str, name: str, pattern: re.Pattern[str]) -> None:
    if not pattern.match(name):
        code = "E_BAD_TOPIC" if kind == "topic" else "E_BAD_CHANNEL"
        raise Refusal(code, f'{command} {kind} name "{name}" is not valid')


# Start positions, as SUB_ADVANCED's 5th parameter and /channel/setoffset's body carry
# them: the fork's ConsumeOffset.FromBytes reads them, its SetChannelOffset applies them.

POSITION_KINDS = ("timestamp", "special", "virtual_queue", "msgcount")
_GO_INT = re.compile(rb"[+-]?[0-9]+")


class PositionError(Exception):
    """A start position that cannot be read or applied, in the fork's words."""


def read_position(text: bytes) -> tuple[str, int]:
    """`<kind>:<value>`: two parts, a kind the fork knows, a base-10 int64."""
    shown = text.decode(errors="replace")
    parts = text.split(b":")
    if len(parts) != 2 or parts[0].decode(errors="replace") not in POSITION_KINDS:
        raise PositionError(f"invalid consume offset:{shown}")
    return parts[0].decode(), _go_int64(parts[1])


def _go_int64(value: bytes) -> int:
    """strconv.ParseInt(value, 10, 0), with Go's error texts."""
    shown = value.decode(errors="replace")
    if not _GO_INT.fullmatch(value):
        raise PositionError(f'strconv.ParseInt: parsing "{shown}": invalid syntax')
    number = int(value)
    if not -(2**63) <= number < 2**63:
        raise PositionError(f'strconv.ParseInt: parsing "{shown}": value out of range')
    return number


def start_index(messages: list[StoredMessage], kind: str, value: int) -> int:
    """The index of the first message to send from a position read by read_position."""
    if kind == "special":
        if value != -1:
            raise PositionError("not supported offset type")
        return len(messages)  # the end: only what is stored after
    if kind == "timestamp":
        return _first(messages, lambda m: m.timestamp >= value * 1_000_000_000)
    if kind == "virtual_queue":
        return _first(messages, lambda m: m.offset >= value)
    # msgcount is 1-based: 0 and 1 both start at the first message, past the end is the
    # end; on an empty partition the fork's commit log search fails (spec, "Observed on
    # a running fork").
    if not messages:
        raise PositionError("commit log end of file")
    return min(max(value - 1, 0), len(messages))


def _first(messages: list[StoredMessage], wanted: Callable[[StoredMessage], bool]) -> int:
    return next((i for i, message in enumerate(messages) if wanted(message)), len(messages))


def int_field(request: dict[str, Any], name: str, default: int) -> int:
    value = request.get(name, default)
    if type(value) is not int:
        raise Refusal("E_BAD_BODY", f"IDENTIFY {name} is not an integer: {value!r}")
    return value
