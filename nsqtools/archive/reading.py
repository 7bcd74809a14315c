"""Archives read back by the jobs over them (nsq archive): what each file holds, and its
whole lines (the jobs find the files, through Spark, and give them here as streams).

A scan reads a file once, to its end: how many whole lines and bytes it holds, whether
they are JSON envelopes (nsq_to_file --format json) or raw bodies, and what is damaged:
a gzip member cut short or corrupt, a last line without its newline. The readable part
of a damaged file is its whole lines before the damage; whole_lines gives them.

Pure Python and blocking; the Spark jobs run it in their tasks, one file at a time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

from nsqtools.archive.recovery import GzipPiece, gzip_pieces
from nsqtools.errors import NsqError

GZIP_MAGIC = b"\x1f\x8b"
_BLOCK_SIZE = 1024 * 1024
# What a first line must hold to be a JSON envelope (nsqtools.formats.envelope).
_ENVELOPE_KEYS = frozenset({"id", "timestamp_ns", "body"})
# Paths Spark's own readers take as they are: no glob characters, nothing a URI escapes.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._/@,+~:-]+")

Format = Literal["json", "raw"]


class SourceError(NsqError):
    """A source that names no archive: one line for the user."""


@dataclass(frozen=True)
class FileReport:
    """One archive file as a scan found it."""

    path: str  # an absolute local path, or a URI (nsqtools.spark.storage.shown)
    size: int  # bytes on disk
    gzip: bool  # by its content, whatever its name says
    format: Format | None  # None: no whole line to tell by
    lines: int  # whole lines
    content_bytes: int  # their bytes, newlines included
    damage: str | None  # why the rest of the file cannot be read, if it cannot

    @property
    def spark_reads_as_is(self) -> bool:
        """Spark's own readers read exactly the whole lines: the file is undamaged, its
        name says gzip when it is, and its path needs no escaping."""
        return (
            self.damage is None
            and self.gzip == self.path.endswith(".gz")
            and _PLAIN_PATH.fullmatch(self.path) is not None
        )


def scan(file: BinaryIO, path: str, format: Format | None = None) -> FileReport:
    """Read a file (an open binary stream) to its end; `path` names it in the report;
    `format` forces one, else the first whole line tells."""
    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    gzip = file.read(2) == GZIP_MAGIC
    file.seek(0)
    counter = _LineCounter()
    damage = None
    for piece in _pieces(file, gzip):
        counter.add(piece.content)
        damage = piece.damage or damage
    if damage is None and counter.tail:
        damage = f"the last line is cut ({counter.tail} bytes without a newline)"
    return FileReport(
        path=path,
        size=size,
        gzip=gzip,
        format=format or _format_of(counter.first_line),
        lines=counter.lines,
        content_bytes=counter.content_bytes,
        damage=damage,
    )


def scan_file(path: str, format: Format | None = None) -> FileReport:
    """scan() of a local file."""
    with open(path, "rb") as file:
        return scan(file, path, format)


def whole_lines(file: BinaryIO) -> Iterator[bytes]:
    """The whole lines of a file (an open binary stream), without their newlines, up
    to any damage."""
    gzip = file.read(2) == GZIP_MAGIC
    file.seek(0)
    rest = b""
    for piece in _pieces(file, gzip):
        lines = (rest + piece.content).split(b"\n")
        rest = lines.pop()
        yield from lines


def _pieces(file: BinaryIO, gzip: bool) -> Iterator[GzipPiece]:
    if gzip:
        yield from gzip_pieces(file, _BLOCK_SIZE)
        return
    while block := file.read(_BLOCK_SIZE):
        yield GzipPiece(content=block)


class _LineCounter:
    """Whole lines and their bytes in a stream of blocks, and the first line."""

    def __init__(self) -> None:
        self.lines = 0
        self.content_bytes = 0
        self.tail = 0  # bytes after the last newline so far
        self.first_line: bytes | None = None
        self._start = b""  # the first line while it is incomplete

    def add(self, block: bytes) -> None:
        newlines = block.count(b"\n")
        if self.first_line is None:
            self._start += block[: block.find(b"\n") if newlines else len(block)]
            if newlines or len(self._start) > _BLOCK_SIZE:  # too long to be an envelope
                self.first_line = self._start[:_BLOCK_SIZE]
        if newlines:
            self.lines += newlines
            last = block.rfind(b"\n")
            self.content_bytes += self.tail + last + 1
            self.tail = len(block) - last - 1
        else:
            self.tail += len(block)


def _format_of(first_line: bytes | None) -> Format | None:
    if first_line is None:
        return None
    try:
        fields = json.loads(first_line)
    except ValueError:
        return "raw"
    return "json" if isinstance(fields, dict) and fields.keys() >= _ENVELOPE_KEYS else "raw"
