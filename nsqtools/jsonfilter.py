"""nsq_to_nsq's JSON filter (--require-json-field, --require-json-value,
--whitelist-json-field), byte for byte as Go's nsq_to_nsq v1.3.0 built with go1.26.

This module owns deciding, from a message body alone, whether it is published (and with
which body), dropped (FIN, nothing published) or requeued with backoff, and the log line
Go writes then. Pure functions: no I/O.

Go decodes the body with encoding/json into a map[string]interface{}, so the rules are
Go's, not Python's json module's: numbers are float64 (one that overflows makes the
whole body undecodable), `null` is an empty object, each invalid UTF-8 byte in a string
becomes one U+FFFD, a lone surrogate escape becomes U+FFFD. --require-json-value is
compared with a JSON string as text, or with a JSON number when it parses with Go's
strconv.ParseFloat. The whitelisted object is re-encoded by json.Marshal: keys sorted,
Go's escaping (HTML characters, U+2028, U+2029) and Go's float formatting; a top-level
integral number that fits an int64 is written as an integer.

Python's json decoder recurses, so a body nested deeper than it goes (some 900 levels)
is decoded again by a slower decoder without recursion, up to Go's limit of 10000.
"""

from __future__ import annotations

import codecs
import enum
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property

# What encoding/json's decoder gives for a JSON value.
JsonValue = None | bool | float | str | list["JsonValue"] | dict[str, "JsonValue"]
# What json.Marshal is given: the whitelist turns some top-level numbers into int64.
Encodable = JsonValue | int

DECODE_ERROR_LOG = "ERROR: Unable to decode json: "
MISSING_FIELD_LOG = "ERROR: missing field to check required value"

_INT64_MIN = -(2**63)
_INT64_LIMIT = 2**63


class Action(enum.Enum):
    PUBLISH = "publish"  # publish Verdict.body, then FIN
    DROP = "drop"  # FIN without publishing
    REQUEUE = "requeue"  # REQ with backoff (Go's handler returns an error)


@dataclass(frozen=True)
class Verdict:
    action: Action
    body: bytes = b""  # what to publish (PUBLISH only)
    log: str = ""  # the line Go logs for this message, if any


@dataclass(frozen=True)
class JsonFilter:
    require_field: str = ""  # --require-json-field
    require_value: str = ""  # --require-json-value (ignored without require_field)
    whitelist: tuple[str, ...] = ()  # --whitelist-json-field, repeatable

    @property
    def active(self) -> bool:
        """Whether bodies are decoded at all: Go ignores --require-json-value alone."""
        return bool(self.require_field or self.whitelist)

    def apply(self, body: bytes) -> Verdict:
        if not self.active:
            return Verdict(Action.PUBLISH, body)
        try:
            document = decode_object(body)
        except NotGoJson:
            text = body.decode("utf-8", "backslashreplace")
            return Verdict(Action.DROP, log=DECODE_ERROR_LOG + text)
        if self.require_field:
            if self.require_field not in document:
                if self.require_value:
                    return Verdict(Action.REQUEUE, log=MISSING_FIELD_LOG)
                return Verdict(Action.DROP)
            if self.require_value and not self._matches(document[self.require_field]):
                return Verdict(Action.DROP)
        if not self.whitelist:
            return Verdict(Action.PUBLISH, body)
        return Verdict(Action.PUBLISH, self._whitelisted(document))

    def _matches(self, value: JsonValue) -> bool:
        """A string compares as text; a number only if the wanted value is one for Go."""
        if isinstance(value, str):
            return value == self.require_value
        number = self._required_number
        return number is not None and isinstance(value, float) and value == number

    @cached_property
    def _required_number(self) -> float | None:
        return go_parse_float(self.require_value)

    def _whitelisted(self, document: dict[str, JsonValue]) -> bytes:
        kept = {key: _int64_if_exact(document[key]) for key in self.whitelist if key in document}
        return go_marshal(kept).encode("utf-8")


def _int64_if_exact(value: JsonValue) -> Encodable:
    """nsq_to_nsq's `int64(f)` round trip (amd64: out of range gives -2^63, never equal)."""
    if isinstance(value, float) and value.is_integer() and _INT64_MIN <= value < _INT64_LIMIT:
        return int(value)
    return value


# --- Decoding, as json.Unmarshal into a map[string]interface{} ---------------------


class NotGoJson(ValueError):
    """The body is not something Go's json.Unmarshal decodes into a map."""


