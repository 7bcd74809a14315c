"""Files a crash left behind (kill -9, power loss), cut back in place to what is whole.

A file holds records that end in b"\\n" (a message body, or one JSON line). A plain file
is cut after its last b"\\n". A gzip file (the caller says which: a plain archive may
well begin with a gzip body) is a series of members, one per sync; it is cut after the
last complete member (its deflate stream ended and its CRC32 and length trailer check)
at which the content read so far is empty or ends in b"\\n", so that it always
decompresses to whole lines. Both are read in blocks, so memory stays bounded however
large the file or its content. gzip_pieces, the member-by-member reading, also serves the
archive jobs (reading.py).

Synchronous and blocking: the archive sink calls it from a worker thread.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# zlib's window size for the gzip format (16 + 15): header and trailer are checked.
_GZIP_WBITS = 31
# Bytes read, and content inflated, at a time.
_BLOCK_SIZE = 64 * 1024


@dataclass(frozen=True)
class Recovered:
    path: Path
    kept: int  # bytes kept
    cut: int  # bytes cut off the end


def cut_back(path: Path, *, gzip: bool) -> Recovered:
    """Truncate `path` to its last complete record or gzip member, and fsync it."""
    with path.open("r+b") as file:
        size = os.fstat(file.fileno()).st_size
        kept = _whole_gzip_length(file) if gzip else _whole_lines_length(file, size)
        if kept < size:
            file.truncate(kept)
        # A crash may have left the kept bytes in the page cache only.
        os.fsync(file.fileno())
    return Recovered(path, kept, size - kept)


def _whole_lines_length(file: BinaryIO, size: int) -> int:
    """The length up to and including the last b"\\n", found from the end."""
    end = size
    while end > 0:
        start = max(0, end - _BLOCK_SIZE)
        file.seek(start)
        newline = file.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _whole_gzip_length(file: BinaryIO) -> int:
    """The length of the longest run of complete members that ends in a whole line."""
    kept = 0
    content_end = b""  # the last byte of the content so far; b"" while there is none
    for member_end, member_last_byte in _complete_members(file):
        content_end = member_last_byte or content_end  # an empty member changes nothing
        if content_end in (b"", b"\n"):
            kept = member_end
    return kept


def _complete_members(file: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(where it ends in the file, the last byte of its content or b"") for each member,
    in order, until the file ends inside one or one is corrupt."""
    last_byte = b""
    for piece in gzip_pieces(file):
        last_byte = piece.content[-1:] or last_byte
        if piece.member_end is not None:
            yield piece.member_end, last_byte
            last_byte = b""


@dataclass(frozen=True)
class GzipPiece:
    """What reading a gzip file gives, in order: a block of a member's content; the end
    of a member (member_end, its offset in the file); or, last, why the file cannot be
    read further (damage)."""

    content: bytes = b""
    member_end: int | None = None
    damage: str | None = None


def gzip_pieces(file: BinaryIO, block_size: int = _BLOCK_SIZE) -> Iterator[GzipPiece]:
    """The content of each member of a gzip file, a block at a time, each member's end,
    and a last piece naming the damage if the file ends inside a member or one is
    corrupt. Memory stays bounded by the block size."""
    read_end = 0  # the file offset after the bytes read so far
    pending = b""  # bytes read but not yet given to an inflater: the next member's start
    while True:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        started = False
        while not inflater.eof:
            if not pending:
                pending = file.read(block_size)
                if not pending:
                    if started:
                        yield GzipPiece(damage=f"cut inside a gzip member (at byte {read_end})")
                    return
                read_end += len(pending)
            started = True
            try:
                yield from _inflate(inflater, pending, block_size)
            except zlib.error:
                at = read_end - len(pending)
                yield GzipPiece(damage=f"a corrupt gzip member (at byte {at})")
                return
            pending = inflater.unused_data
        yield GzipPiece(member_end=read_end - len(pending))


def _inflate(inflater: zlib._Decompress, data: bytes, block_size: int) -> Iterator[GzipPiece]:
    """Give `data` to the inflater, taking at most a block of content at a time (a
    small member may inflate to gigabytes)."""
    while True:
        content = inflater.decompress(data, block_size)
        if content:
            yield GzipPiece(content=content)
        data = inflater.unconsumed_tail
        # Content zlib still holds when the input runs out comes with the next input:
        # with the trailer, at the latest.
        if inflater.eof or not data:
            return
