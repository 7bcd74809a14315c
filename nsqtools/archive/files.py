"""One archive file being written: records gathered in memory, then written and synced
together, so a sync is one write and one fsync whatever the number of records.

Blocking calls: the archive sink syncs on its event loop (short, and the thread hops
would cost more) and opens and closes files in a worker thread. With gzip, every sync
writes the records gathered since the last one as one complete gzip member, so each
member on disk holds only records that were synced before their messages were FIN'd, and
a file cut after its last complete member is whole. The members' header is Go's (no
mtime, OS 255), so our files and Go's differ in no header byte. A file is opened with
its directories made and its name synced (the entries a power loss would otherwise
take), once per file, not per sync.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from pathlib import Path

from nsqtools.archive.placing import make_directories
from nsqtools.durable import fsync_directory

# Go's compress/gzip header: magic, deflate, no flags, mtime 0, then XFL, then OS 255.
_GZIP_MAGIC = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"
_GZIP_OS_UNKNOWN = b"\xff"
_GZIP_TRAILER = struct.Struct("<II")  # CRC-32, size mod 2**32


def gzip_member(data: bytes, level: int) -> bytes:
    """`data` as one complete gzip member, as Go's gzip.Writer writes it."""
    # XFL as Go sets it: 2 for the best compression, 4 for the fastest, else 0.
    extra_flags = b"\x02" if level == 9 else b"\x04" if level == 1 else b"\x00"
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    deflated = compressor.compress(data) + compressor.flush()
    trailer = _GZIP_TRAILER.pack(zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join((_GZIP_MAGIC, extra_flags, _GZIP_OS_UNKNOWN, deflated, trailer))


class ArchiveWriter:
    """An open archive file: add() gathers records, sync() makes them durable."""

    def __init__(self, path: Path, fd: int, gzip_level: int | None) -> None:
        self.path = path
        self._fd = fd
        self._gzip_level = gzip_level
        self._gathered: list[bytes] = []
        # Bytes in the file as Go counts them for --rotate-size: what was on disk when
        # opened, plus every record added since (uncompressed).
        self.size = os.fstat(fd).st_size
        self._synced = self.size  # bytes on disk as of the last sync: whole records
        self._written = self.size
        self._closed = False

    @classmethod
    def open(cls, path: Path, *, exclusive: bool, gzip_level: int | None) -> ArchiveWriter:
        """Open for appending, or create it exclusively (FileExistsError if it exists),
        making its missing directories. The directory entries are synced before any
        record is: a file fsync() does not make its name durable, and a power loss must
        not take a file whose messages were FIN'd."""
        make_directories(path.parent)
        mode = os.O_EXCL if exclusive else os.O_APPEND
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | mode, 0o666)
        try:
            fsync_directory(path.parent)
        except OSError:
            os.close(fd)
            raise
        return cls(path, fd, gzip_level)

    def add(self, records: bytes) -> None:
        self._gathered.append(records)
        self.size += len(records)

    @property
    def has_unsynced(self) -> bool:
        return bool(self._gathered)

    def sync(self) -> None:
        """Write what was gathered (one gzip member with gzip) and fsync the file."""
        if self._gathered:
            records = b"".join(self._gathered)
            self._gathered = []
            level = self._gzip_level
            self._write(records if level is None else gzip_member(records, level))
        os.fsync(self._fd)
        self._synced = self._written

    def close(self) -> None:
        """Sync and close. A gzip file that got no record still gets an empty member:
        `gzip -d` refuses a file of zero bytes."""
        if self._written == 0 and not self._gathered and self._gzip_level is not None:
            self._write(gzip_member(b"", self._gzip_level))
        self.sync()
        self._closed = True
        os.close(self._fd)

    def abandon(self) -> None:
        """Close without writing anything more, after a failed write or sync: cut back
        to what the last sync made durable if we can (else a restart's repair does)."""
        if self._closed:
            return
        self._closed = True
        self._gathered = []
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._synced)
        os.close(self._fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            self._written += written
            view = view[written:]
