"""How messages become output lines: raw bodies, a JSON-lines envelope, or a template.

Pure functions over a batch of messages, returning the bytes to write in one call.
raw is byte-identical to the Go nsq_tail (`body\\n`, or `topic | body\\n` with
--print-topic). The JSON envelope carries what downstream jobs need to deduplicate
and decode: id, timestamp (ISO-8601 and nanoseconds), attempts, topic, channel, nsqd
address, and the body as text, or as base64 when it is not UTF-8 (`encoding` says which).
A message of the Youzan fork adds its partition, trace id (a decimal string: it is a
64-bit number), and queue offset, raw size and tag when its subscription carries them;
its id, 16 binary bytes, is written as 32 hex digits.

The one template syntax (str.format's, `{{`/`}}` for literal braces) serves the other
way too: BodyTemplate makes the bodies `nsq pub TOPIC BODY` publishes.
"""

from __future__ import annotations

import base64
import datetime
import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nsqtools.protocol import Message
from nsqtools.protocol.youzan import ForkMessage

TEMPLATE_FIELDS = {
    "id": "message id",
    "ts": "nsqd's timestamp, ISO-8601 in UTC",
    "epoch": "nsqd's timestamp, seconds since the epoch",
    "timestamp_ns": "nsqd's timestamp, nanoseconds since the epoch",
    "attempts": "delivery attempts",
    "topic": "topic",
    "channel": "channel",
    "nsqd": "address of the nsqd that delivered it",
    "body": "body as text (invalid UTF-8 replaced)",
    "partition": "the Youzan fork's partition (empty elsewhere)",
    "trace_id": "the Youzan fork's trace id (empty elsewhere)",
    "queue_offset": "the Youzan fork's queue offset, after SUB_ORDERED or --start-at",
}


class FormatError(ValueError):
    """A template that names an unknown field or does not parse."""


@dataclass(frozen=True)
class Origin:
    """Where a batch of messages came from."""

    topic: str
    channel: str
    nsqd: str


def iso_timestamp(nanoseconds: int) -> str:
    """ISO-8601 in UTC with nanoseconds: 2026-11-21T11:05:46.753854123Z."""
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


def raw_lines(bodies: Sequence[bytes], prefix: bytes = b"") -> bytes:
    """`body` and a newline per message, each after `prefix` (b"topic | " for
    --print-topic)."""
    if prefix:
        return b"".join([prefix + body + b"\n" for body in bodies])
    return b"\n".join(bodies) + b"\n"


def json_lines(messages: Sequence[Message], origin: Origin) -> bytes:
    return "".join(
        json.dumps(envelope(message, origin), ensure_ascii=False) + "\n" for message in messages
    ).encode()


def envelope(message: Message, origin: Origin) -> dict[str, object]:
    """The JSON envelope of a message, the one format of nsq_tail --format json and
    nsq_to_file --format json, which later jobs read (documented in the README: change
    it only compatibly)."""
    try:
        body, encoding = message.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(message.body).decode("ascii"), "base64"
    document: dict[str, object] = {
        "id": message_id(message),
        "timestamp": iso_timestamp(message.timestamp),
        "timestamp_ns": message.timestamp,
        "attempts": message.attempts,
        "topic": origin.topic,
        "channel": origin.channel,
        "nsqd": origin.nsqd,
        "body": body,
        "encoding": encoding,
    }
    if isinstance(message, ForkMessage):
        document.update(_fork_fields(message))
    return document


def message_id(message: Message) -> str:
    """The id as text: upstream's 16 ASCII hex digits as they are; the Youzan fork's
    binary id in hex."""
    if isinstance(message, ForkMessage):
        return message.id.hex()
    return message.id.decode("ascii", "replace")


