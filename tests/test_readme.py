"""The README's Python examples run as written, against a real nsqd."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nsqtools.testing import Nsqd

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readme_has_python_examples() -> None:
    assert python_blocks()


def test_the_python_examples_run(nsqd: Nsqd) -> None:
    for block in python_blocks():
        code = block.replace("127.0.0.1:4150", nsqd.tcp_address)
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["1 hello", "1 one", "1 two"]
