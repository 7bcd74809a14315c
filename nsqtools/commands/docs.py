"""Man pages and shell completion scripts, generated from the click commands.

This module owns man/ and completions/: for every program (the umbrella `nsq`, and each
tool of SUBCOMMANDS under its Go name) a roff page in section 1, and completion scripts
for bash, zsh and fish made by click's own shell-completion support.

`python -m nsqtools.commands.docs` rewrites the files that changed and removes those no
program makes any more; `--check` only compares and exits 1 when anything drifted. The
files live in a checkout of nsqtools: an installed package needs `--root` to one.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from nsqtools import __version__
from nsqtools.checkout import source_checkout
from nsqtools.commands import OWN_SUBCOMMANDS, SUBCOMMANDS, group
from nsqtools.commands.completion import SHELLS, script
from nsqtools.commands.front import EXIT_FAILURE, EXIT_USAGE, GoFlagsCommand
from nsqtools.commands.options import AddressOption

GENERATED_DIRS = ("man", "completions")
KEPT = "README.md"  # the one hand-written file in each generated folder
REGENERATE = "python -m nsqtools.commands.docs"

MISSING, DIFFERS, STALE = "missing", "differs", "stale: no program makes it"


@dataclass(frozen=True)
class Program:
    """An installed executable: the umbrella `nsq`, or a tool under its Go name."""

    name: str
    command: click.Command
    doc: str  # the docstring of the command's module
    subcommand: str | None = None  # `nsq <subcommand>` runs the same command


def programs() -> list[Program]:
    """The umbrella first, then every tool of SUBCOMMANDS, by Go name."""
    tools = [_tool(name, module, go_name) for name, (module, go_name) in SUBCOMMANDS.items()]
    umbrella = Program("nsq", group, "")  # its help says it all; the module doc is for developers
    return [umbrella, *sorted(tools, key=lambda tool: tool.name)]


def _tool(subcommand: str, module: str, go_name: str) -> Program:
    command: click.Command = importlib.import_module(module).command
    return Program(go_name, command, _module_doc(module), subcommand)


def _module_doc(module: str) -> str:
    return inspect.cleandoc(importlib.import_module(module).__doc__ or "")


def generate() -> dict[str, str]:
    """Every generated file: path relative to the project root → content."""
    everything = programs()
    files: dict[str, str] = {}
    for program in everything:
        files[f"man/man1/{program.name}.1"] = man_page(program, everything)
        files.update(completion_scripts(program))
    return files


def generate_page(name: str) -> str:
    """The manual page of the program called `name`."""
    everything = programs()
    [program] = [program for program in everything if program.name == name]
    return man_page(program, everything)


def completion_scripts(program: Program) -> dict[str, str]:
    """The completion script of each shell for `program`, by path."""
    return {
        f"completions/{path.format(program.name)}": script(shell, program.name)
        for shell, (_, path) in SHELLS.items()
    }


# -- drift -----------------------------------------------------------------------------


def drift(root: Path, files: dict[str, str]) -> dict[str, str]:
    """Generated path → why the file on disk under `root` is not what it should be."""
    on_disk = _generated_on_disk(root)
    found = {name: STALE for name in on_disk - files.keys()}
    for name, text in files.items():
        if name not in on_disk:
            found[name] = MISSING
        elif (root / name).read_text(encoding="utf-8") != text:
            found[name] = DIFFERS
    return dict(sorted(found.items()))


def _generated_on_disk(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for folder in GENERATED_DIRS
        for path in (root / folder).rglob("*")
        if path.is_file() and path.name != KEPT
    }


def write(root: Path, files: dict[str, str]) -> list[str]:
    """Bring the files under `root` up to date; one line per file changed."""
    changes = []
    for name, status in drift(root, files).items():
        path = root / name
        if status == STALE:
            path.unlink()
            changes.append(f"removed {name}")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[name], encoding="utf-8", newline="\n")
            changes.append(f"wrote {name}")
    return changes


# -- roff ------------------------------------------------------------------------------

_OPTION_LIKE = re.compile(r"(?<!\w)-[\w.=-]*")  # -n, --max-in-flight, -bool=false, "-"
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CODE = re.compile(r"`([^`]+)`")
_METAVAR = re.compile(r"\b[A-Z][A-Z_]+\b")
LINE_WIDTH = 79  # source lines, as man page linters like them


def escape(text: str) -> str:
    """Text for roff: backslashes printed, dashes of options as minus signs (\\-),
    non-ASCII as \\[uXXXX]. Leading dots and apostrophes are left to text_line."""
    text = text.replace("\\", "\\e")
    text = _OPTION_LIKE.sub(lambda match: match[0].replace("-", "\\-"), text)
    return _NON_ASCII.sub(lambda match: f"\\[u{ord(match[0]):04X}]", text)


class RoffRequest(str):
    """A roff request line (.SH, .TP, ...), written as it is; every other line is text."""


TP, IP, PP, BR = RoffRequest(".TP"), RoffRequest(".IP"), RoffRequest(".PP"), RoffRequest(".br")


def text_line(line: str) -> str:
    """A line of text that roff must not take for a request."""
    return "\\&" + line if line.startswith((".", "'")) else line


def roff(lines: Iterable[str]) -> str:
    """The page: requests as they are, text wrapped to short lines (roff joins them)."""
    out: list[str] = []
    for line in lines:
        if isinstance(line, RoffRequest):
            out.append(line)
        else:
            out += map(text_line, _wrap(line))
    return "".join(line + "\n" for line in out)


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, LINE_WIDTH, break_long_words=False, break_on_hyphens=False)


def bold(text: str) -> str:
    return f"\\fB{escape(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{escape(text)}\\fR"


def prose(text: str) -> str:
    """One paragraph reflowed and escaped, its `code` spans in bold."""
    return _CODE.sub(r"\\fB\1\\fR", escape(" ".join(text.split())))


def paragraphs(text: str) -> list[str]:
    return [prose(part) for part in re.split(r"\n\s*\n", text.strip()) if part.strip()]


def _section(title: str, body: Iterable[str]) -> list[str]:
    return [RoffRequest(f".SH {title}"), *body]


def _joined(items: Iterable[str], separator: RoffRequest) -> list[str]:
    """The items as lines, with a separator line (a request) between each two."""
    lines: list[str] = []
    for item in items:
        lines += [separator, item] if lines else [item]
    return lines


def _item(tag: str, body: Iterable[str]) -> list[str]:
    """A tagged paragraph (.TP); each further body paragraph stays indented (.IP)."""
    return [TP, tag, *_joined(body, IP)]


# -- man pages -------------------------------------------------------------------------


def man_page(program: Program, everything: Sequence[Program]) -> str:
    command = program.command
    ctx = click.Context(command, info_name=program.name, **command.context_settings)
    tools = [other for other in everything if other.subcommand is not None]
    umbrella = isinstance(command, click.Group)
    own = own_commands() if umbrella else {}
    commands = (
        [command, *(tool.command for tool in tools), *own.values()] if umbrella else [command]
    )
    lines = [
        RoffRequest(f'.TH {program.name.upper()} 1 "" "nsqtools {__version__}" "User Commands"'),
        *_section("NAME", [f"{escape(program.name)} \\- {escape(_summary(command))}"]),
        *_section("SYNOPSIS", _synopsis(program, ctx)),
        *_section("DESCRIPTION", _description(program)),
        *(_section("COMMANDS", _commands(tools, own)) if umbrella else []),
        *_section("OPTIONS", _options(command, ctx)),
        *_section("ENVIRONMENT", _environment(commands)),
        *_section("EXIT STATUS", _exit_status()),
        *_section("SEE ALSO", [_see_also(program, everything)]),
    ]
    return roff(lines)


def _summary(command: click.Command) -> str:
    return command.get_short_help_str(limit=200).removesuffix(".")


def _synopsis(program: Program, ctx: click.Context) -> list[str]:
    pieces = escape(" ".join(program.command.collect_usage_pieces(ctx)))
    usage = _METAVAR.sub(r"\\fI\g<0>\\fR", pieces)
    names = [program.name] + ([f"nsq {program.subcommand}"] if program.subcommand else [])
    return _joined((f"{bold(name)} {usage}" for name in names), BR)


def _description(program: Program) -> list[str]:
    texts = paragraphs((program.command.help or "").split("\f")[0]) + paragraphs(program.doc)
    if program.subcommand:
        texts.append(f"The same command runs as {bold(f'nsq {program.subcommand}')}.")
    return _joined(texts, PP)


def own_commands() -> dict[str, click.Command]:
    """nsqtools' own subcommands (no Go tool has them: no page of their own), by name."""
    return {
        name: importlib.import_module(module).command for name, module in OWN_SUBCOMMANDS.items()
    }


