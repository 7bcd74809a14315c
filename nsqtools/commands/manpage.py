"""`nsq man [COMMAND]`: a manual page, made from the click commands as docs.py makes
man/, for an installed nsqtools whatever `man` finds (the wheel installs the pages under
share/man/man1 too).

On a terminal the page is shown by `man -l -`; otherwise its roff source is printed, for
a pipe or a file (`nsq man nsq_tail > ~/.local/share/man/man1/nsq_tail.1`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import click

from nsqtools.commands import OWN_SUBCOMMANDS, SUBCOMMANDS
from nsqtools.commands.completion import PROGRAMS


def page_name(name: str) -> str | None:
    """The page documenting `name`: a program, or a subcommand of nsq (nsqtools' own
    are in nsq's page); None when nothing is called so."""
    if name in PROGRAMS:
        return name
    if name in SUBCOMMANDS:
        return SUBCOMMANDS[name][1]
    if name in OWN_SUBCOMMANDS or name == "help":
        return "nsq"
    return None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", metavar="[COMMAND]", default="nsq")
def command(name: str) -> None:
    """Show the manual page of COMMAND: a program (nsq_tail) or a subcommand (tail);
    nsqtools' own subcommands (topics, delete, ...) are in nsq's page."""
    from nsqtools.commands import pages

    page = page_name(name)
    if page is None:
        raise click.UsageError(f"no manual page for {name!r}: one of {', '.join(PROGRAMS)}")
    text = pages.page(page)
    viewer = shutil.which("man")
    if sys.stdout.isatty() and viewer is not None:
        sys.exit(subprocess.run([viewer, "-l", "-"], input=text, text=True, check=False).returncode)
    click.echo(text, nl=False)
