"""JSON bodies highlighted for a terminal (rich), one message per line, no markup.

Bodies are untrusted: they are never interpreted as rich markup, only coloured by
rich's JSON highlighter when they parse as JSON; anything else is printed as is.
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


def _line(body: bytes, prefix: bytes) -> Text:
    text = body.decode("utf-8", "replace")
    line = Text(prefix.decode("utf-8", "replace"), style="dim")
    if text[:1] in ("{", "[") and _is_json(text):
        return line + _highlighter(Text(text))
    return line + Text(text)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
