"""The program's two rich Consoles, one on stdout and one on stderr, and Go's log lines.

Whatever a command draws with rich goes through stdout() or stderr(): the tables of the
inspection, admin and archive commands, nsq_stat's live table, nsq_tail's highlighted
bodies, nsq bench's tables and progress bars, the archive jobs' progress. Each console
is made on first use and kept for the program's life: rich costs some 50 ms to import,
which `--help`, `--version`, a failed check and the plain outputs never pay.

Both print with markup and highlighting off: what they show comes from the cluster or
a message (a client's user agent, an address, a body), in which rich would read `[/]`
as a closing tag and fail, or colour what looks like a number. What is styled is given
as rich Text, or with a style. On a terminal such text goes through printable() too: a
control character in it (an escape sequence, a newline) would move the cursor, restyle
the screen or break a table's row, so it is shown escaped instead.

The plain lines on stderr are written here as they are, not through a console: the
status lines of to_nsq and nsq_to_file (status_line: rich drops a carriage return when
stderr is no terminal, and nsq_to_file --status may go to a file), and Go's log lines
(go_log: Go's bytes exactly, and too many for rich). The one-line errors and the logs
are front.py's: they come before any console could be made.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

_consoles: dict[str, Console] = {}  # "stdout", "stderr": made on first use
_no_color: bool | None = None  # None: rich decides (NO_COLOR, the terminal)


def stdout() -> Console:
    """The console on stdout."""
    return _console("stdout")


def stderr() -> Console:
    """The console on stderr."""
    return _console("stderr")


def is_terminal(stream: str) -> bool:
    """Whether the console on `stream` ("stdout", "stderr") draws as on a terminal,
    told without importing rich while that console is not made (a piped `nsq topics`
    then never imports it), by rich's rules (a test holds them to rich's): TTY_COMPATIBLE
    0 or 1, then FORCE_COLOR set and not empty, then whether the stream is a tty."""
    console = _consoles.get(stream)
    if console is not None:
        return console.is_terminal
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return (sys.stderr if stream == "stderr" else sys.stdout).isatty()
    except ValueError:  # closed
        return False


def use_color(color: bool) -> None:
    """With color False (--no-color, or NO_COLOR), both consoles draw without colours:
    those made and those to be made."""
    global _no_color
    _no_color = not color
    for console in _consoles.values():
        console.no_color = _no_color


def _console(stream: str) -> Console:
    console = _consoles.get(stream)
    if console is None:
        from rich.console import Console

        console = Console(
            stderr=stream == "stderr", markup=False, highlight=False, no_color=_no_color
        )
        _consoles[stream] = console
    return console


# Each C0 control character, DEL and each C1 control character, as Python escapes it
# in a string's repr: \n, \t, \x1b, \x7f, \x9b.
_ESCAPES = {code: repr(chr(code))[1:-1] for code in (*range(0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """`text` with its control characters escaped, for a terminal to show as text."""
    return text.translate(_ESCAPES)


def status_line(text: str, *, clear: bool = False) -> None:
    """Draw `text` over the line the cursor is on, on stderr, without a newline: a
    status line redrawn in place (a carriage return first; with `clear`, the line is
    erased first too, for a text that may be shorter than the last)."""
    sys.stderr.write(("\r\x1b[K" if clear else "\r") + text)
    sys.stderr.flush()


def end_status_line() -> None:
    """Leave the status line as it was last drawn and go on to the next line."""
    sys.stderr.write("\n")


def go_log(text: str) -> None:
    """`text` on stderr as Go's standard logger prints it (the relays' status lines and
    summary, as Go's tools print them): the local time, then the text.

    Written as it is, not through the stderr console: the bytes must be Go's, and rich
    (some 160 µs a line) would cost the relays a few percent of their throughput at
    their default of a line every 250 messages."""
    sys.stderr.write(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {text}\n")
