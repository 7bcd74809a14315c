"""man/ and completions/ match the click commands, the pages are clean roff, and shell
completion works for the installed programs.

The roff check is pure Python (CI machines need not have groff or man-db): it allows
only the requests and escapes the generator uses, and catches what groff warns about
or renders wrong (unknown escapes, text lines taken for requests, non-ASCII input, a
font left on past its paragraph, blank lines).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from nsqtools.commands import docs, group, pages
from nsqtools.commands.completion import complete_var
from nsqtools.commands.examples import EXAMPLES
from nsqtools.commands.roff import escape as docs_escape

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = [program.name for program in pages.programs()]
BIN = Path(sys.executable).parent  # where the virtual environment installed the programs

SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "EXIT STATUS", "SEE ALSO"]
REQUESTS = {"TH", "SH", "SS", "TP", "IP", "PP", "br"}
ESCAPE = re.compile(r"\\(\[[^\]]*\]|f.|.)")
ALLOWED_ESCAPE = re.compile(r"-|e|&|f[BIR]|\[u[0-9A-F]{4}\]")


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return docs.generate()


def test_man_and_completions_match_the_commands(generated: dict[str, str]) -> None:
    drifted = docs.drift(ROOT, generated)
    listing = "; ".join(f"{name}: {status}" for name, status in drifted.items())
    assert not drifted, (
        f"man/ and completions/ drifted from the click definitions ({listing}); "
        f"run: {docs.REGENERATE}"
    )


@pytest.mark.parametrize("program", PROGRAMS)
def test_man_page_is_clean_roff(program: str, generated: dict[str, str]) -> None:
    page = generated[f"man/man1/{program}.1"]
    assert page.startswith(f".TH {program.upper()} 1 ")
    titles = re.findall(r"^\.SH (.*)$", page, re.MULTILINE)
    assert [title for title in titles if title in SECTIONS] == SECTIONS, titles
    assert roff_problems(page) == []


def roff_problems(page: str) -> list[str]:
    """What groff would warn about or render wrong, one line per problem."""
    problems: list[str] = []
    font = "R"
    for number, line in enumerate(page.splitlines(), 1):
        if line.startswith("."):
            problems += [f"{number}: {problem}" for problem in _request_problems(line, font)]
            font = "R"
            continue
        problems += [f"{number}: {problem}" for problem in _text_problems(line)]
        for escape in ESCAPE.findall(line):
            if not ALLOWED_ESCAPE.fullmatch(escape):
                problems.append(f"{number}: unknown escape \\{escape}")
            elif escape in ("fB", "fI", "fR"):
                font = escape[1]
    return problems + ([f"end: font \\f{font} never closed"] if font != "R" else [])


def _request_problems(line: str, font: str) -> list[str]:
    name = line[1:].split(" ")[0]
    problems = [] if name in REQUESTS else [f"unknown request {line!r}"]
    return problems + ([f"font \\f{font} left on before {line!r}"] if font != "R" else [])


def _text_problems(line: str) -> list[str]:
    checks = {
        "blank line": not line.strip(),
        "starts with an apostrophe (a request)": line.startswith("'"),
        "starts with white space": line[:1].isspace(),
        "ends with white space": line != line.rstrip(),
        "non-ASCII input": not line.isascii(),
        "control character": any(ord(char) < 32 for char in line),
    }
    return [f"{problem}: {line!r}" for problem, found in checks.items() if found]


@pytest.mark.parametrize(
    "text",
    [
        ".TH X 1\n'quoted\n",
        ".TH X 1\n\\q\n",
        ".TH X 1\n\\fBbold\n.PP\n",
        ".TH X 1\n\n",
        ".TH X 1\n.XX\n",
        ".TH X 1\ncaf\u00e9\n",
    ],
)
def test_the_roff_check_catches_mistakes(text: str) -> None:
    assert roff_problems(text)


@pytest.mark.parametrize(
    ("program", "words", "expected"),
    [
        ("nsq_tail", "nsq_tail --to", "--topic"),
        ("nsq", "nsq t", "tail"),
        ("nsq", "nsq tail --to", "--topic"),
    ],
)
def test_bash_completion_of_the_installed_program(program: str, words: str, expected: str) -> None:
    environment = os.environ | {
        complete_var(program): "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    result = subprocess.run(
        [BIN / program], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert f"plain,{expected}" in result.stdout.splitlines()


def test_the_generated_bash_script_completes_the_installed_program() -> None:
    script = (
        "source completions/bash/nsq_tail\n"
        "COMP_WORDS=(nsq_tail --to); COMP_CWORD=1\n"
        "_nsq_tail_completion nsq_tail\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    environment = os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "--norc", "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "--topic\n")


def own_command_contexts() -> list[tuple[str, click.Context]]:
    umbrella = click.Context(group, info_name="nsq")
    return pages.own_command_paths(umbrella, pages.own_commands())


def test_every_own_command_has_its_options_in_nsqs_page(generated: dict[str, str]) -> None:
    page = generated["man/man1/nsq.1"].split(f".SH {pages.OWN_COMMANDS}\n")[1]
    subsections = dict(re.findall(r"^\.SS (.*)\n((?:(?!\.SS ).*\n)*)", page, re.MULTILINE))
    for path, ctx in own_command_contexts():
        text = subsections[docs_escape(path)]
        for param in ctx.command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:
                for name in [*param.opts, *param.secondary_opts]:
                    assert f"\\fB{docs_escape(name)}\\fR" in text, (path, name)


def test_every_command_has_examples_with_its_own_flags() -> None:
    commands = {path: ctx.command for path, ctx in own_command_contexts()}
    commands |= {program.name: program.command for program in pages.programs()[1:]}
    assert set(EXAMPLES) | {"nsq archive"} == set(commands)
    for path, examples in EXAMPLES.items():
        known = {
            name.split("=")[0]
            for param in commands[path].params
            for name in [*param.opts, *getattr(param, "secondary_opts", [])]
        }
        for _, line in examples:
            flags = {click_spelling(word.split("=")[0]) for word in line.split() if word[0] == "-"}
            assert flags <= known, (path, flags - known)


def click_spelling(flag: str) -> str:
    """Go's -name as click knows it: --name (a one-letter flag keeps its one dash)."""
    return flag if flag.startswith("--") or len(flag) == 2 else f"-{flag}"
