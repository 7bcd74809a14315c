"""The consoles (nsqtools.commands.consoles): whether a stream is a terminal is told
without rich by rich's own rules, so that a piped run need not import it."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from nsqtools.commands import consoles
from tests.test_terminal_tables import on_terminal

ENVIRONMENTS = [
    {},
    {"TTY_COMPATIBLE": "1"},
    {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"},
    {"TTY_COMPATIBLE": "2", "FORCE_COLOR": "1"},
    {"FORCE_COLOR": ""},
    {"FORCE_COLOR": "0"},
]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_a_pipe_is_told_a_terminal_or_not_as_rich_tells_it(
    environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(consoles, "_consoles", {})
    assert consoles.is_terminal("stdout") == Console().is_terminal


def test_a_terminal_is_told_a_terminal() -> None:
    """Through a pseudo-terminal, in a fresh interpreter: rich's answer and ours."""
    code = (
        "from rich.console import Console\n"
        "from nsqtools.commands import consoles\n"
        "print(consoles.is_terminal('stdout'), Console().is_terminal)\n"
    )
    assert on_terminal([sys.executable, "-c", code], columns=80).split() == ["True", "True"]
