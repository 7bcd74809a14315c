"""`nsq completion SHELL [PROGRAM]...`: the shell completion scripts, for an installed
nsqtools that has no checkout (pipx), and the one place their text is made: docs.py
writes the same scripts into completions/.

A script only names the program and the environment variable that asks it to complete
(click's own shell-completion protocol), so making one imports no command: the program
answers each Tab itself.
"""

from __future__ import annotations

import click
from click.shell_completion import BashComplete, FishComplete, ShellComplete, ZshComplete

from nsqtools.commands import SUBCOMMANDS

# shell → click's completion class for it, and the script's path under completions/
SHELLS: dict[str, tuple[type[ShellComplete], str]] = {
    "bash": (BashComplete, "bash/{}"),
    "zsh": (ZshComplete, "zsh/_{}"),
    "fish": (FishComplete, "fish/{}.fish"),
}
PROGRAMS = ("nsq", *sorted(go_name for _, go_name in SUBCOMMANDS.values()))


def complete_var(program: str) -> str:
    """The environment variable that asks `program` to complete, as click names it."""
    return "_{}_COMPLETE".format(program.replace("-", "_").replace(".", "_").upper())


def script(shell: str, program: str) -> str:
    """What `_<PROGRAM>_COMPLETE=<shell>_source <program>` prints."""
    complete_class, _ = SHELLS[shell]
    # The command is never asked anything while the script is made: a stand-in will do.
    return complete_class(click.Command(program), {}, program, complete_var(program)).source()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("shell", type=click.Choice(list(SHELLS)))
@click.argument("programs", metavar="[PROGRAM]...", nargs=-1, type=click.Choice(PROGRAMS))
def command(shell: str, programs: tuple[str, ...]) -> None:
    """Print the completion script of SHELL for PROGRAM (default: nsq and every tool).

    Load it in the running shell, or install it where the shell looks:

    \b
        eval "$(nsq completion bash)"        # in ~/.bashrc
        nsq completion zsh nsq > ~/.zfunc/_nsq   # one file per program, on fpath
        nsq completion fish | source         # in ~/.config/fish/config.fish
    """
    for program in programs or PROGRAMS:
        click.echo(script(shell, program), nl=False)
