"""The wheel holds the package, the man pages and the completions and nothing else of
the checkout, installs into a bare virtual environment and runs there, and the developer
tools in it that need a checkout say so in one line instead of looking for folders in
site-packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from nsqtools import NSQ_VERSION, __version__, version_line

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("nsq", "nsq_tail", "to_nsq")
DIST_INFO = f"nsqtools-{__version__}.dist-info"
DATA = f"nsqtools-{__version__}.data/data"


def run(
    args: Sequence[str | Path], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)


def pip(*args: str | Path) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    result = run(command)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    pip("wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", folder, ROOT)
    [built] = folder.glob("nsqtools-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed in a folder of its own, to run with this environment's
    dependencies (PYTHONPATH puts it before the editable install)."""
    target = tmp_path_factory.mktemp("installed")
    pip("install", "--no-deps", "--no-index", "--target", target, wheel)
    return target


def package_files() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "nsqtools").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def generated_files() -> set[str]:
    """The man pages and completions, where the wheel installs them under the prefix."""
    shared = {
        "man/man1": "share/man/man1",
        "completions/bash": "share/bash-completion/completions",
        "completions/zsh": "share/zsh/site-functions",
        "completions/fish": "share/fish/vendor_completions.d",
    }
    return {
        f"{DATA}/{share}/{path.name}"
        for folder, share in shared.items()
        for path in (ROOT / folder).iterdir()
    }


def test_the_wheel_holds_the_package_its_types_licence_and_docs_only(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {name for name in names if not name.startswith(DIST_INFO)} == (
        package_files() | generated_files()
    )
    assert "nsqtools/py.typed" in names
    assert f"{DIST_INFO}/licenses/LICENSE" in names


def test_a_bare_environment_with_only_the_wheel_runs_the_programs(
    wheel: Path, tmp_path: Path
) -> None:
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    pip("--python", environment / "bin" / "python", "install", "--no-deps", "--no-index", wheel)
    for program in PROGRAMS:
        result = run([environment / "bin" / program, "--version"])
        assert (result.returncode, result.stdout) == (0, version_line(program) + "\n")


def run_installed(
    installed: Path, code: str, **environment: str
) -> subprocess.CompletedProcess[str]:
    """Run code with the installed package (-P: not the one in the current folder)."""
    pythonpath = {"PYTHONPATH": str(installed)}
    return run([sys.executable, "-P", "-c", code], env=os.environ | pythonpath | environment)


def test_installed_it_knows_it_is_not_in_a_checkout(installed: Path) -> None:
    result = run_installed(
        installed,
        "import nsqtools, nsqtools.checkout as c; print(nsqtools.__file__, c.source_checkout())",
    )
    assert result.stdout.split() == [str(installed / "nsqtools" / "__init__.py"), "None"]


def test_installed_the_docs_generator_asks_for_a_checkout(installed: Path) -> None:
    result = run_installed(installed, "from nsqtools.commands.docs import main; main()")
    assert result.returncode == 2
    assert "not a checkout: pass --root" in result.stderr
    assert not (installed / "man").exists()


def test_installed_a_missing_nsq_binary_names_where_to_put_it(
    installed: Path, tmp_path: Path
) -> None:
    code = "from nsqtools.testing.binaries import find_binary; find_binary('nsqd')"
    result = run_installed(installed, code, PATH=str(tmp_path), NSQ_BIN_DIR="")
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.endswith(
        "nsqd not found in PATH; run scripts/install-nsq in a checkout of nsqtools, "
        "or set NSQ_BIN_DIR to a folder holding NSQ v1.3.0's binaries"
    )


def test_the_version_line_names_ours_and_the_nsq_release_matched() -> None:
    assert version_line("nsq_tail") == f"nsq_tail v{__version__} (nsqtools; matches NSQ v1.3.0)"
    assert NSQ_VERSION == "1.3.0"


@pytest.mark.parametrize(
    "argv",
    [["nsq", "--version"], ["nsq", "tail", "--version"], ["nsq_stat", "-version"]],
)
def test_version_through_click_says_the_same(argv: list[str]) -> None:
    """The entry point answers a lone --version; click answers it after a subcommand."""
    program = "nsq_tail" if argv[1:2] == ["tail"] else argv[0]
    result = run([Path(sys.executable).parent / argv[0], *argv[1:]])
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        version_line(program) + "\n",
        "",
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["nsq_tail", "-h"],
        ["nsq_stat", "--help"],
        ["nsq", "--help"],
        ["nsq", "help", "pub"],
        ["nsq", "topics", "-h"],
        ["to_nsq", "-help"],
    ],
)
def test_help_is_on_stdout_with_exit_0(argv: list[str]) -> None:
    """Go's tools print their usage on stderr; ours on stdout, for a pager or grep."""
    result = run([Path(sys.executable).parent / argv[0], *argv[1:]])
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("Usage: ")