def _commands(tools: Sequence[Program], own: dict[str, click.Command]) -> list[str]:
    """Every subcommand by name: a Go tool's with its page, nsqtools' own with its summary."""
    entries = {str(tool.subcommand): _tool_entry(tool) for tool in tools}
    entries |= {name: f"{escape(_summary(command))}." for name, command in own.items()}
    lines: list[str] = []
    for name, entry in sorted(entries.items()):
        lines += _item(bold(f"nsq {name}"), [entry])
    return lines


def _tool_entry(tool: Program) -> str:
    replaces = (
        f"Replaces NSQ's Go {bold(tool.name)}, and is installed under that name too: "
        f"{bold(tool.name)}(1)."
    )
    return f"{escape(_summary(tool.command))}. {replaces}"


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    if not isinstance(command, GoFlagsCommand):
        return _option_items(_visible_options(command.get_params(ctx)), ctx)
    forms = ", ".join(bold(form) for form in ("-flag=value", "-flag value", "--flag=value"))
    lines = [
        "Go's flag syntax works as well, so a command line written for the Go tool runs "
        f"unchanged: {forms}, and {bold('-bool=false')} for a boolean flag."
    ]
    for heading, options in command.option_sections(ctx):
        lines += [RoffRequest(f".SS {escape(heading)}"), *_option_items(options, ctx)]
    return lines


