"""Man pages and shell completion scripts, written into a checkout.

This module owns man/ and completions/: for every program (the umbrella `nsq`, and each
tool of SUBCOMMANDS under its Go name) a roff page in section 1 (made by
nsqtools.commands.pages), and completion scripts for bash, zsh and fish (made by
nsqtools.commands.completion, on click's own shell-completion support).

`python -m nsqtools.commands.docs` rewrites the files that changed and removes those no
program makes any more; `--check` only compares and exits 1 when anything drifted. The
files live in a checkout of nsqtools: an installed package needs `--root` to one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nsqtools.checkout import source_checkout
from nsqtools.commands.completion import SHELLS, script
from nsqtools.commands.pages import man_page, programs

GENERATED_DIRS = ("man", "completions")
KEPT = "README.md"  # the one hand-written file in each generated folder
REGENERATE = "python -m nsqtools.commands.docs"

MISSING, DIFFERS, STALE = "missing", "differs", "stale: no program makes it"


def generate() -> dict[str, str]:
    """Every generated file: path relative to the project root → content."""
    everything = programs()
    files: dict[str, str] = {}
    for program in everything:
        files[f"man/man1/{program.name}.1"] = man_page(program, everything)
        files.update(completion_scripts(program.name))
    return files


def completion_scripts(program: str) -> dict[str, str]:
    """The completion script of each shell for `program`, by path."""
    return {
        f"completions/{path.format(program)}": script(shell, program)
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
