"""What a command carries, read and checked: PUB-family bodies (plain, traced, with an
extend header, batched) as drafts to store, whether their topic takes extend headers,
the answer a publish gets, partition parameters, topic and channel names, SUB_ADVANCED's
start positions, IDENTIFY's fields, and INTERNAL_CREATE_TOPIC's refusal.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from typing import Any, NoReturn

from nsqtools.testing.youzan.state import Draft, Partition, StoredMessage
from nsqtools.testing.youzan.wire import (
    DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS,
    EXT_LENGTH_SIZE,
    MIN_OUTPUT_BUFFER_TIMEOUT_MS,
    OK,
    TAG_KEY,
    TRACE_ID_KEY,
    TRACE_ID_SIZE,
    Refusal,
    invalid,
    trace_answer,
)

TOPIC_NAME = re.compile(r"^[.a-zA-Z0-9_-]{1,64}$")
CHANNEL_NAME = re.compile(r"^[.a-zA-Z0-9_-]{1,64}(#ephemeral)?$")


# The texts below are the fork's (nsqdserver/protocol_v2.go); `index` is a message's
# place in an MPUB-family batch, None for a single message.


def _traced_draft(data: bytes, index: int | None) -> Draft:
    """[8-byte BE trace id][payload], the payload not empty."""
    if len(data) <= TRACE_ID_SIZE:  # spec, Observed: "invalid body size 5 with trace id..."
        if index is None:
            raise Refusal("E_BAD_BODY", f"invalid body size {len(data)} with trace id enabled")
        text = f"MPUB invalid message({index}) body size {len(data)} for tracing"
        raise Refusal("E_BAD_MESSAGE", text)
    (trace_id,) = struct.unpack(">Q", data[:TRACE_ID_SIZE])
    return Draft(data[TRACE_ID_SIZE:], trace_id=trace_id, traced=True)


def _ext_draft(data: bytes, index: int | None) -> Draft:
    """[2-byte BE json len][json header][payload], the payload not empty. A header the
    fork cannot parse, an empty one of PUB_EXT among them, is refused non-fatally."""
    if len(data) <= EXT_LENGTH_SIZE:
        raise Refusal("E_BAD_BODY", f"invalid body size {len(data)} with ext json header enabled")
    (size,) = struct.unpack(">H", data[:EXT_LENGTH_SIZE])
    if len(data) <= EXT_LENGTH_SIZE + size:
        text = f"invalid body size {len(data)} in ext json header content length"
        raise Refusal("E_BAD_BODY", text)
    ext, payload = data[EXT_LENGTH_SIZE : EXT_LENGTH_SIZE + size], data[EXT_LENGTH_SIZE + size :]
    if not ext and index is not None:
        return Draft(payload)  # MPUB_EXT: a message without a header
    header = _json_header(ext)
    trace = _trace_id(header)
    tag = header.get(TAG_KEY, "")
    return Draft(
        payload,
        trace_id=trace or 0,
        traced=trace is not None,
        ext=ext,
        tag=tag if isinstance(tag, str) else "",  # the fork ignores a tag not a string
    )


def _trace_id(header: dict[str, Any]) -> int | None:
    """ "##trace_id": a decimal string of a 64-bit id; None without one."""
    trace = header.get(TRACE_ID_KEY)
    if trace is None:
        return None
    if not isinstance(trace, str):
        raise Refusal("INVALID_TRACE_ID", "passin trace id should be string", fatal=False)
    if not (trace.isascii() and trace.isdigit() and int(trace) < 2**64):
        raise Refusal("INVALID_TRACE_ID", "invalid trace id", fatal=False)
    return int(trace)


def _json_header(ext: bytes) -> dict[str, Any]:
    """The header's keys. Any JSON value is a header to the fork (fastjson); one that is
    not an object has no keys. The fork's parser words its errors otherwise than
    Python's, but for the empty header."""
    if not ext:
        reason = "cannot parse empty string"
    else:
        try:
            header = json.loads(ext)
        except (ValueError, RecursionError) as error:
            reason = f"cannot parse JSON: {error}"
        else:
            return header if isinstance(header, dict) else {}
    raise Refusal("E_INVALID_JSON_HEADER", f"fail to parse json header:{reason}", fatal=False)


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


