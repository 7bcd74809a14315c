"""The command-line front: the umbrella `nsq` command and, later, one module per tool.

Each tool lives in its own module here and is installed both under its Go name and as
a subcommand of `nsq`. Heavy imports stay inside the commands so `--help` and
`--version` are fast.
"""

from __future__ import annotations

import click

from nsqtools import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-version", message="nsq v%(version)s")
def main() -> None:
    """nsqtools: command-line tools for NSQ."""
