"""Making a directory's entries durable: what every writer that promises "on disk before
the FIN" needs beside fsync of its files (nsq_to_file's archive, the dead letters).

A file's fsync makes its content durable, not its name: after a power loss a file made,
linked, renamed or removed since its directory was last synced may be back as it was.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make the entries of `directory` (files created, linked or removed) durable."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
