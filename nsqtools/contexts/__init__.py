"""Saved clusters ("contexts"): which one a program uses, and where they are kept. No
command line here; what the files hold is nsqtools.contexts.store's.

Two files in the XDG config folder, $XDG_CONFIG_HOME/nsqtools (else ~/.config/nsqtools):
`contexts.toml`, one table per context, and `current`, the name `nsq context use` chose
(one line; no file, no selection). This module imports nothing that Python has not
loaded already: every program asks it at start, and with nothing selected the answer
costs one failed open of `current`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqtools.contexts.store import ClusterContext

CONTEXTS_FILE = "contexts.toml"
CURRENT_FILE = "current"
ENVIRONMENT = "NSQ_CONTEXT"  # selects a context for one program, over `current`


def config_directory() -> Path:
    """$XDG_CONFIG_HOME/nsqtools, else ~/.config/nsqtools (a relative XDG_CONFIG_HOME is
    ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "nsqtools"


def current_name(directory: Path) -> str | None:
    """The name `nsq context use` chose, or None."""
    try:
        return (directory / CURRENT_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
    except OSError as error:
        from nsqtools.contexts.store import ContextError
        from nsqtools.errors import describe_file_error

        raise ContextError(describe_file_error(error, directory / CURRENT_FILE)) from None


def selected_name(
    directory: Path, given: str | None = None, given_by: str = "--context"
) -> tuple[str | None, str]:
    """The name of the context a program uses, and what selected it: `given` (by
    --context, or its environment variable, says `given_by`), else NSQ_CONTEXT, else
    the current file; (None, "") when none is."""
    if given:
        return given, given_by
    if os.environ.get(ENVIRONMENT):
        return os.environ[ENVIRONMENT], ENVIRONMENT
    name = current_name(directory)
    return name, (str(directory / CURRENT_FILE) if name else "")


def selected(given: str | None = None, given_by: str = "--context") -> ClusterContext | None:
    """The context a program uses (see selected_name), or None when none is selected;
    a selected context that does not exist is a ContextError naming the files."""
    directory = config_directory()
    name, selector = selected_name(directory, given, given_by)
    if name is None:
        return None
    from nsqtools.contexts.store import find

    return find(directory, name, f" (selected by {selector})")
