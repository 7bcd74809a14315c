"""Saved clusters: `nsq context add/use/ls/show/rm` run as a user runs them, each test
with a config folder of its own (XDG_CONFIG_HOME); the file's format and permissions;
a literal secret refused; which settings a command gets (flags > NSQ_ environment >
context > defaults), checked on the parsed options; and the tools reading and
publishing through a context against real nsqds (plain, TLS, AUTH). With no context
selected, a program behaves exactly as without this feature.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.commands.completion import complete_var
from nsqtools.commands.inspect.topics import command as nsq_topics
from nsqtools.commands.nsq_stat import command as nsq_stat
from nsqtools.commands.nsq_tail import command as nsq_tail
from nsqtools.commands.to_nsq import command as to_nsq
from nsqtools.contexts.store import TomlValue, toml_tables
from nsqtools.testing import Nsqd, TlsFiles, our_tool
from tests.conftest import AUTH_SECRETS, Cluster

TOPIC = "ctx"
SECRET = next(iter(AUTH_SECRETS))
NSQD = "--nsqd-tcp-address=127.0.0.1:4150"
ADDRESS_VARIABLES = ("NSQ_NSQD_TCP_ADDRESS", "NSQ_NSQD_HTTP_ADDRESS", "NSQ_LOOKUPD_HTTP_ADDRESS")


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's config folder, for the programs it starts and for this process."""
    folder = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    for name in (*ADDRESS_VARIABLES, "NSQ_AUTH_SECRET", "NSQ_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    return folder


def run(program: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Our `program` with this process's environment (the test's config folder) and `env`."""
    return subprocess.run(
        [*our_tool(program), *args],
        env=os.environ | env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def nsq(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run("nsq", *args, **env)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def parsed(command: click.Command, *args: str) -> dict[str, Any]:
    """The options a command line gives the command, as its function receives them."""
    with command.make_context(command.name, list(args)) as ctx:
        return dict(ctx.params)


# -- nsq context -------------------------------------------------------------------------


def test_add_use_ls_show_rm(config: Path) -> None:
    ok(nsq("context", "add", "local", "--lookupd-http-address=127.0.0.1:4161"))
    ok(nsq("context", "add", "prod.eu", "--nsqd-tcp-address=10.0.0.5:4150", "--tls"))
    listing = ok(nsq("context", "ls")).splitlines()
    rows = [line.split()[:2] for line in listing[1:]]
    assert rows == [["local", "127.0.0.1:4161"], ["prod.eu", "10.0.0.5:4150"]]
    assert "*" not in "".join(listing)

    ok(nsq("context", "use", "prod.eu"))
    listing = ok(nsq("context", "ls")).splitlines()
    assert listing[2].split() == ["*", "prod.eu", "10.0.0.5:4150", "yes"]
    assert ok(nsq("context", "show")) == (
        '["prod.eu"]\nnsqd_tcp_addresses = ["10.0.0.5:4150"]\ntls = true\n'
    )
    assert ok(nsq("context", "show", "local")).startswith('["local"]\n')
    assert "local" in ok(nsq("context", "ls", NSQ_CONTEXT="local")).splitlines()[1]

    removed = nsq("context", "rm", "prod.eu")
    assert "none is selected now" in ok(removed) + removed.stderr
    assert not (config / "nsqtools" / "current").exists()
    assert len(ok(nsq("context", "ls")).splitlines()) == 2
    refused = nsq("context", "use", "prod.eu")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"nsq: error: no context 'prod.eu' in {config}/nsqtools/contexts.toml: "
        "see `nsq context ls`\n"
    )


def test_use_none_selects_nothing_again(config: Path) -> None:
    ok(nsq("context", "add", "local", "--lookupd-http-address=127.0.0.1:4161"))
    ok(nsq("context", "use", "local"))
    ok(nsq("context", "use", "--none"))
    assert not (config / "nsqtools" / "current").exists()
    assert nsq("context", "show").returncode == 1


def test_files_are_private_and_written_whole(config: Path, tmp_path: Path) -> None:
    ca = tmp_path / 'odd "dir" \\ here' / "ca.pem"
    ca.parent.mkdir()
    ca.write_text("not read until a program connects")
    ok(
        nsq(
            "context",
            "add",
            "local",
            "--nsqd-tcp-address=127.0.0.1:4150",
            f"--tls-root-ca-file={ca}",
            "--deflate-level=6",
        )
    )
    ok(nsq("context", "use", "local"))
    folder = config / "nsqtools"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("contexts.toml", "current"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert sorted(path.name for path in folder.iterdir()) == ["contexts.toml", "current"]
    stored = tomllib.loads((folder / "contexts.toml").read_text())
    assert stored == {
        "local": {
            "nsqd_tcp_addresses": ["127.0.0.1:4150"],
            "tls_root_ca_file": str(ca),
            "deflate_level": 6,
        }
    }


def test_a_relative_file_is_kept_absolute(config: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text(SECRET)
    result = subprocess.run(
        [*our_tool("nsq"), "context", "add", "a", NSQD, "--auth-secret-file=secret"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    ok(result)
    assert f'auth_secret_file = "{tmp_path}/secret"' in ok(nsq("context", "show", "a"))


def test_a_literal_secret_is_refused_and_never_stored(config: Path, tmp_path: Path) -> None:
    refused = nsq("context", "add", "a", NSQD, "--auth-secret=x")
    assert refused.returncode == 2
    assert refused.stderr.startswith("nsq: error: --auth-secret: a context keeps a secret by ")
    assert not config.exists()
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    ok(nsq("context", "add", "f", NSQD, f"--auth-secret-file={secret_file}"))
    ok(nsq("context", "add", "e", NSQD, "--auth-secret-env=MY_SECRET"))
    text = (config / "nsqtools" / "contexts.toml").read_text()
    assert SECRET not in text
    listing = ok(nsq("context", "ls"))
    assert f"file {secret_file}" in listing and "env $MY_SECRET" in listing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["local"], "give at least one address: "),
        (["local", "--nsqd-tcp-address=10.0.0.5"], "--nsqd-tcp-address: invalid address"),
        (["local", "--lookupd-http-address=:x"], "--lookupd-http-address: invalid address"),
        (["--nsqd-tcp-address=10.0.0.5:4150", "--", "-x"], "invalid context name '-x'"),
        (["a b", "--nsqd-tcp-address=10.0.0.5:4150"], "invalid context name 'a b'"),
        (["a", "--nsqd-tcp-address=1.2.3.4:1", "--auth-secret-env=A B"], "not an environment"),
        (["a", "--nsqd-tcp-address=1.2.3.4:1", "--auth-secret-file=/none"], "no such file"),
        (["a", "--nsqd-tcp-address=1.2.3.4:1", "--tls-cert=/none"], "tls_key"),
    ],
)
def test_add_checks_what_it_saves(config: Path, args: list[str], message: str) -> None:
    result = nsq("context", "add", *args)
    assert result.returncode in (1, 2)
    assert result.stderr.startswith("nsq: error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (config / "nsqtools" / "contexts.toml").exists()


def test_add_replaces_only_when_told(config: Path) -> None:
    ok(nsq("context", "add", "a", "--nsqd-tcp-address=127.0.0.1:4150"))
    again = nsq("context", "add", "a", "--nsqd-tcp-address=127.0.0.1:5150")
    assert again.returncode == 1 and "add --replace" in again.stderr
    ok(nsq("context", "add", "a", "--nsqd-tcp-address=127.0.0.1:5150", "--replace"))
    assert "5150" in ok(nsq("context", "show", "a"))


@given(st.text(), st.lists(st.text(), max_size=3), st.booleans(), st.integers(1, 9))
def test_the_toml_writer_round_trips(text: str, texts: list[str], flag: bool, level: int) -> None:
    tables: dict[str, dict[str, TomlValue]] = {
        text: {"tls_cert": text, "lookupd_http_addresses": texts, "tls": flag}
    }
    tables[text + "x"] = {"deflate_level": level}
    assert tomllib.loads(toml_tables(tables)) == tables


# -- what a command gets -----------------------------------------------------------------


@pytest.fixture
def saved(config: Path, tmp_path: Path) -> Path:
    """Contexts `both` (lookupd, nsqd TCP and HTTP, TLS, AUTH by file) and `direct`
    (nsqd TCP and HTTP); `both` selected. Returns the secret file."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    nsqds = ["--nsqd-tcp-address=10.0.0.5:4150", "--nsqd-http-address=10.0.0.5:4151"]
    lookupd = "--lookupd-http-address=10.0.0.9:4161"
    auth = f"--auth-secret-file={secret_file}"
    ok(nsq("context", "add", "both", lookupd, *nsqds, "--snappy", auth))
    ok(nsq("context", "add", "direct", *nsqds, "--tls", "--auth-secret-env=MY_SECRET"))
    ok(nsq("context", "use", "both"))
    return secret_file


def addresses(params: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    names = ("nsqd_tcp_addresses", "nsqd_http_addresses", "lookupd_http_addresses")
    return {name: tuple(params[name]) for name in names if params.get(name)}


def test_a_command_that_takes_lookupd_addresses_gets_only_those(saved: Path) -> None:
    params = parsed(nsq_tail, "--topic=t")
    assert addresses(params) == {"lookupd_http_addresses": ("10.0.0.9:4161",)}
    assert params["snappy"] is True and params["auth_secret_file"] == saved
    assert addresses(parsed(nsq_topics)) == {"lookupd_http_addresses": ("10.0.0.9:4161",)}
    assert addresses(parsed(to_nsq, "--topic=t")) == {"nsqd_tcp_addresses": ("10.0.0.5:4150",)}


def test_context_per_command(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SECRET", "from-env")
    for args in (["--context=direct"], ["-context", "direct"]):
        params = parsed(nsq_tail, "--topic=t", *args)
        assert addresses(params) == {"nsqd_tcp_addresses": ("10.0.0.5:4150",)}
        assert params["tls_v1"] is True and params["auth_secret"] == "from-env"
    for command, args in [(nsq_topics, []), (nsq_stat, ["--topic=t"])]:
        assert addresses(parsed(command, *args, "--context", "direct")) == {
            "nsqd_http_addresses": ("10.0.0.5:4151",)
        }
    monkeypatch.setenv("NSQ_CONTEXT", "direct")
    assert addresses(parsed(nsq_tail, "--topic=t")) == {"nsqd_tcp_addresses": ("10.0.0.5:4150",)}
    assert addresses(parsed(nsq_tail, "--topic=t", "--context=both")) == {
        "lookupd_http_addresses": ("10.0.0.9:4161",)
    }


def test_flags_then_environment_then_context(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSQ_NSQD_TCP_ADDRESS", "127.0.0.1:5150")
    assert addresses(parsed(nsq_tail, "--topic=t")) == {"nsqd_tcp_addresses": ("127.0.0.1:5150",)}
    flag = parsed(nsq_tail, "--topic=t", "--lookupd-http-address=127.0.0.1:5161")
    assert addresses(flag) == {"lookupd_http_addresses": ("127.0.0.1:5161",)}
    # each setting apart: the addresses above, the context's AUTH and snappy still hold
    assert flag["auth_secret_file"] == saved and flag["snappy"] is True
    monkeypatch.setenv("NSQ_AUTH_SECRET", "from-env")
    params = parsed(nsq_tail, "--topic=t")
    assert (params["auth_secret"], params["auth_secret_file"]) == ("from-env", None)
    params = parsed(nsq_tail, "--topic=t", "--auth-secret=flag")
    assert (params["auth_secret"], params["auth_secret_file"]) == ("flag", None)


def test_a_secret_variable_not_set_is_named(saved: Path) -> None:
    result = run("nsq_tail", "--topic=t", "--context=direct")
    assert (result.returncode, result.stderr) == (
        1,
        "nsq_tail: error: context 'direct' reads its AUTH secret from $MY_SECRET: not set\n",
    )


def test_a_missing_or_broken_context_is_one_line_naming_the_file(saved: Path, config: Path) -> None:
    contexts = config / "nsqtools" / "contexts.toml"
    for args, env, selector in [
        (["--context=gone"], {}, "--context"),
        ([], {"NSQ_CONTEXT": "gone"}, "NSQ_CONTEXT"),
    ]:
        result = run("nsq_tail", "--topic=t", *args, **env)
        assert (result.returncode, result.stderr) == (
            1,
            f"nsq_tail: error: no context 'gone' (selected by {selector}) in {contexts}: "
            "see `nsq context ls`\n",
        )
    contexts.write_text(contexts.read_text() + "[broken\n")
    for program, args in [("nsq_tail", ["--topic=t"]), ("nsq", ["topics"])]:
        result = run(program, *args)
        assert result.returncode == 1
        assert result.stderr.startswith(f"{program}: error: {contexts}: not valid TOML: ")
        assert len(result.stderr.splitlines()) == 1
    assert ok(run("nsq_tail", "--help")).startswith("Usage: ")


def test_with_no_context_selected_nothing_changes(config: Path, tmp_path: Path) -> None:
    without = run("nsq_tail", "--topic=t")
    assert (without.returncode, without.stderr) == (
        1,
        "nsq_tail: error: --nsqd-tcp-address or --lookupd-http-address is required\n",
    )
    ok(nsq("context", "add", "local", "--nsqd-tcp-address=127.0.0.1:4150"))
    for program, args in [("nsq_tail", ["--topic=t"]), ("nsq", ["topics"]), ("to_nsq", [])]:
        before = run(program, *args, XDG_CONFIG_HOME=str(tmp_path / "empty"))
        after = run(program, *args)
        assert (after.returncode, after.stdout, after.stderr) == (
            before.returncode,
            before.stdout,
            before.stderr,
        )


def test_tab_completes_context_names(saved: Path) -> None:
    def offers(line: str) -> list[str]:
        words = line.split() + ([""] if line.endswith(" ") else [])
        result = run(
            "nsq",
            **{
                complete_var("nsq"): "bash_complete",
                "COMP_WORDS": " ".join(words),
                "COMP_CWORD": str(len(words) - 1),
            },
        )
        return [offer for offer in ok(result).splitlines() if offer]

    assert offers("nsq context use ") == ["plain,both", "plain,direct"]
    assert offers("nsq context rm d") == ["plain,direct"]
    assert offers("nsq tail --context ") == ["plain,both", "plain,direct"]
    assert offers("nsq topics --context b") == ["plain,both"]
    os.environ["NSQ_CONTEXT"] = "direct"  # its secret's variable unset: no error on a Tab
    try:
        assert offers("nsq tail --context=") == ["plain,both", "plain,direct"]
    finally:
        del os.environ["NSQ_CONTEXT"]


# -- through a context, against real nsqds ------------------------------------------------


def test_tail_pub_and_topics_through_the_selected_context(config: Path, cluster: Cluster) -> None:
    nsqd, lookupd = cluster.nsqd, cluster.lookupd
    direct = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--nsqd-http-address={nsqd.http_address}"]
    ok(nsq("context", "add", "local", *direct))
    ok(nsq("context", "add", "found", f"--lookupd-http-address={lookupd.http_address}"))
    ok(nsq("context", "use", "local"))

    nsqd.create_channels(TOPIC, "direct", "found")
    published = subprocess.run(
        [*our_tool("to_nsq"), f"--topic={TOPIC}"], input=b"one\n", capture_output=True, check=False
    )
    assert published.returncode == 0, published.stderr
    assert ok(run("nsq_tail", f"--topic={TOPIC}", "--channel=direct", "-n", "1")) == "one\n"
    assert ok(nsq("topics")).splitlines()[1].split()[0] == TOPIC
    lookupd.wait_for_topic(TOPIC, [nsqd])
    tail = ["--context=found", f"--topic={TOPIC}", "--channel=found", "-n", "1"]
    assert ok(run("nsq_tail", *tail)) == "one\n"
    assert TOPIC in ok(nsq("topics", "--context=found"))


def test_tls_through_a_context(config: Path, tls_nsqd: Nsqd, tls_files: TlsFiles) -> None:
    tls_nsqd.publish(TOPIC, b"over tls")
    address = f"--nsqd-tcp-address={tls_nsqd.tcp_address}"
    ok(nsq("context", "add", "tls", address, f"--tls-root-ca-file={tls_files.ca}", "--snappy"))
    assert ok(run("nsq_tail", "--context=tls", f"--topic={TOPIC}", "-n", "1")) == "over tls\n"


def test_auth_through_a_context(config: Path, auth_nsqd: Nsqd, tmp_path: Path) -> None:
    auth_nsqd.create_channels(TOPIC, "file", "env")
    auth_nsqd.publish(TOPIC, b"secret stuff")
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    address = f"--nsqd-tcp-address={auth_nsqd.tcp_address}"
    ok(nsq("context", "add", "file", address, f"--auth-secret-file={secret_file}"))
    ok(nsq("context", "add", "env", address, "--auth-secret-env=MY_SECRET"))
    tail = [f"--topic={TOPIC}", "-n", "1"]
    assert ok(run("nsq_tail", "--context=file", "--channel=file", *tail)) == "secret stuff\n"
    from_env = run("nsq_tail", "--context=env", "--channel=env", *tail, MY_SECRET=SECRET)
    assert ok(from_env) == "secret stuff\n"
    denied = run("nsq_tail", "--context=file", "--channel=env", "--auth-secret=nope", *tail)
    assert denied.returncode == 1 and "denied AUTH" in denied.stderr
