"""The command-line front: the umbrella `nsq` command and one module per tool.

Each tool is installed under its Go name (nsq_tail, to_nsq, ...) and as a subcommand
of `nsq` (nsq tail, nsq pub, ...). nsqtools' own commands, which no Go tool has
(nsqadmin's views and actions: nsq topics, nsq delete, ...; nsq bench; nsq context),
are subcommands only. Each command is the `command` of its module, imported only when used, so
`nsq --help` and `nsq --version` stay fast.
"""

from __future__ import annotations

import click

from nsqtools import __version__, version_line

# subcommand → (module, Go name)
SUBCOMMANDS = {
    "pub": ("nsqtools.commands.to_nsq", "to_nsq"),
    "stat": ("nsqtools.commands.nsq_stat", "nsq_stat"),
    "tail": ("nsqtools.commands.nsq_tail", "nsq_tail"),
    "to-file": ("nsqtools.commands.nsq_to_file", "nsq_to_file"),
    "to-http": ("nsqtools.commands.nsq_to_http", "nsq_to_http"),
    "to-nsq": ("nsqtools.commands.nsq_to_nsq", "nsq_to_nsq"),
}

# subcommand → module, for commands no Go tool has
OWN_SUBCOMMANDS = {
    "topics": "nsqtools.commands.inspect.topics",
    "channels": "nsqtools.commands.inspect.channels",
    "nodes": "nsqtools.commands.inspect.nodes",
    "topic": "nsqtools.commands.inspect.topic",
    "channel": "nsqtools.commands.inspect.channel",
    "create": "nsqtools.commands.admin.create",
    "delete": "nsqtools.commands.admin.delete",
    "empty": "nsqtools.commands.admin.empty",
    "pause": "nsqtools.commands.admin.pause",
    "unpause": "nsqtools.commands.admin.unpause",
    "tombstone": "nsqtools.commands.admin.tombstone",
    "bench": "nsqtools.commands.bench",
    "archive": "nsqtools.commands.archive",
    "context": "nsqtools.commands.context",
    "completion": "nsqtools.commands.completion",
    "man": "nsqtools.commands.manpage",
}


def no_such_command(name: str, commands: list[str]) -> str:
    """The error for a command nsq does not have, with the closest one it has."""
    import difflib

    closest = difflib.get_close_matches(name, commands, n=1, cutoff=0.5)
    hint = f"did you mean {closest[0]!r}?" if closest else "see `nsq help`"
    return f"no such command {name!r}: {hint}"


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand is used, and
    lists each command with the Go tool it replaces."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*SUBCOMMANDS, *OWN_SUBCOMMANDS, *self.commands])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in SUBCOMMANDS:
            module = SUBCOMMANDS[name][0]
        elif name in OWN_SUBCOMMANDS:
            module = OWN_SUBCOMMANDS[name]
        else:
            return super().get_command(ctx, name)
        import importlib

        command: click.Command = importlib.import_module(module).command
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, but an unknown name is answered with the closest command's name
        (click's own suggestion knows only the commands loaded: `help`)."""
        name = args[0] if args else ""
        unknown = name[:1] not in ("", "-") and self.get_command(ctx, name) is None
        if unknown and not ctx.resilient_parsing:
            raise click.UsageError(no_such_command(name, self.list_commands(ctx)))
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.get_command(ctx, name)
            assert command is not None  # every name listed is a command
            replaces = f"{SUBCOMMANDS[name][1]}: " if name in SUBCOMMANDS else ""
            rows.append((name, replaces + command.get_short_help_str(limit - len(replaces))))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", "-version", message=version_line("nsq"))
@click.pass_context
def group(ctx: click.Context) -> None:
    """nsqtools: command-line tools for NSQ.

    A command with a Go name before its summary below is a drop-in replacement for
    that one of NSQ's Go utilities, with the same flags (Go's -flag=value syntax
    included), defaults and output, and is installed under that Go name too. The
    others show and administer a cluster as nsqadmin does, in a terminal, or measure
    an nsqd (bench).
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@group.command("help")
@click.argument("command_name", metavar="[COMMAND]", required=False)
@click.pass_context
def help_command(ctx: click.Context, command_name: str | None) -> None:
    """Show the help of nsq, or of one COMMAND."""
    parent = ctx.find_root()
    if command_name is None:
        click.echo(parent.get_help())
        return
    command = group.get_command(parent, command_name)
    if command is None:
        raise click.UsageError(no_such_command(command_name, group.list_commands(parent)))
    settings = command.context_settings
    with click.Context(command, info_name=command_name, parent=parent, **settings) as sub:
        click.echo(command.get_help(sub))


def main() -> None:
    from nsqtools.commands.front import run

    run(group, "nsq")
