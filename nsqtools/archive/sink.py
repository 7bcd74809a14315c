"""The archive sink: one topic's messages into rotating files, FIN'd only once synced.

A TopicArchive is the runtime Sink of one topic. It gathers each delivery's records in
the open file (files.ArchiveFile) and settles the deliveries done only after the file
holding them is synced: when max-in-flight messages wait, when the consumer is starved
(the runtime's flush), every --sync-interval (the runtime's tick), at rotation and at the
end. Rotation follows Go's nsq_to_file: a new <DATETIME> value (REV back to 0),
--rotate-interval (strictly longer than), --rotate-size (uncompressed bytes, checked
before each record, so a file passes the size by up to one record); REV goes up when a
name is taken (exclusive create with gzip or --rotate-interval, else append). A closed
file in a separate work dir moves to the output dir, never overwriting.

A sync (one write and one fsync of the records gathered since the last) runs on the
event loop itself: on a local disk it takes a fraction of a millisecond, and the two
thread hops it would otherwise pay cost a quarter of the throughput (measured: about
210k against 150k msg/s); on a disk that hangs, the messages held time out in nsqd
either way. Opening, closing and moving files, rarer and slower, run in a worker thread.
A failed write or sync is final: the sink raises SinkFailed, settles nothing more, and
what it held goes back to nsqd.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import trio

from nsqtools import formats
from nsqtools.archive.files import ArchiveWriter
from nsqtools.archive.inprogress import Marker, OpenFile, destinations
from nsqtools.archive.names import FilenameFormat
from nsqtools.archive.placing import move_without_overwrite
from nsqtools.archive.recovery import cut_back
from nsqtools.errors import describe_file_error
from nsqtools.runtime.sinks import Delivery, SinkFailed

log = logging.getLogger("nsqtools.archive")

T = TypeVar("T")


@dataclass(frozen=True)
class ArchiveSettings:
    """How to write archives (nsq_to_file's options, checked)."""

    channel: str
    output_dir: Path
    work_dir: Path
    names: FilenameFormat
    gzip_level: int | None  # None: no gzip
    rotate_size: int  # bytes; 0: never by size
    rotate_interval: float  # seconds; 0: never by age
    sync_interval: float
    skip_empty_files: bool
    max_in_flight: int
    json: bool  # one JSON envelope per line instead of the raw body

    @property
    def exclusive(self) -> bool:
        """Go creates files exclusively with gzip or an interval (else it appends)."""
        return self.gzip_level is not None or self.rotate_interval > 0

    @property
    def moves(self) -> bool:
        return self.work_dir != self.output_dir


@dataclass
class ArchiveCounters:
    """What every topic's archive has done so far (status lines, the benchmark)."""

    messages: int = 0  # synced and FIN'd
    bytes: int = 0  # uncompressed bytes written
    syncs: int = 0
    files: int = 0  # files opened


class TopicArchive:
    """The files of one topic: a runtime Sink."""

    tick_interval: float | None

    def __init__(self, topic: str, settings: ArchiveSettings, counters: ArchiveCounters) -> None:
        self.topic = topic
        self.settings = settings
        self.counters = counters
        self.tick_interval = settings.sync_interval
        self._lock = trio.Lock()  # the file's state: rotation, closing
        self._stem_second = -1  # the second _stem_now was computed for
        self._stem_now = ""
        self._file: ArchiveWriter | None = None
        self._marker: Marker | None = None
        self._stem = ""  # the current name before <REV>; a new one resets REV
        self._rev = 0
        self._opened: OpenFile | None = None  # the current file's name
        self._opened_at = 0.0  # trio time
        self._held: list[Delivery] = []
        self._held_count = 0
        self._failure: SinkFailed | None = None
        self._where = f"[{topic}/{settings.channel}]"

    # -- the runtime's side ------------------------------------------------------------

    async def accept(self, delivery: Delivery) -> None:
        async with self._lock:
            self._check_usable()
            await self._rotate_if_due()
            await self._add(self._records(delivery))
            self._held.append(delivery)
            self._held_count += delivery.count
            if self._held_count >= self.settings.max_in_flight:
                self._sync()

    async def flush(self) -> None:
        async with self._lock:
            self._check_usable()
            self._sync()

    async def tick(self) -> None:
        """Go's sync ticker: rotate if due (or only close, with --skip-empty-files), sync."""
        async with self._lock:
            self._check_usable()
            if self._rotation_due():
                if self.settings.skip_empty_files:
                    self._sync()
                    await self._close_file()
                else:
                    await self._rotate()
            self._sync()

    async def close(self) -> None:
        """Sync, close and place the current file (SIGHUP, the end of the run); the next
        message opens the next one."""
        async with self._lock:
            if self._failure is None:
                self._sync()
                await self._close_file()

    # -- records -----------------------------------------------------------------------

    def _records(self, delivery: Delivery) -> list[bytes]:
        """The delivery's lines, the body (Go's output) or the JSON envelope of each
        message: each apart with --rotate-size (a file may end between two), else all in
        one."""
        apart = bool(self.settings.rotate_size)
        if not self.settings.json:
            bodies = delivery.bodies
            return (
                [formats.raw_lines([body]) for body in bodies]
                if apart
                else [formats.raw_lines(bodies)]
            )
        origin = formats.Origin(self.topic, self.settings.channel, delivery.nsqd_address)
        messages = delivery.messages
        if apart:
            return [formats.json_lines([message], origin) for message in messages]
        return [formats.json_lines(messages, origin)]

    async def _add(self, records: list[bytes]) -> None:
        """Go checks the size before each record: a file passes it by at most one."""
        rotate_size = self.settings.rotate_size
        for record in records:
            assert self._file is not None  # _rotate_if_due opened one
            if rotate_size and self._file.size > rotate_size:
                await self._rotate()
                assert self._file is not None
            self._file.add(record)
            self.counters.bytes += len(record)

    # -- rotation ----------------------------------------------------------------------

    def _rotation_due(self) -> bool:
        if self._file is None or self._current_stem() != self._stem:
            return True
        interval = self.settings.rotate_interval
        if interval and trio.current_time() - self._opened_at > interval:
            return True
        size = self.settings.rotate_size
        return bool(size) and self._file.size > size

    async def _rotate_if_due(self) -> None:
        if self._rotation_due():
            await self._rotate()

    async def _rotate(self) -> None:
        """Go's updateFile: close the current file, open the next (REV 0 for a new name)."""
        await self._close_file()
        stem = self._current_stem()
        self._rev = 0 if stem != self._stem else self._rev + 1
        self._stem = stem
        self._opened_at = trio.current_time()
        self._file = await self._blocking(self._open_next)
        self.counters.files += 1
        log.info("%s opening %s", self._where, self._file.path)

    def _current_stem(self) -> str:
        """The name for now; worked out once a second (a name never changes faster)."""
        now = time.time()
        if int(now) != self._stem_second:
            self._stem_second = int(now)
            when = datetime.fromtimestamp(now).astimezone()
            self._stem_now = self.settings.names.stem(self.topic, when)
        return self._stem_now

    def _open_next(self) -> ArchiveWriter:
        """The first REV from the current one whose name is free (Go's rules)."""
        settings = self.settings
        while True:
            relative_path = settings.names.relative_path(self._stem, self._rev)
            path = settings.work_dir / relative_path
            if settings.moves and (settings.output_dir / relative_path).exists():
                log.warning("%s output file already exists: %s", self._where, relative_path)
                self._rev += 1
                continue
            opened = OpenFile(self._stem, self._rev, relative_path, settings.gzip_level is not None)
            marker = Marker.create(settings.work_dir, opened)
            archive = self._open(path, marker)
            if archive is not None:
                self._opened, self._marker = opened, marker
                return archive
            marker.remove()
            self._rev += 1

    def _open(self, path: Path, marker: Marker) -> ArchiveWriter | None:
        """The file at path, or None if Go would take the next REV."""
        settings = self.settings
        if not settings.exclusive and path.exists():
            # A run that died mid-line must not glue our first line to its last.
            cut_back(path, gzip=False)
        try:
            archive = ArchiveWriter.open(
                path, exclusive=settings.exclusive, gzip_level=settings.gzip_level
            )
        except FileExistsError:
            log.warning("%s working file already exists: %s", self._where, path)
            return None
        except OSError:
            marker.remove()
            raise
        if settings.rotate_size and archive.size > settings.rotate_size:
            archive.close()
            return None
        return archive

    async def _close_file(self) -> None:
        archive, marker, opened = self._file, self._marker, self._opened
        if archive is None or marker is None or opened is None:
            return
        await self._blocking(lambda: self._close_and_place(archive, opened))
        self._file = self._marker = self._opened = None
        marker.remove()

    def _close_and_place(self, archive: ArchiveWriter, opened: OpenFile) -> None:
        archive.close()
        output_dir = self.settings.output_dir
        if self.settings.moves:
            places = destinations(output_dir, self.settings.names, opened)
            placed = move_without_overwrite(archive.path, places)
            log.info("%s moved finished file %s to %s", self._where, archive.path, placed)

    # -- sync --------------------------------------------------------------------------

    def _sync(self) -> None:
        """Make every record written so far durable, then FIN the deliveries that hold
        them. On the event loop (see above): no other task runs meanwhile."""
        self._check_usable()
        archive = self._file
        held, self._held, self._held_count = self._held, [], 0
        if archive is not None and (archive.has_unsynced or held):
            try:
                archive.sync()
            except OSError as error:
                raise self._break(error) from None
            self.counters.syncs += 1
            log.debug("%s synced %d messages to disk", self._where, sum(d.count for d in held))
        # Without a file, they were in files closed (and synced) since.
        for delivery in held:
            delivery.done()
            self.counters.messages += delivery.count

    async def _blocking(self, call: Callable[[], T]) -> T:
        """Run a file operation in a worker thread; a failure breaks the sink for good."""
        try:
            return await trio.to_thread.run_sync(call)
        except OSError as error:
            raise self._break(error) from None

    def _break(self, error: OSError) -> SinkFailed:
        place = self._file.path if self._file else self.settings.work_dir
        self._failure = SinkFailed(describe_file_error(error, place))
        archive, marker = self._file, self._marker
        self._file = self._marker = self._opened = None
        if archive is not None:
            archive.abandon()
        if marker is not None:
            marker.release()  # the next start repairs the file
        return self._failure

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
