"""Running a command as a program: an operational error is one line and exit 1; a bug
keeps its traceback."""

from __future__ import annotations

import click
import pytest

from nsqtools.commands.front import run
from nsqtools.config import ConfigError
from nsqtools.errors import NsqError
from nsqtools.protocol import LocalProtocolError


def failing(error: Exception) -> click.Command:
    @click.command()
    def command() -> None:
        raise error

    return command


@pytest.mark.parametrize(
    "error",
    [
        NsqError("nsqd went away"),
        ConfigError("bad option"),
        LocalProtocolError("bad topic"),
        OSError("disk on fire"),
    ],
)
def test_an_operational_error_is_one_line_and_exit_1(
    error: Exception, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run(failing(error), "tool", [])
    assert exited.value.code == 1
    assert capsys.readouterr().err == f"tool: error: {error}\n"


def test_a_bug_is_not_reported_as_an_error() -> None:
    with pytest.raises(KeyError):
        run(failing(KeyError("a bug")), "tool", [])
