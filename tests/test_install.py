"""What a user has after `pipx install nsqtools`: the wheel installed with its
dependencies in a fresh virtual environment (as pipx makes one) gives man pages where
`man` finds them, completion scripts where the shells look and from `nsq completion`,
and every page from `nsq man`, all equal to the checkout's generated files.

The dependencies come from PyPI (or pip's cache), as they do for pipx.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path

import pytest

from nsqtools.commands.completion import PROGRAMS, SHELLS

ROOT = Path(__file__).resolve().parents[1]
SHARE = {  # completions/<folder> → where the wheel puts it under the prefix
    "bash": "share/bash-completion/completions",
    "zsh": "share/zsh/site-functions",
    "fish": "share/fish/vendor_completions.d",
}


def run(args: Sequence[str | Path], prefix: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run as a user's shell would: with `prefix`'s programs first on PATH, and never
    PYTHONPATH (it would run a checkout's nsqtools instead of the installed one)."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    if prefix is not None:
        environment |= {"PATH": f"{prefix / 'bin'}{os.pathsep}/usr/bin:/bin", "MANPATH": ""}
    return subprocess.run(
        args, env=environment, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel and its dependencies only."""
    wheels = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = run(
        [*pip, "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", wheels, ROOT]
    )
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("nsqtools-*.whl")
    environment = tmp_path_factory.mktemp("pipx") / "venv"
    venv.create(environment, with_pip=False)
    installed = run([*pip, "--python", environment / "bin" / "python", "install", wheel])
    assert installed.returncode == 0, installed.stderr
    return environment


def test_man_finds_every_page_through_path(prefix: Path) -> None:
    for program in PROGRAMS:
        page = prefix / "share/man/man1" / f"{program}.1"
        assert page.read_text() == (ROOT / "man/man1" / f"{program}.1").read_text()
        found = run(["man", "-w", program], prefix)
        assert (found.returncode, found.stdout) == (0, f"{page}\n")


def test_completion_scripts_are_where_the_shells_look(prefix: Path) -> None:
    for folder, share in SHARE.items():
        checkout = sorted(path.name for path in (ROOT / "completions" / folder).iterdir())
        assert sorted(path.name for path in (prefix / share).iterdir()) == checkout


@pytest.mark.parametrize("shell", list(SHELLS))
def test_nsq_completion_prints_the_scripts(prefix: Path, shell: str) -> None:
    """One program: its file; none named: every program's, one after the other."""
    folder = ROOT / "completions" / shell
    scripts = {path.name: path.read_text() for path in folder.iterdir()}
    result = run(["nsq", "completion", shell, "nsq_tail"], prefix)
    assert (result.returncode, result.stderr) == (0, "")
    assert [result.stdout] == [text for name, text in scripts.items() if "nsq_tail." in name + "."]
    every = run(["nsq", "completion", shell], prefix)
    for program in PROGRAMS:
        assert f"_{program}_completion" in every.stdout


def test_the_printed_bash_script_completes_the_installed_programs(prefix: Path) -> None:
    script = (
        'eval "$(nsq completion bash)"\n'
        "COMP_WORDS=(nsq_tail --to); COMP_CWORD=1\n"
        "_nsq_tail_completion nsq_tail\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = run(["bash", "--norc", "-c", script], prefix)
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "--topic\n")


@pytest.mark.parametrize(
    ("name", "page"),
    [("nsq_tail", "nsq_tail"), ("tail", "nsq_tail"), ("pub", "to_nsq"), ("topics", "nsq")],
)
def test_nsq_man_prints_the_page_into_a_pipe(prefix: Path, name: str, page: str) -> None:
    result = run(["nsq", "man", name], prefix)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (ROOT / "man/man1" / f"{page}.1").read_text()


def test_nsq_man_of_nothing_known_says_so(prefix: Path) -> None:
    result = run(["nsq", "man", "tial"], prefix)
    assert result.returncode == 2
    assert "no manual page for 'tial'" in result.stderr


def test_nsq_man_on_a_terminal_shows_the_page_through_man(prefix: Path) -> None:
    """On a terminal the page goes through `man -l -` (its pager set to cat here)."""
    leader, follower = pty.openpty()
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    environment |= {"PATH": f"{prefix / 'bin'}{os.pathsep}/usr/bin:/bin", "MANPAGER": "cat"}
    environment |= {"COLUMNS": "80", "TERM": "dumb"}
    with subprocess.Popen(["nsq", "man", "tail"], stdout=follower, env=environment) as process:
        os.close(follower)
        shown = read_all(leader)
    assert process.returncode == 0
    assert "NSQ_TAIL(1)" in shown
    assert ".TH" not in shown  # rendered, not the roff source


def read_all(fd: int) -> str:
    """Everything written to the terminal until its last writer closed it."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")
