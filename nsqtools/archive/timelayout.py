"""Go's time layouts, both ways: what Go's time.Format prints for a layout, and how such
text reads back, for the names nsq_to_file gives its files.

Owns the layout tokens ("std chunks" in Go's time/format.go: January, 01, 15, MST,
-0700, .000...), the split of a layout into literal text and tokens by Go's nextStdChunk
rules, nsq_to_file's strftime subset turned into a layout (go_strftime, whose layout
tokens therefore expand in literal text too), and the reverse: each token's regex and the
reading of its text into fields that must agree on one instant.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from functools import cached_property, lru_cache
from typing import Protocol


@dataclass
class Reading:
    """What a name's datetime text says, field by field; a field read twice must agree."""

    numbers: dict[str, int] = field(default_factory=dict)
    zone_name: str | None = None

    def set(self, name: str, value: int) -> bool:
        return self.numbers.setdefault(name, value) == value

    def set_zone_name(self, name: str) -> bool:
        if self.zone_name is None:
            self.zone_name = name
        return self.zone_name == name

    def when(self, zone: tzinfo | None) -> datetime | None:
        """The instant read, or None if the fields name none (Feb 30, a Monday that is a
        Tuesday, a zone abbreviation that is not `zone`'s)."""
        day, hour = self._date(), self._hour()
        if day is None or hour is None:
            return None
        minute, second, microsecond = (
            self.numbers.get(name, 0) for name in ("minute", "second", "microsecond")
        )
        naive = datetime.combine(day, time(hour, minute, second, microsecond))
        return self._placed(naive, zone)

    def _date(self) -> date | None:
        numbers = self.numbers
        try:
            if "year_day" in numbers:
                day = date(numbers["year"], 1, 1) + timedelta(numbers["year_day"] - 1)
            else:
                day = date(numbers["year"], numbers["month"], numbers["day"])
        except (ValueError, OverflowError):
            return None
        implied = {"year": day.year, "month": day.month, "day": day.day,
                   "year_day": _year_day(day), "weekday": day.weekday()}  # fmt: skip
        agrees = all(numbers.get(name, value) == value for name, value in implied.items())
        return day if agrees else None

    def _hour(self) -> int | None:
        """The hour from 15, or 3 and PM, as Go's time.Parse reads them (3 without PM is
        before noon, except 12), if they agree."""
        numbers = self.numbers
        hour = numbers.get("hour")
        if "hour12" in numbers:
            twelve = numbers["hour12"]
            from_twelve = twelve % 12 + 12 * numbers.get("pm", int(twelve == 12))
            if hour not in (None, from_twelve):
                return None
            hour = from_twelve
        if hour is None:
            return 12 * numbers.get("pm", 0)
        return hour if numbers.get("pm", int(hour >= 12)) == int(hour >= 12) else None

    def _placed(self, naive: datetime, zone: tzinfo | None) -> datetime | None:
        """An offset in the name wins; else an abbreviation must be zone's at that time
        (it also tells which of a repeated autumn hour), or UTC's; else zone says."""
        offset = self.numbers.get("offset")
        if offset is not None:
            return naive.replace(tzinfo=timezone(timedelta(seconds=offset)))
        if self.zone_name is None:
            return _in_zone(naive, zone)
        for fold in (0, 1):
            placed = _in_zone(naive.replace(fold=fold), zone)
            if placed.tzname() == self.zone_name:
                return placed
        return naive.replace(tzinfo=UTC) if self.zone_name in ("UTC", "GMT") else None


def _in_zone(naive: datetime, zone: tzinfo | None) -> datetime:
    """naive as a wall-clock time in zone, the local zone if None."""
    return naive.astimezone() if zone is None else naive.replace(tzinfo=zone)


class LayoutToken(Protocol):
    """A layout token: what it prints for an instant, and how that text reads back."""

    @property
    def pattern(self) -> str:
        """A regex matching every text render() can print."""
        ...

    def render(self, when: datetime) -> str: ...

    def read(self, text: str, reading: Reading) -> bool:
        """Note in reading what text (a match of pattern) says; False if it cannot be."""
        ...


@dataclass(frozen=True)
class _Slot:
    """A calendar or clock field a token prints, and the values it can hold."""

    name: str
    value: Callable[[datetime], int]
    values: range


