"""The names nsq_to_file gives its files, exactly as NSQ v1.3.0's Go tool does, and no name
that leaves the directory it is written to.

Owns Go's strftime (a strftime subset turned into a Go time layout, then formatted by Go's
time.Format, whose layout tokens therefore expand in literal text too), the filename
format's tokens (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV>, replaced in Go's order), and the
check that a topic such as ".." cannot place a file outside the directory.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Protocol


class BadName(ValueError):
    """A filename format, or a name it gives, that cannot be used: one line for the user."""


def _short(hostname: str) -> str:
    """The host name up to its first '.', Go's default for <HOST>."""
    return hostname.split(".")[0]


# ---------------------------------------------------------------------------------------
# Go's time.Format layout tokens ("std chunks" in Go's time/format.go)


class _Std(Protocol):
    """A layout token: what it prints for an instant."""

    def render(self, when: datetime) -> str: ...


@dataclass(frozen=True)
class _Field:
    """A calendar or clock field (month, day, hour...) and the way one token prints it."""

    value: Callable[[datetime], int]
    show: Callable[[int], str]

    def render(self, when: datetime) -> str:
        return self.show(self.value(when))


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


@dataclass(frozen=True)
class _ZoneName:
    """MST: the zone's abbreviation, or its offset as -0700 when it has none."""

    def render(self, when: datetime) -> str:
        return when.tzname() or _NUMERIC_ZONE.render(when)


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
        shown = f"{nanoseconds:09d}"[: self.digits]  # Go prints at most 9 digits
        if self.trim:
            shown = shown.rstrip("0")
            return self.separator + shown if shown else ""
        return self.separator + shown


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


def _year_day(when: datetime) -> int:
    return when.timetuple().tm_yday


def _weekday(when: datetime) -> int:
    return when.weekday()


def _hour12(hour: int) -> int:
    return hour % 12 or 12  # noon is 12PM, midnight 12AM


def _long_month(month: int) -> str:
    return _LONG_MONTHS[month - 1]


def _long_day(weekday: int) -> str:
    return _LONG_DAYS[weekday]


_NUMERIC_ZONE = _Offset(minutes=True, seconds=False, colons=False, z_for_utc=False)

