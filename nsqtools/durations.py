"""Go's time.Duration text syntax, in float seconds: parse_duration and format_duration.

Owns the one duration syntax that the CLI flags and the client option table accept, so that
"300ms" or "2h45m" means here exactly what it means to NSQ's Go tools. Both directions work
on integer nanoseconds, as Go does, and convert to or from seconds only at the edge.
"""

from __future__ import annotations

import math
import re

_MICROSECOND = 1_000
_MILLISECOND = 1_000_000
_SECOND = 1_000_000_000
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE

_UNITS: dict[str, int] = {
    "ns": 1,
    "us": _MICROSECOND,
    "\u00b5s": _MICROSECOND,  # micro sign
    "\u03bcs": _MICROSECOND,  # Greek small letter mu
    "ms": _MILLISECOND,
    "s": _SECOND,
    "m": _MINUTE,
    "h": _HOUR,
}
_SUBSECOND_UNITS = (("ms", _MILLISECOND), ("\u00b5s", _MICROSECOND), ("ns", 1))

# Go sums magnitudes in a uint64 and allows exactly 1<<63, so that -1<<63 still parses.
_MAX_MAGNITUDE = 1 << 63
_MAX_POSITIVE = _MAX_MAGNITUDE - 1

# One "number unit" component; as in Go, the unit is everything up to the next digit or ".".
# The lookahead keeps every match non-empty, so the matches tile the whole text.
_COMPONENT = re.compile(r"(?=.)([0-9]*)(?:\.([0-9]*))?([^0-9.]*)", re.DOTALL)

_NO_NUMBER = "expected a number with a unit, like 300ms or 2h45m"


class DurationError(ValueError):
    """Text that is not a Go duration; the message is one line and quotes the text."""


def parse_duration(text: str) -> float:
    """Seconds in a Go duration such as "300ms", "-1.5h" or "2h45m" (time.ParseDuration)."""
    return _parse_nanoseconds(text) / _SECOND


def format_duration(seconds: float) -> str:
    """Go's Duration.String() of seconds rounded to whole nanoseconds: "1m30s", "250ms", "0s"."""
    if not math.isfinite(seconds):
        raise DurationError(f"cannot format {seconds} as a duration")
    # Imported here, not at the top: fractions costs every program's start-up (nsq_stat's
    # is measured) and most never format a duration.
    from fractions import Fraction

    # Fraction is exact, so the only rounding is the one to whole nanoseconds.
    nanoseconds = round(Fraction(seconds) * _SECOND)
    sign = "-" if nanoseconds < 0 else ""
    return sign + _format_magnitude(abs(nanoseconds))


def quote(text: str) -> str:
    """text in double quotes, escaping quotes, backslashes and unprintable characters.

    Error messages quote user input with this so that they always stay on one line.
    """
    return '"' + "".join(_escape(character) for character in text) + '"'


def _escape(character: str) -> str:
    if character in '"\\':
        return "\\" + character
    if character.isprintable():
        return character
    return character.encode("unicode_escape").decode("ascii")


def _parse_nanoseconds(text: str) -> int:
    negative = text.startswith("-")
    body = text[1:] if text[:1] in ("-", "+") else text
    if body == "0":  # the one number Go accepts without a unit
        return 0
    if not body:
        raise _invalid(text, _NO_NUMBER)
    total = 0
    for component in _COMPONENT.finditer(body):
        total += _component_nanoseconds(text, component[1], component[2], component[3])
        if total > _MAX_MAGNITUDE:
            raise _invalid(text, "out of range")
    if negative:
        return -total
    if total > _MAX_POSITIVE:
        raise _invalid(text, "out of range")
    return total


def _component_nanoseconds(text: str, whole: str, fraction: str | None, unit: str) -> int:
    """One "1.5h"-like component, with its checks in the order Go makes them."""
    whole_value = _whole_number(text, whole)
    if not whole and not fraction:
        raise _invalid(text, _NO_NUMBER)
    if not unit:
        raise _invalid(text, "missing unit")
    if unit not in _UNITS:
        raise DurationError(f"unknown unit {quote(unit)} in duration {quote(text)}")
    scale = _UNITS[unit]
    if whole_value > _MAX_MAGNITUDE // scale:
        raise _invalid(text, "out of range")
    return whole_value * scale + _fraction_nanoseconds(fraction or "", scale)


def _whole_number(text: str, digits: str) -> int:
    significant = digits.lstrip("0")
    # 1<<63 has 19 digits; counting first keeps int() away from arbitrarily long input.
    if len(significant) > 19 or int(significant or "0") > _MAX_MAGNITUDE:
        raise _invalid(text, "out of range")
    return int(significant or "0")


def _fraction_nanoseconds(digits: str, scale: int) -> int:
    """Go's leadingFraction and float64 step: digits past 63 bits are dropped, then truncated."""
    numerator, denominator = 0, 1.0
    for digit in digits:
        candidate = numerator * 10 + int(digit)
        if candidate > _MAX_MAGNITUDE:
            break
        numerator, denominator = candidate, denominator * 10
    return int(numerator * (scale / denominator))


def _invalid(text: str, reason: str) -> DurationError:
    return DurationError(f"invalid duration {quote(text)}: {reason}")


def _format_magnitude(nanoseconds: int) -> str:
    if nanoseconds == 0:
        return "0s"
    if nanoseconds < _SECOND:
        unit, size = next(pair for pair in _SUBSECOND_UNITS if nanoseconds >= pair[1])
        return _decimal(nanoseconds, size) + unit
    whole_minutes, remainder = divmod(nanoseconds, _MINUTE)
    hours, minutes = divmod(whole_minutes, 60)
    seconds = _decimal(remainder, _SECOND) + "s"
    if hours:
        return f"{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{minutes}m{seconds}"
    return seconds


def _decimal(value: int, size: int) -> str:
    """value / size (a power of ten) without trailing zeros, as Go's fmtFrac and fmtInt write it."""
    whole, fraction = divmod(value, size)
    digits = str(fraction).zfill(len(str(size)) - 1).rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)
