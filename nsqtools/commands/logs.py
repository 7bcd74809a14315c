"""The Go tools' logs: nsqtools' log records on stderr as NSQ's apps write them, at the
level --log-level names. Apart from front.py, which every command imports: logging
costs a few milliseconds of start-up that only the tools that log pay.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from nsqtools.commands.front import LOG_LEVELS, as_text_on, fail

_PYTHON_LEVELS = dict(
    zip(
        LOG_LEVELS,
        (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL),
        strict=True,
    )
)
_GO_LEVEL_NAMES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}


class _GoLogFormatter(logging.Formatter):
    """`[nsq_tail] 2026/11/21 11:05:46.753854 INFO: message`, as NSQ's apps log; on a
    terminal with the message's control characters escaped (it may quote the cluster)."""

    def __init__(self, prefix: str, stream: Any) -> None:
        super().__init__()
        self.prefix = prefix
        self.stream = stream

    def format(self, record: logging.LogRecord) -> str:
        import time

        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int(record.created % 1 * 1_000_000)
        level = _GO_LEVEL_NAMES.get(record.levelno, record.levelname)
        message = as_text_on(self.stream, record.getMessage())
        return f"{self.prefix}{stamp}.{micros:06d} {level}: {message}"


def configure_logging(level: str, prefix: str) -> None:
    """Send nsqtools' logs to stderr at `level` with NSQ's line format (an unknown level
    is a failed check of values, exit 1, as in Go's nsq_to_file)."""
    python_level = _PYTHON_LEVELS.get(level.lower())
    if python_level is None:
        fail("--log-level is invalid")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_GoLogFormatter(prefix, sys.stderr))
    root = logging.getLogger("nsqtools")
    root.handlers[:] = [handler]
    root.setLevel(python_level)
    root.propagate = False
