"""The command-line front: the umbrella `nsq` command and one module per tool.

Each tool is installed under its Go name (nsq_tail, to_nsq, ...) and as a subcommand
of `nsq` (nsq tail, nsq pub, ...). Subcommands are imported only when used, so
`nsq --help` and `nsq --version` stay fast.
"""

from __future__ import annotations

import click

from nsqtools import __version__

# subcommand → (module, Go name)
SUBCOMMANDS = {
    "pub": ("nsqtools.commands.pub", "to_nsq"),
    "tail": ("nsqtools.commands.tail", "nsq_tail"),
}


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        import importlib

        module = importlib.import_module(SUBCOMMANDS[name][0])
        command: click.Command = module.command
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-version", message="nsq v%(version)s")
def group() -> None:
    """nsqtools: command-line tools for NSQ.

    Each command is a drop-in replacement for one of NSQ's Go utilities, with the same
    flags (Go's -flag=value syntax included), defaults and output, and is installed
    under that Go name too.
    """


def main() -> None:
    from nsqtools.commands.front import run

    run(group, "nsq")