def _fork_fields(message: ForkMessage) -> dict[str, object]:
    fields: dict[str, object] = {"trace_id": str(message.trace_id)}
    if message.partition is not None:
        fields["partition"] = message.partition
    if message.queue_offset is not None:
        fields["queue_offset"] = message.queue_offset
        fields["raw_size"] = message.raw_size
    if message.tag:
        fields["tag"] = message.tag
    return fields


def template_fields(text: str, known: Mapping[str, str]) -> set[str]:
    """The fields a template names; FormatError if it does not parse or names a field
    not in `known`."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as error:
        raise FormatError(f"invalid template {text!r}: {error}") from error
    unknown = sorted(names - known.keys())
    if unknown:
        listed = ", ".join(known)
        raise FormatError(f"unknown template field {{{unknown[0]}}}; known fields: {listed}")
    return names


class Template:
    """A str.format template over TEMPLATE_FIELDS, e.g. "{ts} {topic} {body}"."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.names = template_fields(text, TEMPLATE_FIELDS)
        sample = Message(b"0" * 16, 0, 1, b"")
        try:
            self.lines([sample], Origin("topic", "channel", "127.0.0.1:4150"))
        except (ValueError, TypeError) as error:
            raise FormatError(f"invalid template {text!r}: {error}") from error

    def lines(self, messages: Sequence[Message], origin: Origin) -> bytes:
        return "".join(
            self.text.format_map(self._fields(message, origin)) + "\n" for message in messages
        ).encode()

    def _fields(self, message: Message, origin: Origin) -> dict[str, object]:
        fork = message if isinstance(message, ForkMessage) else None
        return {
            "id": message_id(message),
            "ts": iso_timestamp(message.timestamp),
            "epoch": f"{message.timestamp / 1e9:.6f}",
            "timestamp_ns": message.timestamp,
            "attempts": message.attempts,
            "topic": origin.topic,
            "channel": origin.channel,
            "nsqd": origin.nsqd,
            "body": message.body.decode("utf-8", "replace"),
            "partition": _text(None if fork is None else fork.partition),
            "trace_id": _text(None if fork is None else fork.trace_id),
            "queue_offset": _text(None if fork is None else fork.queue_offset),
        }


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


BODY_FIELDS = {
    "seq": "the message's number, 1 to --count",
    "count": "--count",
    "ts": "the time it is made, ISO-8601 in UTC",
    "epoch": "the time it is made, seconds since the epoch",
    "timestamp_ns": "the time it is made, nanoseconds since the epoch",
    "id": "a random id (32 hex digits, a UUID4's)",
    "topic": "topic",
}


class BodyTemplate:
    """A str.format template over BODY_FIELDS, e.g. '{{"n": {seq}, "at": "{ts}"}}': the
    bodies `nsq pub TOPIC BODY` publishes. A body without braces is published as it is."""

    def __init__(self, text: str, topic: str, count: int) -> None:
        self.text = text
        self.topic = topic
        self.count = count
        try:
            self.names = template_fields(text, BODY_FIELDS)
        except FormatError as error:  # often a JSON body's braces
            raise FormatError(f"{error} (a literal brace is written {{{{ or }}}})") from error
        try:
            self.bodies(1, 1)
        except (ValueError, TypeError) as error:  # a format spec that does not fit: {ts:d}
            raise FormatError(f"invalid template {text!r}: {error}") from error

    def bodies(self, first: int, count: int) -> list[bytes]:
        """The bodies numbered first to first + count - 1, made now."""
        if not self.names:
            return [self.text.encode()] * count
        import time
        import uuid

        fields: dict[str, object] = {"count": self.count, "topic": self.topic}
        made: list[bytes] = []
        for seq in range(first, first + count):
            now = time.time_ns()
            fields |= {
                "seq": seq,
                "ts": iso_timestamp(now),
                "epoch": f"{now / 1e9:.6f}",
                "timestamp_ns": now,
                "id": uuid.uuid4().hex if "id" in self.names else "",
            }
            made.append(self.text.format_map(fields).encode())
        return made
