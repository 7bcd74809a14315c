"""nsq_to_file's names read back (NameParser): topic, host, revision and datetime from a
file's name, given the filename and datetime formats it ran with.

Owns one regex per format, whose <DATETIME> parts the layout tokens of timelayout.py give,
and the choice among the ways a name can be read (the topic as long as it can be, the
host as short, then the first reading of the datetime that is a date).
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, tzinfo

from nsqtools.archive.names import BadName
from nsqtools.archive.timelayout import Field, LayoutChunk, LayoutToken, Reading, datetime_chunks


@dataclass(frozen=True)
class ParsedName:
    """What a file's name says; None for what its filename format does not hold."""

    topic: str
    host: str | None
    when: datetime | None  # aware, to the datetime format's precision
    rev: int | None  # None: no revision in the name (Go drops <REV> when not required)
    gzip: bool  # the name ends in .gz
    pid: int | None


@dataclass(frozen=True)
class _DatetimePart:
    """A chunk of the datetime layout as a name is read: its regex, and the token that
    reads its text (None for literal text)."""

    regex: re.Pattern[str]
    token: LayoutToken | None

    @classmethod
    def of(cls, chunk: LayoutChunk) -> _DatetimePart:
        if isinstance(chunk, str):
            return cls(re.compile(re.escape(chunk)), None)
        return cls(re.compile(f"(?:{chunk.pattern})"), chunk)


def _reading(parts: tuple[_DatetimePart, ...], texts: list[str]) -> Reading | None:
    reading = Reading()
    for part, text in zip(parts, texts, strict=True):
        if part.token is not None and not part.token.read(text, reading):
            return None
    return reading


def _splits(parts: tuple[_DatetimePart, ...], text: str, start: int = 0) -> Iterator[list[str]]:
    """Every way to read text as the parts in turn, each part as long as it can be first."""
    if not parts:
        if start == len(text):
            yield []
        return
    for end in range(len(text), start - 1, -1):
        if parts[0].regex.fullmatch(text, start, end):
            for rest in _splits(parts[1:], text, end):
                yield [text[start:end], *rest]


def _gives_a_date(parts: tuple[_DatetimePart, ...]) -> bool:
    slots = {part.token.slot.name for part in parts if isinstance(part.token, Field)}
    return "year" in slots and ({"month", "day"} <= slots or "year_day" in slots)


_NAME_TOKEN = re.compile("(<TOPIC>|<HOST>|<PID>|<REV>|<DATETIME>)")
_NAME_TOKEN_REGEXES = {
    "<TOPIC>": r"[.a-zA-Z0-9_-]{1,64}(?:#ephemeral)?",  # nsqd's valid topic names
    "<HOST>": "[^/]+?",
    "<PID>": "[0-9]+",
    "<REV>": "(?:-[0-9]{6,})?",  # Go's -%06d, or nothing where Go dropped <REV>
}
# A topic or host just before <REV> does not end in what <REV> would read (a revision
# past 999999 right after a topic still reads as the topic's).
_NOT_A_REV_BEFORE = "(?<!-[0-9]{6})"


def _name_regex(filename_format: str, datetime_regex: str) -> str:
    """The regex of every name the format gives: each token a named group the first
    time, the same text again after that (Go replaces every occurrence)."""
    regexes = {**_NAME_TOKEN_REGEXES, "<DATETIME>": datetime_regex}
    pieces: list[str] = []
    defined: set[str] = set()
    previous = ""
    for piece in filter(None, _NAME_TOKEN.split(filename_format)):
        group = piece[1:-1].lower()
        if piece not in regexes:
            pieces.append(re.escape(piece))
        elif piece in defined:
            pieces.append(f"(?P={group})")
        else:
            if piece == "<REV>" and previous in ("<TOPIC>", "<HOST>"):
                pieces.append(_NOT_A_REV_BEFORE)
            pieces.append(f"(?P<{group}>{regexes[piece]})")
            defined.add(piece)
        previous = piece
    if not filename_format.endswith(".gz"):
        pieces.append(r"(?:\.gz)?")  # what nsq_to_file --gzip appends
    return "".join(pieces)


@dataclass(frozen=True)
class NameParser:
    """nsq_to_file's naming read backwards: a file's topic, host, revision and datetime
    from its name, given the --filename-format and --datetime-format it ran with.

    Where a name can be read several ways, the first of these wins: the topic as long as
    it can be and the host as short as it can be (a host's dots would otherwise be read
    as the topic's, and a trailing -NNNNNN as its revision); then each datetime field as
    wide as it can be (as Go's time.Parse reads), but only a reading whose fields make
    a date (no month 13, no 30 February, a weekday that is that date's) is taken, so
    unpadded fields that run together ("v1" makes a month) read as the valid date. The
    datetime's place in the name is the regex's first: only its fields are read again.
    """

    regex: re.Pattern[str]
    datetime_parts: tuple[_DatetimePart, ...]
    zone: tzinfo | None  # of names without an offset; None: the local zone

    @classmethod
    def build(
        cls, filename_format: str, datetime_format: str, *, zone: tzinfo | None = None
    ) -> NameParser:
        """zone: where nsq_to_file ran (it names files by local time), if not here."""
        if "\x00" in filename_format + datetime_format:
            raise BadName("file names cannot contain a NUL character")
        # As Go's path.Join places a name (see names._inside); the tokens stay whole.
        placed_format = posixpath.normpath(filename_format.lstrip("/"))
        if "<TOPIC>" not in placed_format:
            raise BadName(
                f"--filename-format {filename_format!r} has no <TOPIC>: "
                "a file's topic must come from its name"
            )
        parts = tuple(map(_DatetimePart.of, datetime_chunks(datetime_format)))
        if "<DATETIME>" in placed_format and not _gives_a_date(parts):
            raise BadName(
                f"--datetime-format {datetime_format!r} gives no date "
                "(year, and month and day or day of the year)"
            )
        datetime_regex = "".join(
            f"(?P<d{index}>{part.regex.pattern})" for index, part in enumerate(parts)
        )
        regex = re.compile(_name_regex(placed_format, datetime_regex))
        return cls(regex=regex, datetime_parts=parts, zone=zone)

    def parse(self, relative_path: str) -> ParsedName | None:
        """relative_path: the file's path under the directory nsq_to_file wrote to, with
        '/' between directories. None if the format does not give that name."""
        match = self.regex.fullmatch(relative_path)
        if match is None:
            return None
        groups = match.groupdict()
        when = None
        if "datetime" in groups:
            when = self._when(match)
            if when is None:
                return None
        rev, pid = groups.get("rev"), groups.get("pid")
        return ParsedName(
            topic=groups["topic"],
            host=groups.get("host"),
            when=when,
            rev=int(rev[1:]) if rev else None,
            gzip=relative_path.endswith(".gz"),
            pid=None if pid is None else int(pid),
        )

    def _when(self, match: re.Match[str]) -> datetime | None:
        """The datetime as the regex read it or, if that is no date, the first reading
        of the same text that is."""
        parts = self.datetime_parts
        first = [match[f"d{index}"] for index in range(len(parts))]
        for texts in itertools.chain([first], _splits(parts, match["datetime"])):
            reading = _reading(parts, texts)
            when = None if reading is None else reading.when(self.zone)
            if when is not None:
                return when
        return None
