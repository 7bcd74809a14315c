"""Checking that a JSON document has the shape an NSQ endpoint documents (sans-IO).

The typed readers of nsqd's and nsqlookupd's answers are built from these: each either
returns the value at a key with the JSON type asked for, or raises ShapeError with a
short reason naming the key ("'tcp_port' is a string, not an integer"). JSON null where
an array belongs reads as an empty array: nsqd v1.3.0 sends `null` for empty lists.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")

# A server's own words in an error message are cut to this many characters: one line.
MAX_QUOTED_REASON = 80

_JSON_KINDS: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


class ShapeError(ValueError):
    """Valid JSON, but not the document the endpoint is documented to return."""


def member(data: Any, key: str) -> Any:
    """The value at `key` of an object, whatever its type."""
    if not isinstance(data, dict):
        raise ShapeError(f"expected an object with {key!r}, got {kind(data)}")
    if key not in data:
        raise ShapeError(f"no {key!r} in the answer")
    return data[key]


def typed(data: Any, key: str, expected: type[T]) -> T:
    """The value at `key`, which must be exactly of this JSON type (a bool is no int)."""
    value = member(data, key)
    if type(value) is not expected:
        raise ShapeError(f"{key!r} is {kind(value)}, not {_JSON_KINDS[expected]}")
    return value


def optional(data: Any, key: str, expected: type[T], default: T) -> T:
    """Like typed(), for a key the server leaves out when it holds its zero value."""
    return typed(data, key, expected) if isinstance(data, dict) and key in data else default


def number(data: Any, key: str) -> float:
    """A JSON number, integer or not (Go writes a float64 of 0 as `0`)."""
    value = member(data, key)
    if type(value) not in (int, float):
        raise ShapeError(f"{key!r} is {kind(value)}, not a number")
    return float(value)


def array(data: Any, key: str) -> list[Any]:
    """The array at `key`; JSON null counts as an empty array."""
    value = member(data, key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(f"{key!r} is {kind(value)}, not an array")
    return value


def strings(data: Any, key: str) -> list[str]:
    """The array of strings at `key` (null: empty)."""
    values = array(data, key)
    if not all(isinstance(value, str) for value in values):
        raise ShapeError(f"{key!r} holds something other than strings")
    return values


def one_line(text: str) -> str:
    """A server's text fit for one line of a log: whitespace folded, length bounded."""
    folded = " ".join(text.split())
    if len(folded) <= MAX_QUOTED_REASON:
        return folded
    return folded[: MAX_QUOTED_REASON - 3] + "..."


def kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    return _JSON_KINDS.get(type(value), type(value).__name__)