def _option_items(options: Iterable[click.Option], ctx: click.Context) -> list[str]:
    return [
        line
        for option in options
        for line in _item(_spellings(option, ctx), _option_help(option, ctx))
    ]


def _visible_options(params: Iterable[click.Parameter]) -> list[click.Option]:
    return [param for param in params if isinstance(param, click.Option) and not param.hidden]


def _spellings(option: click.Option, ctx: click.Context) -> str:
    names = ", ".join(bold(name) for name in [*option.opts, *option.secondary_opts])
    return names if option.is_flag else f"{names} {italic(option.make_metavar(ctx))}"


def _option_help(option: click.Option, ctx: click.Context) -> list[str]:
    """The help paragraphs, the last one ending with default, range and environment."""
    extra = option.get_help_extra(ctx)
    facts = [f"Default: {bold(extra['default'])}."] if "default" in extra else []
    facts += [f"Range: {escape(extra['range'])}."] if "range" in extra else []
    facts += [f"Environment: {bold(name)}." for name in _envvars(option)]
    texts = paragraphs(option.help or "")
    last = " ".join([*texts[-1:], *facts])
    return [*texts[:-1], last] if last else texts[:-1]


def _envvars(option: click.Option) -> list[str]:
    if isinstance(option.envvar, str):
        return [option.envvar]
    return list(option.envvar or ())


def _environment(commands: Iterable[click.Command]) -> list[str]:
    entries: dict[str, str] = {}
    for command in commands:
        for option in _visible_options(command.params):
            for name in _envvars(option):
                entries.setdefault(name, _envvar_use(option))
    entries.setdefault("NO_COLOR", "Any non-empty value: no colors, even on a terminal.")
    return [line for name, use in sorted(entries.items()) for line in _item(bold(name), [use])]


def _envvar_use(option: click.Option) -> str:
    if option.is_flag:
        return f"Sets {bold(option.opts[-1])} when 1, true, yes or on."
    use = f"Default for {bold(option.opts[-1])}"
    if isinstance(option, AddressOption):
        use += "; an address flag of either kind replaces it"
    if option.multiple:
        return f"{use}; several values are separated by spaces."
    return f"{use}."


def _exit_status() -> list[str]:
    statuses = [
        (0, "Success."),
        (
            EXIT_FAILURE,
            "A runtime failure, or a missing or invalid value (topic, address, delimiter), "
            "as the Go tools; reported in one line on stderr.",
        ),
        (EXIT_USAGE, "A flag that does not parse: an unknown flag, a malformed value."),
    ]
    return [line for code, meaning in statuses for line in _item(bold(str(code)), [meaning])]


def _see_also(program: Program, everything: Sequence[Program]) -> str:
    others = sorted(other.name for other in everything if other is not program)
    return ", ".join(f"{bold(name)}(1)" for name in others)


# -- command line ----------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--check", is_flag=True, help="Only compare with the files on disk; exit 1 if any drifted."
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=source_checkout,
    help="Project folder holding man/ and completions/  [default: this checkout]",
)
def command(check: bool, root: Path | None) -> None:
    """Generate man/ and completions/ from the click commands."""
    if root is None:
        raise click.UsageError(
            "nsqtools runs from an installed package, not a checkout: "
            "pass --root with the checkout that holds man/ and completions/"
        )
    files = generate()
    if not check:
        for change in write(root, files):
            click.echo(change)
        return
    drifted = drift(root, files)
    for name, status in drifted.items():
        click.echo(f"{name}: {status}")
    if drifted:
        click.echo(f"man/ and completions/ are out of date; run: {REGENERATE}", err=True)
        sys.exit(1)


def main() -> None:
    command()


if __name__ == "__main__":
    main()