# Every token of Go's time.Format, by its text in a layout.
_LAYOUT_TOKENS: dict[str, _Std] = {
    "January": _Field(_month, _long_month),
    "Jan": _Field(_month, lambda month: _long_month(month)[:3]),
    "1": _Field(_month, str),
    "01": _Field(_month, "{:02d}".format),
    "Monday": _Field(_weekday, _long_day),
    "Mon": _Field(_weekday, lambda weekday: _long_day(weekday)[:3]),
    "2": _Field(_day, str),
    "_2": _Field(_day, "{:2d}".format),
    "02": _Field(_day, "{:02d}".format),
    "__2": _Field(_year_day, "{:3d}".format),
    "002": _Field(_year_day, "{:03d}".format),
    "15": _Field(_hour, "{:02d}".format),
    "3": _Field(_hour, lambda hour: str(_hour12(hour))),
    "03": _Field(_hour, lambda hour: f"{_hour12(hour):02d}"),
    "4": _Field(_minute, str),
    "04": _Field(_minute, "{:02d}".format),
    "5": _Field(_second, str),
    "05": _Field(_second, "{:02d}".format),
    "2006": _Field(_year, "{:04d}".format),
    "06": _Field(_year, lambda year: f"{year % 100:02d}"),
    "PM": _Field(_hour, lambda hour: "PM" if hour >= 12 else "AM"),
    "pm": _Field(_hour, lambda hour: "pm" if hour >= 12 else "am"),
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


def _by_first_char(tokens: dict[str, _Std]) -> dict[str, list[tuple[str, _Std]]]:
    """The tokens by their first character, longest first: at one position the longest
    wins ("January" over "Jan", "15" over "1"), as in Go."""
    by_first_char: dict[str, list[tuple[str, _Std]]] = {}
    for text, token in sorted(tokens.items(), key=lambda item: -len(item[0])):
        by_first_char.setdefault(text[0], []).append((text, token))
    return by_first_char


_TOKENS_BY_FIRST_CHAR = _by_first_char(_LAYOUT_TOKENS)
# "Jan" and "Mon" are no tokens inside a word ("Month", "Janitor").
_NOT_BEFORE_LOWER_CASE = frozenset({"Jan", "Mon"})

LayoutChunk = str | _Std


def _is_ascii_in(text: str, index: int, low: str, high: str) -> bool:
    return index < len(text) and low <= text[index] <= high


def _fraction_at(layout: str, index: int) -> tuple[_Std, int] | None:
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


def _token_at(layout: str, index: int) -> tuple[_Std, int] | None:
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


def _datetime_chunks(datetime_format: str) -> tuple[LayoutChunk, ...]:
    layout = _STRFTIME_DIRECTIVE.sub(lambda match: _STRFTIME_TO_LAYOUT[match[1]], datetime_format)
    return _layout_chunks(layout)


def go_strftime(datetime_format: str, when: datetime) -> str:
    """What nsq_to_file prints for --datetime-format at `when` (an aware datetime).

    Go's quirk included: the strftime directives become a Go layout, so Go layout tokens
    in the literal text expand too ("v1 %Y %% Jan" gives "v11 2026 % Nov" in November).
    """
    return "".join(
        chunk if isinstance(chunk, str) else chunk.render(when)
        for chunk in _datetime_chunks(datetime_format)
    )


# ---------------------------------------------------------------------------------------
# The filename format


@dataclass(frozen=True)
class FilenameFormat:
    """--filename-format with the values fixed for this run: host, pid, <REV> or not, .gz.

    One FilenameFormat serves every topic: stem() gives a topic's name at an instant with
    <REV> still in it, relative_path() the path for one revision of it.
    """

    filename_format: str  # without <REV> when this run needs none, as Go does
    datetime_format: str
    host: str
    pid: int
    gzip: bool

    @classmethod
    def build(
        cls,
        filename_format: str,
        *,
        datetime_format: str,
        host_identifier: str,
        gzip: bool,
        rev_required: bool,
        pid: int | None = None,
        hostname: str | None = None,
    ) -> FilenameFormat:
        """Go's computeFilenameFormat, but for every topic.

        rev_required: gzip, rotation, or a work dir other than the output dir, which all
        need <REV> to name a second file of the same stem.
        """
        texts = (filename_format, datetime_format, host_identifier)
        if any("\x00" in text for text in texts):
            raise BadName("file names cannot contain a NUL character")
        if rev_required and "<REV>" not in filename_format:
            raise BadName(
                "--filename-format must contain <REV> with --gzip, --rotate-size, "
                "--rotate-interval, or a --work-dir other than --output-dir"
            )
        if not rev_required:
            filename_format = filename_format.replace("<REV>", "")
        return cls(
            filename_format=filename_format,
            datetime_format=datetime_format,
            host=_host(host_identifier, hostname or socket.gethostname()),
            pid=os.getpid() if pid is None else pid,
            gzip=gzip,
        )

    def stem(self, topic: str, when: datetime) -> str:
        """Go's currentFilename for this topic: <REV> is still in it. Another stem than
        the last one is what starts a new file at revision 0."""
        # Go's replacements, in Go's order (a host identifier may hold <PID>).
        name = self.filename_format.replace("<TOPIC>", topic)
        name = name.replace("<HOST>", self.host).replace("<PID>", str(self.pid))
        if self.gzip and not name.endswith(".gz"):
            name += ".gz"
        return name.replace("<DATETIME>", go_strftime(self.datetime_format, when))

    def relative_path(self, stem: str, rev: int) -> PurePosixPath:
        """The path, relative to the work or output dir, of this revision of the stem."""
        return _inside(stem.replace("<REV>", f"-{rev:06d}"))

    def check_topic(self, topic: str) -> None:
        """Raise BadName if this topic's name would leave the directory (topic "..")."""
        try:
            self.relative_path(self.stem(topic, datetime.now().astimezone()), 0)
        except BadName as error:
            raise BadName(f"topic {topic!r}: {error}") from None


def _host(host_identifier: str, hostname: str) -> str:
    short = _short(hostname)
    if not host_identifier:
        return short
    return host_identifier.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)


def _inside(name: str) -> PurePosixPath:
    """name as Go's path.Join places it under a directory, refusing to leave it."""
    normal = posixpath.normpath(name.lstrip("/") or ".")
    if normal == ".":
        raise BadName(f"--filename-format gives an empty file name ({name!r})")
    if normal == ".." or normal.startswith("../"):
        raise BadName(f"--filename-format gives {name!r}, a file outside its directory")
    return PurePosixPath(normal)
