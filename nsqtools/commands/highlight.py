"""nsq_tail's bodies on a terminal, one message per line, shown as text: control
characters escaped (consoles.printable), never interpreted as rich markup; with colours,
the topic prefix dim and a body that parses as JSON coloured by rich's JSON highlighter.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.highlighter import JSONHighlighter
from rich.text import Text

from nsqtools.commands import consoles

_highlighter = JSONHighlighter()


def highlighted_lines(bodies: Sequence[bytes], prefix: bytes = b"") -> bytes:
    """The lines of the bodies as the stdout console (a terminal) draws them, with their
    ANSI colours, for a writer to write."""
    console = consoles.stdout()
    with console.capture() as capture:
        for body in bodies:
            console.print(_line(body, prefix), soft_wrap=True)
    return capture.get().encode()


def printable_lines(bodies: Sequence[bytes], prefix: bytes = b"") -> bytes:
    """The lines of the bodies for a terminal without colours."""
    start = _printable(prefix)
    return "".join(f"{start}{_printable(body)}\n" for body in bodies).encode()


def _line(body: bytes, prefix: bytes) -> Text:
    # Only the prefix is dim: a style given to the line's Text would cover the body too.
    line = Text.assemble((_printable(prefix), "dim"))
    text = body.decode("utf-8", "replace")
    if text[:1] in ("{", "[") and _is_json(text):
        return line + _highlighter(Text(consoles.printable(text)))
    return line + Text(consoles.printable(text))


def _printable(data: bytes) -> str:
    return consoles.printable(data.decode("utf-8", "replace"))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
