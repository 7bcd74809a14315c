"""Where the NSQ v1.3.0 binaries built by scripts/install-nsq live, and running them.

Lookup order: $NSQ_BIN_DIR, then the repository's git-ignored .nsq/bin, then PATH.
A missing binary is an error (NsqNotInstalled), never a reason to skip a test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN_DIR = REPO_ROOT / ".nsq" / "bin"

GO_TOOLS = ("nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "to_nsq", "nsq_stat")


class NsqNotInstalled(RuntimeError):
    """A required NSQ binary was not found."""


def find_binary(name: str) -> Path:
    """Return the path of an NSQ binary such as "nsqd" or "nsq_tail"."""
    candidates = []
    if env_dir := os.environ.get("NSQ_BIN_DIR"):
        candidates.append(Path(env_dir) / name)
    candidates.append(DEFAULT_BIN_DIR / name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if on_path := shutil.which(name):
        return Path(on_path)
    searched = ", ".join(str(c.parent) for c in candidates)
    raise NsqNotInstalled(f"{name} not found in {searched} or PATH; run scripts/install-nsq")


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
