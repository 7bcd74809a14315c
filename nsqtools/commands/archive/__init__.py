"""`nsq archive`: PySpark jobs over the archives nsq_to_file writes (compact, stats, sql,
replay), on local[*] by default or any Spark cluster by --master.

One module per subcommand; jobs.py holds what they share (the archive options, the
Spark session with its progress display, errors in one line). PySpark is an optional
extra and is imported only once a job runs, inside nsqtools.spark.
"""

from __future__ import annotations

import click

from nsqtools.commands.front import CONTEXT_SETTINGS

_SUBCOMMANDS = {
    "compact": "nsqtools.commands.archive.compact",
    "stats": "nsqtools.commands.archive.stats",
    "sql": "nsqtools.commands.archive.sql",
    "replay": "nsqtools.commands.archive.replay",
}


class _ArchiveGroup(click.Group):
    """Imports a subcommand's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _SUBCOMMANDS:
            return None
        import importlib

        command: click.Command = importlib.import_module(_SUBCOMMANDS[name]).command
        return command


def _print_script(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from pathlib import Path

        click.echo(Path(__file__).with_name("__main__.py"))
        ctx.exit()


@click.group(cls=_ArchiveGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--script",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_script,
    help="Print the path of the script to give spark-submit, and exit.",
)
def command() -> None:
    """Compact, count, query and replay nsq_to_file's archives, with PySpark.

    \b
    Runs on local[*] by default (--master names a Spark cluster); needs the spark
    extra (pip install 'nsqtools[spark]') and Java 17 or newer. Each subcommand reads
    archives as nsq_to_file writes them: plain or gzip, raw lines or the JSON envelope
    of --format json; give it the --filename-format and --datetime-format nsq_to_file
    ran with if they are not the defaults.

    \b
    Through spark-submit (its --master and --conf then apply), with PYSPARK_PYTHON
    naming the Python that has nsqtools:
      spark-submit "$(nsq archive --script)" compact SRC --out DIR
    """