def _one_replacement_per_byte(error: UnicodeError) -> tuple[str, int]:
    # Go's utf8.DecodeRune rejects one byte at a time; Python's "replace" would give one
    # U+FFFD for a whole truncated sequence.
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd", error.start + 1


codecs.register_error("nsqtools.jsonfilter.per-byte", _one_replacement_per_byte)

# An escape: a surrogate pair, a lone surrogate (group 1), or any other (kept as is).
_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
    r"|\\.",
    re.DOTALL,
)


def _lone_surrogates_replaced(text: str) -> str:
    """Go's unquote: a surrogate escape that is not half of a pair becomes U+FFFD.
    Done before decoding, so that keys made equal by it are duplicates in Go's order."""
    if "\\u" not in text:
        return text
    return _ESCAPE.sub(lambda match: "\\ufffd" if match[1] else match[0], text)


def _float64(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise NotGoJson(f"number {literal} overflows float64")
    return value


def _no_constant(literal: str) -> float:
    raise NotGoJson(f"{literal} is not JSON")


_DECODER = json.JSONDecoder(parse_float=_float64, parse_int=_float64, parse_constant=_no_constant)


def decode_object(body: bytes) -> dict[str, JsonValue]:
    """The body as Go's json.Unmarshal into a map[string]interface{} sees it."""
    text = _lone_surrogates_replaced(body.decode("utf-8", "nsqtools.jsonfilter.per-byte"))
    try:
        try:
            value: JsonValue = _DECODER.decode(text)
        except RecursionError:
            value = _decode_deep(text)
    except ValueError as error:  # json.JSONDecodeError, or ours from the hooks
        raise NotGoJson(str(error)) from error
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NotGoJson(f"cannot unmarshal {type(value).__name__} into a map")
    return value


GO_MAX_DEPTH = 10000  # encoding/json's maxNestingDepth: arrays and objects in all
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERALS: dict[str, JsonValue] = {"true": True, "false": False, "null": None}
_CLOSING = {"{": "}", "[": "]"}


def _decode_deep(text: str) -> JsonValue:
    """The same decoding as _DECODER's, with a stack of open containers for recursion."""
    open_containers: list[dict[str, JsonValue] | list[JsonValue]] = []
    keys: list[str] = []  # the key each open object's next value goes under
    position = _skip_whitespace(text, 0)
    while True:
        opening = text[position : position + 1]
        if opening in _CLOSING:
            if len(open_containers) == GO_MAX_DEPTH:
                raise NotGoJson(f"exceeded max depth of {GO_MAX_DEPTH}")
            open_containers.append({} if opening == "{" else [])
            position = _skip_whitespace(text, position + 1)
            if text[position : position + 1] != _CLOSING[opening]:
                if opening == "{":
                    position = _read_key(text, position, keys)
                continue
            value: JsonValue = open_containers.pop()
            position += 1
        else:
            value, position = _read_scalar(text, position)
        # Place the value, and close the containers it completes.
        while open_containers:
            container = open_containers[-1]
            if isinstance(container, dict):
                container[keys[-1]] = value
            else:
                container.append(value)
            position = _skip_whitespace(text, position)
            separator = text[position : position + 1]
            if separator == ",":
                position = _skip_whitespace(text, position + 1)
                if isinstance(container, dict):
                    keys.pop()
                    position = _read_key(text, position, keys)
                break
            if separator != ("}" if isinstance(container, dict) else "]"):
                raise NotGoJson(f"unexpected {separator!r} at {position}")
            if isinstance(container, dict):
                keys.pop()
            value = open_containers.pop()
            position += 1
        else:
            if _skip_whitespace(text, position) != len(text):
                raise NotGoJson(f"extra data at {position}")
            return value


def _skip_whitespace(text: str, position: int) -> int:
    match = _WHITESPACE.match(text, position)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _read_key(text: str, position: int, keys: list[str]) -> int:
    """Read `"key" :` into keys; the position of the value that follows."""
    if text[position : position + 1] != '"':
        raise NotGoJson(f"expected a key at {position}")
    key, position = json.decoder.scanstring(text, position + 1, True)  # type: ignore[attr-defined]
    keys.append(key)
    position = _skip_whitespace(text, position)
    if text[position : position + 1] != ":":
        raise NotGoJson(f"expected ':' at {position}")
    return _skip_whitespace(text, position + 1)


def _read_scalar(text: str, position: int) -> tuple[JsonValue, int]:
    if text[position : position + 1] == '"':
        string: str
        string, end = json.decoder.scanstring(text, position + 1, True)  # type: ignore[attr-defined]
        return string, end
    if number := _NUMBER.match(text, position):
        return _float64(number.group()), number.end()
    for literal, value in _LITERALS.items():
        if text.startswith(literal, position):
            return value, position + len(literal)
    raise NotGoJson(f"expected a value at {position}")


# --- strconv.ParseFloat(s, 64) -----------------------------------------------------

_SPECIAL = re.compile(r"[+-]?(?:inf|infinity)|nan", re.IGNORECASE)
_HEX_FLOAT = re.compile(
    r"[+-]?0[xX](?=[0-9a-fA-F_.]*[0-9a-fA-F])[0-9a-fA-F_]*\.?[0-9a-fA-F_]*[pP][+-]?[0-9][0-9_]*"
)
_DECIMAL_FLOAT = re.compile(r"[+-]?(?=[0-9_.]*[0-9])[0-9_]*\.?[0-9_]*(?:[eE][+-]?[0-9][0-9_]*)?")


def go_parse_float(text: str) -> float | None:
    """Go's strconv.ParseFloat(text, 64), or None where it returns an error (bad
    syntax, or out of float64's range)."""
    if _SPECIAL.fullmatch(text):
        return float(text)
    if "_" in text and not _underscores_ok(text):
        return None
    digits = text.replace("_", "")
    try:
        if _HEX_FLOAT.fullmatch(text):
            value = float.fromhex(digits)
        elif _DECIMAL_FLOAT.fullmatch(text):
            value = float(digits)
        else:
            return None
    except OverflowError:
        return None
    return None if math.isinf(value) else value


def _underscores_ok(text: str) -> bool:
    """Go's underscoreOK: each underscore between two digits (a base prefix counts)."""
    body = text[1:] if text[:1] in "+-" else text
    hexadecimal = body[:2].lower() == "0x"
    previous = "digit" if body[:2].lower() in ("0x", "0o", "0b") else "start"
    digits = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
    for char in body[2:] if previous == "digit" else body:
        if char in digits:
            previous = "digit"
        elif char == "_":
            if previous != "digit":
                return False
            previous = "underscore"
        elif previous == "underscore":
            return False
        else:
            previous = "other"
    return previous != "underscore"


# --- Encoding, as json.Marshal --------------------------------------------------------

_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
_SHORT_ESCAPES |= {"\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def go_string(text: str) -> str:
    """A string as json.Marshal writes it (HTML-safe; non-ASCII kept as is)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def go_float(value: float) -> str:
    """A float64 as json.Marshal writes it: shortest digits, like ES6 Number.toString
    but with the exponent cutoffs 1e-6 and 1e21 and exponents not padded."""
    shortest = repr(value)
    if 1e-6 <= abs(value) < 1e21 or value == 0:
        if "e" in shortest:
            return format(Decimal(shortest).normalize(), "f")
        return shortest.removesuffix(".0")
    mantissa, exponent = repr(value).split("e")
    return f"{mantissa}e{int(exponent):+d}"


class _Encoded(str):
    """Text already in its JSON form: punctuation, or a member's key and colon."""


def go_marshal(value: Encodable) -> str:
    """json.Marshal of what encoding/json decoded (plus the whitelist's integers).
    Without recursion: Go decodes (and so encodes) values nested 10000 deep."""
    output: list[str] = []
    pending: list[Encodable | _Encoded] = [value]  # a stack: the next item is last
    while pending:
        item = pending.pop()
        if isinstance(item, _Encoded):
            output.append(item)
        elif isinstance(item, dict):
            pending.extend(reversed(_object_parts(item)))
        elif isinstance(item, list):
            pending.extend(reversed(_array_parts(item)))
        else:
            output.append(_scalar(item))
    return "".join(output)


def _object_parts(members: dict[str, JsonValue]) -> list[Encodable | _Encoded]:
    parts: list[Encodable | _Encoded] = [_Encoded("{")]
    for index, key in enumerate(sorted(members)):
        parts += [_Encoded(("," if index else "") + go_string(key) + ":"), members[key]]
    return [*parts, _Encoded("}")]


def _array_parts(items: list[JsonValue]) -> list[Encodable | _Encoded]:
    parts: list[Encodable | _Encoded] = [_Encoded("[")]
    for index, item in enumerate(items):
        parts += [_Encoded(","), item] if index else [item]
    return [*parts, _Encoded("]")]


def _scalar(value: bool | int | float | str | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    return go_string(value)
