"""What the files of saved clusters hold: the contexts (contexts.toml, read with
tomllib, written by a small TOML writer of its own) and the selected name (current),
each written whole to a temporary file, mode 0600, then renamed into place.

A secret is kept by reference only: the file that holds it (auth_secret_file) or the
environment variable that does (auth_secret_env), never its value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from nsqtools.contexts import CONTEXTS_FILE, CURRENT_FILE, current_name
from nsqtools.durable import fsync_directory
from nsqtools.errors import NsqError, describe_file_error

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEADER = "# nsqtools' saved clusters, written by `nsq context`; secrets by reference only.\n"

TomlValue = str | bool | int | list[str]


class ContextError(NsqError):
    """A context that cannot be read, found or saved; the message names the file."""


@dataclass(frozen=True)
class ClusterContext:
    """One saved cluster. Field names are the keys of its TOML table."""

    name: str
    nsqd_tcp_addresses: tuple[str, ...] = ()
    nsqd_http_addresses: tuple[str, ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()
    tls: bool = False
    tls_root_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_insecure_skip_verify: bool = False
    tls_min_version: str | None = None
    snappy: bool = False
    deflate: bool = False
    deflate_level: int | None = None
    auth_secret_file: str | None = None
    auth_secret_env: str | None = None

    @property
    def uses_tls(self) -> bool:
        """Whether a program connects with TLS (as the --tls options decide it)."""
        return bool(
            self.tls or self.tls_root_ca_file or self.tls_cert or self.tls_insecure_skip_verify
        )

    def settings(self) -> dict[str, TomlValue]:
        """The settings given (no empty list, false or missing value), by key."""
        given: dict[str, TomlValue] = {}
        for field in fields(self)[1:]:
            value = getattr(self, field.name)
            if value not in (None, False, ()):
                given[field.name] = list(value) if isinstance(value, tuple) else value
        return given


# The type a key's value has in the file, from its field's annotation (a list: of strings).
_ANNOTATED_TYPES = {"tuple[str, ...]": list, "bool": bool, "str | None": str, "int | None": int}
_KEY_TYPES: Mapping[str, type] = {
    field.name: _ANNOTATED_TYPES[str(field.type)] for field in fields(ClusterContext)[1:]
}


def check_name(name: str) -> None:
    """A context's name: letters, digits, `.`, `_`, `-`, at most 64, not `-` first."""
    if not _NAME.fullmatch(name):
        raise ContextError(
            f"invalid context name {name!r}: use letters, digits, '.', '_' and '-' "
            "(at most 64, a letter or digit first)"
        )


# -- reading -----------------------------------------------------------------------------


def load_all(directory: Path) -> dict[str, ClusterContext]:
    """Every context of the folder, by name; none when it has no contexts file."""
    import tomllib

    path = directory / CONTEXTS_FILE
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as error:
        raise ContextError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise ContextError(describe_file_error(error, path)) from None
    return {name: _context(path, name, table) for name, table in document.items()}


def _context(path: Path, name: str, table: object) -> ClusterContext:
    if not isinstance(table, dict):
        raise ContextError(f"{path}: {name!r} is not a table: every context is one")
    values: dict[str, object] = {}
    for key, value in table.items():
        wanted = _KEY_TYPES.get(key)
        if wanted is None:
            raise ContextError(f"{path}: context {name!r}: unknown key {key!r}")
        if not _has_type(value, wanted):
            raise ContextError(f"{path}: context {name!r}: {key} must be {_TYPE_NAMES[wanted]}")
        values[key] = tuple(value) if wanted is list else value
    return ClusterContext(name, **values)  # type: ignore[arg-type]  # keys and types checked


_TYPE_NAMES = {list: "a list of strings", bool: "true or false", int: "an integer", str: "a string"}


def _has_type(value: object, wanted: type) -> bool:
    if wanted is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if wanted is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, wanted)


def find(directory: Path, name: str, why: str = "") -> ClusterContext:
    """The context called `name`; `why` says, in the error, why it was looked for."""
    found = load_all(directory).get(name)
    if found is None:
        raise _not_found(directory, name, why)
    return found


def _not_found(directory: Path, name: str, why: str = "") -> ContextError:
    path = directory / CONTEXTS_FILE
    return ContextError(f"no context {name!r}{why} in {path}: see `nsq context ls`")


# -- writing -----------------------------------------------------------------------------


def save(directory: Path, context: ClusterContext, replace: bool = False) -> None:
    """Add `context`; one of its name is an error unless `replace`."""
    contexts = load_all(directory)
    if context.name in contexts and not replace:
        raise ContextError(f"context {context.name!r} exists: add --replace to replace it")
    _save_all(directory, {**contexts, context.name: context})


def remove(directory: Path, name: str) -> bool:
    """Remove context `name`, and unselect it: whether it was selected."""
    contexts = load_all(directory)
    if name not in contexts:
        raise _not_found(directory, name)
    del contexts[name]
    _save_all(directory, contexts)
    was_selected = current_name(directory) == name
    if was_selected:
        set_current(directory, None)
    return was_selected


def _save_all(directory: Path, contexts: Mapping[str, ClusterContext]) -> None:
    tables = {name: context.settings() for name, context in contexts.items()}
    _replace(directory / CONTEXTS_FILE, _HEADER + toml_tables(tables))


def set_current(directory: Path, name: str | None) -> None:
    """Select `name` for every program, or nothing (None)."""
    path = directory / CURRENT_FILE
    if name is None:
        path.unlink(missing_ok=True)
    else:
        _replace(path, name + "\n")


def _replace(path: Path, text: str) -> None:
    """Write `text` to a temporary file (0600) beside `path`, synced, then rename it
    over `path`: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        fsync_directory(path.parent)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise ContextError(describe_file_error(error, path)) from None


def toml_tables(tables: Mapping[str, Mapping[str, TomlValue]]) -> str:
    """TOML for tables of strings, booleans, integers and lists of strings: each table's
    name quoted (a name may hold a dot), its keys bare (the fields' names)."""
    blocks = []
    for name, table in tables.items():
        lines = [f"[{toml_string(name)}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def toml_value(value: TomlValue) -> str:
    if isinstance(value, bool):  # before int: a bool is an int
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    return "[" + ", ".join(toml_string(item) for item in value) + "]"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"


def toml_string(text: str) -> str:
    """A TOML basic string: quotes and backslashes escaped, control characters (and DEL,
    which TOML does not allow as it is) as escapes."""
    return '"' + "".join(_escaped(character) for character in text) + '"'


def _escaped(character: str) -> str:
    if character in _ESCAPES:
        return _ESCAPES[character]
    if character < " " or character == "\x7f":
        return f"\\u{ord(character):04x}"
    return character
