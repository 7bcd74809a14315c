"""Where the NSQ v1.3.0 binaries built by scripts/install-nsq live, and running them;
and the command line that runs one of our own tools.

Lookup order: $NSQ_BIN_DIR, then the checkout's git-ignored .nsq/bin (when nsqtools runs
from a checkout, not from a wheel), then PATH. A missing binary is an error
(NsqNotInstalled) that says where it looked, never a reason to skip a test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from nsqtools.checkout import source_checkout

CHECKOUT = source_checkout()
DEFAULT_BIN_DIR = CHECKOUT / ".nsq" / "bin" if CHECKOUT else None

# The package this module belongs to: our tools run from this very copy of it.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]

GO_TOOLS = ("nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "to_nsq", "nsq_stat")


class NsqNotInstalled(RuntimeError):
    """A required NSQ binary was not found."""


def find_binary(name: str) -> Path:
    """Return the path of an NSQ binary such as "nsqd" or "nsq_tail"."""
    folders = _bin_dirs()
    for candidate in (folder / name for folder in folders):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if on_path := shutil.which(name):
        return Path(on_path)
    searched = "".join(f"{folder}, " for folder in folders)
    raise NsqNotInstalled(
        f"{name} not found in {searched}PATH; run scripts/install-nsq in a checkout of "
        "nsqtools, or set NSQ_BIN_DIR to a folder holding NSQ v1.3.0's binaries"
    )


def _bin_dirs() -> list[Path]:
    env_dir = os.environ.get("NSQ_BIN_DIR")
    return [Path(folder) for folder in (env_dir, DEFAULT_BIN_DIR) if folder]


def run_go_tool(
    name: str,
    args: Sequence[str],
    *,
    input: bytes | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[bytes]:
    """Run one Go reference utility to completion and capture its output.

    For side-by-side tests: the same arguments given to ours and to Go's.
    """
    if name not in GO_TOOLS:
        raise ValueError(f"not a Go reference utility: {name}")
    return subprocess.run(
        [str(find_binary(name)), *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def our_tool(program: str) -> list[str]:
    """The command line that runs our `program` (an entry point such as "nsq_to_file")
    from the nsqtools this module belongs to: a console script on PATH or beside the
    interpreter may have been installed from another copy (another worktree)."""
    code = (
        f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r}); "
        f"from nsqtools.entry import {program}; {program}()"
    )
    return [sys.executable, "-c", code]


def imported_modules(importtime_output: str) -> set[str]:
    """The modules a program run with `python -X importtime` imported, from what it
    wrote on stderr."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_output.splitlines()
        if line.startswith("import time:")
    }


def imported_packages(importtime_output: str) -> set[str]:
    """The top-level packages of imported_modules()."""
    return {name.split(".")[0] for name in imported_modules(importtime_output)}


class RunningTool:
    """A tool started by running(): its process, and its stderr once it has exited."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.stderr = ""


@contextmanager
def running(argv: Sequence[str]) -> Iterator[RunningTool]:
    """A long-running tool (ours or Go's) for the block; then SIGTERM, which must make it
    exit 0 within 30 s (its stderr is then in .stderr). Killed if the block fails."""
    tool = RunningTool(argv)
    try:
        yield tool
        tool.process.send_signal(signal.SIGTERM)
        _, stderr = tool.process.communicate(timeout=30)
        tool.stderr = stderr.decode(errors="replace")
        assert tool.process.returncode == 0, tool.stderr
    finally:
        if tool.process.poll() is None:
            tool.process.kill()
            tool.process.wait()