@dataclass(frozen=True)
class Field:
    """A field (month, day, hour...) and the way one token prints it."""

    slot: _Slot
    show: Callable[[int], str]
    values: range | None = None  # those it can stand for, when fewer than the slot's
    regex: str | None = None  # what it prints, when listing every text would be too long

    def render(self, when: datetime) -> str:
        return self.show(self.slot.value(when))

    @cached_property
    def _by_text(self) -> dict[str, int]:
        return {self.show(value): value for value in self.values or self.slot.values}

    @cached_property
    def pattern(self) -> str:
        """Every text it prints, longest first: a field reads as many digits as it can,
        as in Go's time.Parse, and fewer only if the rest of the name needs it."""
        longest_first = sorted(self._by_text, key=len, reverse=True)
        return self.regex or "|".join(map(re.escape, longest_first))

    def read(self, text: str, reading: Reading) -> bool:
        value = self._by_text.get(text)
        return value is not None and reading.set(self.slot.name, value)


@dataclass(frozen=True)
class _Offset:
    """A numeric zone offset (-0700, -07:00, Z07...), printed with Go's integer rules."""

    minutes: bool
    seconds: bool
    colons: bool
    z_for_utc: bool

    def render(self, when: datetime) -> str:
        offset = _offset_seconds(when)
        if offset == 0 and self.z_for_utc:
            return "Z"
        # Go divides with truncation: an offset of -30s prints "+00" and "-30" seconds.
        zone_minutes = int(offset / 60)
        sign = "-" if zone_minutes < 0 else "+"
        sub_minute = -offset if zone_minutes < 0 else offset
        zone_minutes = abs(zone_minutes)
        separator = ":" if self.colons else ""
        text = f"{sign}{zone_minutes // 60:02d}"
        if self.minutes:
            text += f"{separator}{zone_minutes % 60:02d}"
        if self.seconds:
            text += f"{separator}{_go_int(int(math.fmod(sub_minute, 60)), 2)}"  # Go's %
        return text

    @property
    def pattern(self) -> str:
        # Sub-minute offsets west of Greenwich (Go's "+00:00:-52") are left out: only
        # local mean times before 1900 have them.
        two_digits = (":" if self.colons else "") + "[0-9]{2}"
        numeric = "[+-][0-9]{2}" + two_digits * (self.minutes + self.seconds)
        return "Z|" + numeric if self.z_for_utc else numeric

    def read(self, text: str, reading: Reading) -> bool:
        return _read_offset(text, reading)


def _read_offset(text: str, reading: Reading) -> bool:
    """Z, +05, -0700, +05:45:00... as seconds east of UTC."""
    if text == "Z":
        return reading.set("offset", 0)
    digits = text[1:].replace(":", "").ljust(6, "0")
    seconds = int(digits[:2]) * 3600 + int(digits[2:4]) * 60 + int(digits[4:])
    return seconds < 24 * 3600 and reading.set("offset", -seconds if text[0] == "-" else seconds)


@dataclass(frozen=True)
class _ZoneName:
    """MST: the zone's abbreviation, or its offset as -0700 when it has none."""

    def render(self, when: datetime) -> str:
        return when.tzname() or _NUMERIC_ZONE.render(when)

    @property
    def pattern(self) -> str:
        # tz database zones without a name have a numeric one: "-03", "+0545".
        return "[A-Za-z]{3,5}|[+-][0-9]{2}(?:[0-9]{2})?"

    def read(self, text: str, reading: Reading) -> bool:
        if text[0] in "+-":
            return _read_offset(text, reading)
        return reading.set_zone_name(text)


