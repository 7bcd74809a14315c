"""Each layer imports only what it owns: the protocol stays sans-IO."""

from __future__ import annotations

import ast
from pathlib import Path

import nsqtools.httpapi
import nsqtools.protocol

FORBIDDEN_IN_PROTOCOL = {"trio", "ssl", "socket", "httpx", "click", "rich", "asyncio"}
# The HTTP client works the same from trio, from threads and from the test harness.
FORBIDDEN_IN_HTTPAPI = {"trio", "click", "rich", "asyncio"}


def imported_top_level_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_httpapi_package_needs_no_event_loop_nor_ui() -> None:
    package = Path(nsqtools.httpapi.__file__).parent
    for module in sorted(package.glob("*.py")):
        assert not imported_top_level_modules(module) & FORBIDDEN_IN_HTTPAPI, module.name


def test_protocol_package_is_sans_io() -> None:
    package = Path(nsqtools.protocol.__file__).parent
    for module in sorted(package.glob("*.py")):
        assert not imported_top_level_modules(module) & FORBIDDEN_IN_PROTOCOL, module.name