def _not_empty(data: bytes, index: int) -> bytes:
    if not data:
        raise Refusal("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size 0")
    return data


def read_drafts(name: bytes, body: bytes) -> list[Draft]:
    if not body:
        raise Refusal("E_BAD_BODY", "invalid body size 0")
    read_one: Callable[[bytes, int | None], Draft] = {
        b"PUB": lambda data, _: Draft(data),
        b"PUB_TRACE": _traced_draft,
        b"PUB_EXT": _ext_draft,
    }[name.removeprefix(b"M")]
    if name.startswith(b"M"):
        batch = enumerate(_split_batch(name.decode(), body))
        return [read_one(_not_empty(data, index), index) for index, data in batch]
    return [read_one(body, None)]


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


# A start position of SUB_ADVANCED: the index of the first message to send.


def start_index(messages: list[StoredMessage], position: bytes) -> int:
    kind, _, value = position.decode(errors="replace").partition(":")
    try:
        number = int(value)
    except ValueError:
        raise invalid(f"SUB_ADVANCED invalid start position {position!r}") from None
    if kind == "special" and number == -1:
        return len(messages)  # the end: only what is stored after the SUB
    if kind == "timestamp":
        return _first(messages, lambda m: m.timestamp >= number * 1_000_000_000)
    if kind == "virtual_queue":
        return _first(messages, lambda m: m.offset >= number)
    if kind == "msgcount":
        # The page gives no detail: skip the first <n> messages of the partition.
        return min(max(number, 0), len(messages))
    raise invalid(f"SUB_ADVANCED invalid start position {position!r}")


def _first(messages: list[StoredMessage], wanted: Callable[[StoredMessage], bool]) -> int:
    return next((i for i, message in enumerate(messages) if wanted(message)), len(messages))


def int_field(request: dict[str, Any], name: str, default: int) -> int:
    value = request.get(name, default)
    if type(value) is not int:
        raise Refusal("E_BAD_BODY", f"IDENTIFY {name} is not an integer: {value!r}")
    return value


def output_buffer_timeout(requested: int) -> int:
    """The fork's client_v2: -1 turns the buffer timeout off, 0 keeps the default (50 ms,
    spec: IDENTIFY's answer), below 10 ms is raised to 10. (Its upper bound is not kept.)"""
    if requested == -1:
        return 0
    if requested == 0:
        return DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS
    return max(requested, MIN_OUTPUT_BUFFER_TIMEOUT_MS)


def refuse_create_topic(params: list[bytes]) -> NoReturn:
    """INTERNAL_CREATE_TOPIC <topic> <partition>: for non-cluster mode only, and this is a
    cluster (spec, Observed: Publishing)."""
    if len(params) < 2:
        raise invalid("CREATE_TOPIC insufficient number of parameters")
    raise Refusal(
        "E_CREATE_TOPIC_FAILED",
        "CREATE_TOPIC is not allowed here while cluster feature enabled.",
        fatal=False,
    )


def check_ext_support(name: bytes, drafts: list[Draft], partition: Partition) -> None:
    """PUB_EXT to a topic without extend support, or MPUB_EXT of a message with a
    header: non-fatal E_EXT_NOT_SUPPORT (spec, Observed: Publishing). The fork's
    MPUB_EXT takes a message with an empty header as a plain one."""
    if partition.topic.extend or not name.endswith(b"_EXT"):
        return
    if name == b"PUB_EXT" or any(draft.ext for draft in drafts):
        text = f"ext content not supported in topic {partition.topic.name}"
        raise Refusal("E_EXT_NOT_SUPPORT", text, fatal=False)
