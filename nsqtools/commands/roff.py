"""The roff of the manual pages: escaping, requests, text wrapped to short lines, and
the few constructs the pages are made of (sections, tagged paragraphs). Only what
groff renders without warnings and tests/test_generated_docs.py's check allows.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Iterable

_OPTION_LIKE = re.compile(r"(?<!\w)-[\w.=-]*")  # -n, --max-in-flight, -bool=false, "-"
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CODE = re.compile(r"`([^`]+)`")
METAVAR = re.compile(r"\b[A-Z][A-Z_]+\b")
LINE_WIDTH = 79  # source lines, as man page linters like them


def escape(text: str) -> str:
    """Text for roff: backslashes printed, dashes of options as minus signs (\\-),
    non-ASCII as \\[uXXXX]. Leading dots and apostrophes are left to text_line."""
    text = text.replace("\\", "\\e")
    text = _OPTION_LIKE.sub(lambda match: match[0].replace("-", "\\-"), text)
    return _NON_ASCII.sub(lambda match: f"\\[u{ord(match[0]):04X}]", text)


class RoffRequest(str):
    """A roff request line (.SH, .TP, ...), written as it is; every other line is text."""


class KeptLines(str):
    """Text whose lines are kept as they are, one under the other."""


TP, IP, PP, BR = RoffRequest(".TP"), RoffRequest(".IP"), RoffRequest(".PP"), RoffRequest(".br")


def text_line(line: str) -> str:
    """A line of text that roff must not take for a request."""
    return "\\&" + line if line.startswith((".", "'")) else line


def roff(lines: Iterable[str]) -> str:
    """The page: requests as they are, text wrapped to short lines (roff joins them)."""
    out: list[str] = []
    for line in lines:
        if isinstance(line, RoffRequest):
            out.append(line)
        elif isinstance(line, KeptLines):
            out += joined(map(text_line, line.splitlines()), BR)
        else:
            out += map(text_line, _wrap(line))
    return "".join(line + "\n" for line in out)


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, LINE_WIDTH, break_long_words=False, break_on_hyphens=False)


def bold(text: str) -> str:
    return f"\\fB{escape(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{escape(text)}\\fR"


def prose(text: str) -> str:
    """One paragraph reflowed and escaped, its `code` spans in bold."""
    return _CODE.sub(r"\\fB\1\\fR", escape(" ".join(text.split())))


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a click help text; one that click must not rewrap (it begins
    with \\b: command lines, a list) keeps its lines."""
    found: list[str] = []
    for part in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        if part.startswith("\b\n"):
            lines = [escape(line.strip()) for line in part.splitlines()[1:] if line.strip()]
            found.append(KeptLines("\n".join(lines)))
        elif part.strip():
            found.append(prose(part))
    return found


def section(title: str, body: Iterable[str]) -> list[str]:
    return [RoffRequest(f".SH {title}"), *body]


def joined(items: Iterable[str], separator: RoffRequest) -> list[str]:
    """The items as lines, with a separator line (a request) between each two."""
    lines: list[str] = []
    for item in items:
        lines += [separator, item] if lines else [item]
    return lines


def item(tag: str, body: Iterable[str]) -> list[str]:
    """A tagged paragraph (.TP); each further body paragraph stays indented (.IP)."""
    return [TP, tag, *joined(body, IP)]
