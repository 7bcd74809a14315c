"""The names nsq_to_file gives its files, exactly as NSQ v1.3.0's Go tool does, and no name
that leaves the directory it is written to.

Owns the filename format's tokens (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV>, replaced in
Go's order; <DATETIME> by Go's strftime, in timelayout.py), and the check that a topic such
as ".." cannot place a file outside the directory. Reading names back is nameparsing.py's.
"""

from __future__ import annotations

import os
import posixpath
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath

from nsqtools.archive.timelayout import go_strftime


class BadName(ValueError):
    """A filename format, or a name it gives, that cannot be used: one line for the user."""


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


def _short(hostname: str) -> str:
    """The host name up to its first '.', Go's default for <HOST>."""
    return hostname.split(".")[0]


def _inside(name: str) -> PurePosixPath:
    """name as Go's path.Join places it under a directory, refusing to leave it."""
    normal = posixpath.normpath(name.lstrip("/") or ".")
    if normal == ".":
        raise BadName(f"--filename-format gives an empty file name ({name!r})")
    if normal == ".." or normal.startswith("../"):
        raise BadName(f"--filename-format gives {name!r}, a file outside its directory")
    return PurePosixPath(normal)
