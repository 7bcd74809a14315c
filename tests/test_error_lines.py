"""Error lines that name what the user wrote and what it is: a mistyped subcommand gets
the closest one; an address that is a URL, or the port of another service or protocol,
is said for what it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def ours(tool: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / tool), *args], capture_output=True, timeout=30, check=False, input=b""
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["chanel"], "nsq: error: no such command 'chanel': did you mean 'channel'?"),
        (["topcs"], "nsq: error: no such command 'topcs': did you mean 'topics'?"),
        (["to_file"], "nsq: error: no such command 'to_file': did you mean 'to-file'?"),
        (["help", "tial"], "nsq: error: no such command 'tial': did you mean 'tail'?"),
        (["xyzzy"], "nsq: error: no such command 'xyzzy': see `nsq help`"),
    ],
)
def test_a_mistyped_subcommand_gets_the_closest_one(args: list[str], line: str) -> None:
    result = ours("nsq", *args)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [line]
