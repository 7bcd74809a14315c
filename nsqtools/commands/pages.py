"""The manual page of each program (the umbrella `nsq`, and each tool under its Go name),
made from its click command: synopsis, description, options under the headings help
shows, environment, exit status, examples (nsqtools.commands.examples); nsq's page also
holds every option of nsqtools' own subcommands.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import click

from nsqtools import __version__
from nsqtools.commands import OWN_SUBCOMMANDS, SUBCOMMANDS, group
from nsqtools.commands.examples import EXAMPLES
from nsqtools.commands.front import EXIT_FAILURE, EXIT_USAGE, GoFlagsCommand
from nsqtools.commands.options import AddressOption
from nsqtools.commands.roff import (
    BR,
    IP,
    METAVAR,
    PP,
    RoffRequest,
    bold,
    escape,
    italic,
    item,
    joined,
    paragraphs,
    prose,
    roff,
    section,
)

OWN_COMMANDS = "NSQTOOLS' OWN COMMANDS"  # the section of nsq's page that documents them


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


def page(name: str) -> str:
    """The manual page of the program called `name`."""
    everything = programs()
    [program] = [program for program in everything if program.name == name]
    return man_page(program, everything)


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
        *section("NAME", [f"{escape(program.name)} \\- {escape(_summary(command))}"]),
        *section("SYNOPSIS", _synopsis(program, ctx)),
        *section("DESCRIPTION", _description(program)),
        *(section("COMMANDS", _commands(tools, own)) if umbrella else []),
        *section("OPTIONS", _options(command, ctx)),
        *(section(OWN_COMMANDS, _own_commands(ctx, own)) if umbrella else []),
        *section("ENVIRONMENT", _environment(commands)),
        *section("EXIT STATUS", _exit_status()),
        *([] if umbrella else section("EXAMPLES", _examples(program.name))),
        *section("SEE ALSO", [_see_also(program, everything)]),
    ]
    return roff(lines)


def _summary(command: click.Command) -> str:
    return command.get_short_help_str(limit=200).removesuffix(".")


def _usage(ctx: click.Context) -> str:
    """What follows the command's name in its synopsis, metavariables in italics."""
    pieces = escape(" ".join(ctx.command.collect_usage_pieces(ctx)))
    return METAVAR.sub(r"\\fI\g<0>\\fR", pieces)


def _synopsis(program: Program, ctx: click.Context) -> list[str]:
    usage = _usage(ctx)
    names = [program.name] + ([f"nsq {program.subcommand}"] if program.subcommand else [])
    return joined((f"{bold(name)} {usage}" for name in names), BR)


def _description(program: Program) -> list[str]:
    texts = paragraphs((program.command.help or "").split("\f")[0]) + paragraphs(program.doc)
    if program.subcommand:
        texts.append(f"The same command runs as {bold(f'nsq {program.subcommand}')}.")
    return joined(texts, PP)


def own_commands() -> dict[str, click.Command]:
    """nsqtools' own subcommands (no Go tool has them: no page of their own), by name."""
    own: dict[str, click.Command] = dict(group.commands)  # help
    for name, module in OWN_SUBCOMMANDS.items():
        own[name] = importlib.import_module(module).command
    return own


def own_command_paths(
    parent: click.Context, own: dict[str, click.Command]
) -> list[tuple[str, click.Context]]:
    """Each of nsqtools' own commands, and each subcommand of a group among them, as
    `nsq NAME [SUBNAME]` with its context, by name."""
    found: list[tuple[str, click.Context]] = []
    for name, command in sorted(own.items()):
        ctx = click.Context(command, info_name=name, parent=parent, **command.context_settings)
        found.append((ctx.command_path, ctx))
        if isinstance(command, click.Group):
            subcommands = {sub: command.get_command(ctx, sub) for sub in command.list_commands(ctx)}
            found += own_command_paths(ctx, {k: v for k, v in subcommands.items() if v})
    return found


def _own_commands(parent: click.Context, own: dict[str, click.Command]) -> list[str]:
    """Every own command's usage, description, options and examples, under its name.
    The examples assume a lookupd in the environment, as a user of them sets it once."""
    lines = [
        f"The examples assume {bold('NSQ_LOOKUPD_HTTP_ADDRESS=127.0.0.1:4161')} in the "
        "environment, unless they give an address."
    ]
    for path, ctx in own_command_paths(parent, own):
        command = ctx.command
        help_text = paragraphs((command.help or "").split("\f")[0])
        lines += [RoffRequest(f".SS {escape(path)}"), f"{bold(path)} {_usage(ctx)}"]
        lines += [line for text in help_text for line in (PP, text)]
        lines += _options(command, ctx) + _examples(path)
    return lines


def _examples(name: str) -> list[str]:
    """The examples of a command: what each does, then its command line, indented."""
    return [
        line
        for what, example in EXAMPLES.get(name, ())
        for line in (PP, prose(what), IP, bold(example))
    ]


def _commands(tools: Sequence[Program], own: dict[str, click.Command]) -> list[str]:
    """Every subcommand by name: a Go tool's with its page, nsqtools' own with its summary."""
    entries = {str(tool.subcommand): _tool_entry(tool) for tool in tools}
    entries |= {name: f"{escape(_summary(command))}." for name, command in own.items()}
    lines: list[str] = []
    for name, entry in sorted(entries.items()):
        lines += item(bold(f"nsq {name}"), [entry])
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
        for line in item(_spellings(option, ctx), _option_help(option, ctx))
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
    return [line for name, use in sorted(entries.items()) for line in item(bold(name), [use])]


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
    return [line for code, meaning in statuses for line in item(bold(str(code)), [meaning])]


def _see_also(program: Program, everything: Sequence[Program]) -> str:
    others = sorted(other.name for other in everything if other is not program)
    return ", ".join(f"{bold(name)}(1)" for name in others)