@dataclass(frozen=True)
class _Fraction:
    """.000 or ,999: fractional seconds to `digits` places; the 9s drop trailing zeros."""

    separator: str
    digits: int
    trim: bool

    def render(self, when: datetime) -> str:
        nanoseconds = when.microsecond * 1000
        if self.trim and nanoseconds == 0:
            return ""
        shown = f"{nanoseconds:09d}"[: self._shown]
        if self.trim:
            shown = shown.rstrip("0")
            return self.separator + shown if shown else ""
        return self.separator + shown

    @property
    def _shown(self) -> int:
        return min(self.digits, 9)  # Go prints at most 9 digits

    @property
    def pattern(self) -> str:
        separator = re.escape(self.separator)
        if self.trim:
            return f"(?:{separator}[0-9]{{0,{self._shown - 1}}}[1-9])?"
        return f"{separator}[0-9]{{{self._shown}}}"

    def read(self, text: str, reading: Reading) -> bool:
        nanoseconds = int(text[1:].ljust(9, "0"))
        return reading.set("microsecond", nanoseconds // 1000)


def _offset_seconds(when: datetime) -> int:
    offset = when.utcoffset()
    if offset is None:
        raise ValueError("Go's strftime needs an aware datetime")
    return int(offset.total_seconds())


def _go_int(value: int, width: int) -> str:
    """Go's appendInt: a '-' then the digits, zero-padded to width."""
    return ("-" if value < 0 else "") + f"{abs(value):0{width}d}"


_LONG_MONTHS = ("January", "February", "March", "April", "May", "June", "July",
                "August", "September", "October", "November", "December")  # fmt: skip
_LONG_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _month(when: datetime) -> int:
    return when.month


def _day(when: datetime) -> int:
    return when.day


def _hour(when: datetime) -> int:
    return when.hour


def _minute(when: datetime) -> int:
    return when.minute


def _second(when: datetime) -> int:
    return when.second


def _year(when: datetime) -> int:
    return when.year


def _year_day(when: date) -> int:
    return when.timetuple().tm_yday


def _weekday(when: datetime) -> int:
    return when.weekday()


def _hour12(when: datetime) -> int:
    return when.hour % 12 or 12  # noon is 12PM, midnight 12AM


def _pm(when: datetime) -> int:
    return int(when.hour >= 12)


def _long_month(month: int) -> str:
    return _LONG_MONTHS[month - 1]


def _long_day(weekday: int) -> str:
    return _LONG_DAYS[weekday]


def _two_digits(value: int) -> str:
    return f"{value:02d}"


_YEAR = _Slot("year", _year, range(1, 10000))
_MONTH = _Slot("month", _month, range(1, 13))
_DAY = _Slot("day", _day, range(1, 32))
_YEAR_DAY = _Slot("year_day", _year_day, range(1, 367))
_WEEKDAY = _Slot("weekday", _weekday, range(7))
_HOUR = _Slot("hour", _hour, range(24))
_HOUR12 = _Slot("hour12", _hour12, range(1, 13))
_PM = _Slot("pm", _pm, range(2))
_MINUTE = _Slot("minute", _minute, range(60))
_SECOND = _Slot("second", _second, range(60))
_NUMERIC_ZONE = _Offset(minutes=True, seconds=False, colons=False, z_for_utc=False)

# Every token of Go's time.Format, by its text in a layout.
_LAYOUT_TOKENS: dict[str, LayoutToken] = {
    "January": Field(_MONTH, _long_month),
    "Jan": Field(_MONTH, lambda month: _long_month(month)[:3]),
    "1": Field(_MONTH, str),
    "01": Field(_MONTH, _two_digits),
    "Monday": Field(_WEEKDAY, _long_day),
    "Mon": Field(_WEEKDAY, lambda weekday: _long_day(weekday)[:3]),
    "2": Field(_DAY, str),
    "_2": Field(_DAY, "{:2d}".format),
    "02": Field(_DAY, _two_digits),
    "__2": Field(_YEAR_DAY, "{:3d}".format),
    "002": Field(_YEAR_DAY, "{:03d}".format),
    "15": Field(_HOUR, _two_digits),
    "3": Field(_HOUR12, str),
    "03": Field(_HOUR12, _two_digits),
    "4": Field(_MINUTE, str),
    "04": Field(_MINUTE, _two_digits),
    "5": Field(_SECOND, str),
    "05": Field(_SECOND, _two_digits),
    "2006": Field(_YEAR, "{:04d}".format, regex="[0-9]{4}"),
    # Go reads 69-99 as 19xx, 00-68 as 20xx.
    "06": Field(_YEAR, lambda year: _two_digits(year % 100), values=range(1969, 2069)),
    "PM": Field(_PM, lambda pm: "PM" if pm else "AM"),
    "pm": Field(_PM, lambda pm: "pm" if pm else "am"),
    "MST": _ZoneName(),
    "Z070000": _Offset(minutes=True, seconds=True, colons=False, z_for_utc=True),
    "Z07:00:00": _Offset(minutes=True, seconds=True, colons=True, z_for_utc=True),
    "Z0700": _Offset(minutes=True, seconds=False, colons=False, z_for_utc=True),
    "Z07:00": _Offset(minutes=True, seconds=False, colons=True, z_for_utc=True),
    "Z07": _Offset(minutes=False, seconds=False, colons=False, z_for_utc=True),
    "-070000": _Offset(minutes=True, seconds=True, colons=False, z_for_utc=False),
    "-07:00:00": _Offset(minutes=True, seconds=True, colons=True, z_for_utc=False),
    "-0700": _NUMERIC_ZONE,
    "-07:00": _Offset(minutes=True, seconds=False, colons=True, z_for_utc=False),
    "-07": _Offset(minutes=False, seconds=False, colons=False, z_for_utc=False),
}


def _by_first_char(tokens: dict[str, LayoutToken]) -> dict[str, list[tuple[str, LayoutToken]]]:
    """The tokens by their first character, longest first: at one position the longest
    wins ("January" over "Jan", "15" over "1"), as in Go."""
    by_first_char: dict[str, list[tuple[str, LayoutToken]]] = {}
    for text, token in sorted(tokens.items(), key=lambda item: -len(item[0])):
        by_first_char.setdefault(text[0], []).append((text, token))
    return by_first_char


_TOKENS_BY_FIRST_CHAR = _by_first_char(_LAYOUT_TOKENS)
# "Jan" and "Mon" are no tokens inside a word ("Month", "Janitor").
_NOT_BEFORE_LOWER_CASE = frozenset({"Jan", "Mon"})

LayoutChunk = str | LayoutToken


def _is_ascii_in(text: str, index: int, low: str, high: str) -> bool:
    return index < len(text) and low <= text[index] <= high


def _fraction_at(layout: str, index: int) -> tuple[LayoutToken, int] | None:
    """.0, .000, ,9, .999...: a run of one digit, 0 or 9, that no other digit follows."""
    repeated = layout[index + 1 : index + 2]
    if repeated not in ("0", "9"):
        return None
    end = index + 1
    while end < len(layout) and layout[end] == repeated:
        end += 1
    if _is_ascii_in(layout, end, "0", "9"):
        return None
    digits = end - index - 1
    return _Fraction(layout[index], digits, trim=repeated == "9"), end - index


def _token_at(layout: str, index: int) -> tuple[LayoutToken, int] | None:
    """The layout token starting at index and its length, by Go's nextStdChunk rules."""
    if layout.startswith("_2006", index):
        return None  # Go reads a literal "_" and then "2006", not "_2" and "006"
    for text, token in _TOKENS_BY_FIRST_CHAR.get(layout[index], ()):
        if not layout.startswith(text, index):
            continue
        if text in _NOT_BEFORE_LOWER_CASE and _is_ascii_in(layout, index + len(text), "a", "z"):
            continue
        return token, len(text)
    if layout[index] in ".,":
        return _fraction_at(layout, index)
    return None


@lru_cache(maxsize=32)
def _layout_chunks(layout: str) -> tuple[LayoutChunk, ...]:
    """A Go time layout as literal text and tokens, in order."""
    chunks: list[LayoutChunk] = []
    literal_start = index = 0
    while index < len(layout):
        found = _token_at(layout, index)
        if found is None:
            index += 1
            continue
        if index > literal_start:
            chunks.append(layout[literal_start:index])
        token, length = found
        chunks.append(token)
        index += length
        literal_start = index
    if literal_start < len(layout):
        chunks.append(layout[literal_start:])
    return tuple(chunks)


# nsq_to_file's strftime: each of these becomes a Go layout token; the rest stays as it is.
_STRFTIME_TO_LAYOUT = {
    "B": "January", "b": "Jan", "m": "01", "A": "Monday", "a": "Mon", "d": "02",
    "H": "15", "I": "03", "M": "04", "S": "05", "Y": "2006", "y": "06", "p": "PM",
    "Z": "MST", "z": "-0700", "%": "%",
}  # fmt: skip
_STRFTIME_DIRECTIVE = re.compile("%([" + "".join(_STRFTIME_TO_LAYOUT) + "])")


def datetime_chunks(datetime_format: str) -> tuple[LayoutChunk, ...]:
    """A --datetime-format as layout chunks: its directives become Go layout tokens."""
    layout = _STRFTIME_DIRECTIVE.sub(lambda match: _STRFTIME_TO_LAYOUT[match[1]], datetime_format)
    return _layout_chunks(layout)


def go_strftime(datetime_format: str, when: datetime) -> str:
    """What nsq_to_file prints for --datetime-format at `when` (an aware datetime).

    Go's quirk included: the strftime directives become a Go layout, so Go layout tokens
    in the literal text expand too ("v1 %Y %% Jan" gives "v11 2026 % Nov" in November).
    """
    return "".join(
        chunk if isinstance(chunk, str) else chunk.render(when)
        for chunk in datetime_chunks(datetime_format)
    )
