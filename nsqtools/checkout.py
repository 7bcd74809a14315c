"""The source checkout nsqtools runs from, if it runs from one.

Developer tools look for their folders there (the man page generator writes man/ and
completions/, the test harness finds NSQ's binaries in .nsq/bin); an installed package
has no checkout, and those tools say so instead of guessing a path in site-packages.
"""

from __future__ import annotations

from pathlib import Path


def source_checkout() -> Path | None:
    """The checkout's root folder, or None when nsqtools is installed from a wheel."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None
