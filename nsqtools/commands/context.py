"""`nsq context`: saved clusters (add, use, ls, show, rm), as the `nats` CLI's contexts.

A context names a cluster's addresses and its TLS, compression and AUTH settings; the
one selected (`nsq context use`, NSQ_CONTEXT, or --context per command) gives every
program its defaults, below flags and environment variables. The files and their format
are nsqtools.contexts'; how a program takes a context, nsqtools.commands.options'.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.front import CONTEXT_SETTINGS, GroupedOption, fail
from nsqtools.commands.options import (
    ADDRESS_PARAMS,
    address_option,
    auth_secret_file_option,
    build_config,
    check_addresses,
    tls_and_compression_options,
)

if TYPE_CHECKING:
    from nsqtools.contexts.store import ClusterContext

# The address options of `add` (unlike a tool's, they read no environment), by name.
_ADDRESS_FLAGS = {
    "nsqd_tcp_addresses": "--nsqd-tcp-address",
    "nsqd_http_addresses": "--nsqd-http-address",
    "lookupd_http_addresses": "--lookupd-http-address",
}
_FILE_SETTINGS = ("tls_root_ca_file", "tls_cert", "tls_key", "auth_secret_file")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@click.group("context", context_settings=CONTEXT_SETTINGS)
def command() -> None:
    """Save clusters by name and select the one every program uses.

    \b
    A context holds addresses (nsqd TCP and HTTP, lookupd HTTP) and TLS, compression
    and AUTH settings (the secret by reference: a file or an environment variable).
    The selected one (nsq context use NAME; NSQ_CONTEXT, or --context NAME, for one
    program) gives every program its defaults: flags win, then the NSQ_ environment
    variables, then the context. A program that takes lookupd addresses gets only
    those from a context that has some. With no context selected, the programs behave
    exactly as Go's. Kept in $XDG_CONFIG_HOME/nsqtools (else ~/.config/nsqtools).
    """


def _refuse_secret(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(
            "--auth-secret: a context keeps a secret by reference only: "
            "give --auth-secret-file FILE or --auth-secret-env VARIABLE"
        )


@command.command("add", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@address_option("--lookupd-http-address", "lookupd HTTP address (may be given multiple times).")
@address_option("--nsqd-tcp-address", "nsqd TCP address (may be given multiple times).")
@address_option("--nsqd-http-address", "nsqd HTTP address (may be given multiple times).")
@tls_and_compression_options()
@auth_secret_file_option(GroupedOption)
@click.option(
    "--auth-secret-env",
    metavar="VARIABLE",
    help="Read the AUTH secret from this environment variable when a program runs.",
)
@click.option("--auth-secret", hidden=True, expose_value=False, callback=_refuse_secret)
@click.option("--replace", is_flag=True, help="Replace the context of that name, if any.")
def add(name: str, replace: bool, **options: Any) -> None:
    """Save a cluster as NAME: at least one address; checked as the programs check them.

    Files (TLS, the AUTH secret's) are kept as absolute paths; the secret itself never.
    """
    from nsqtools.contexts import config_directory
    from nsqtools.contexts.store import ClusterContext, check_name, save

    check_name(name)
    save(config_directory(), ClusterContext(name, **_checked_settings(options)), replace)
    click.echo(f"saved context {name!r}; select it with: nsq context use {name}", err=True)


def _checked_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The options as a context's settings, checked as a program would check them."""
    _check(options)
    settings: dict[str, Any] = {param: tuple(options[param]) for param in ADDRESS_PARAMS}
    for name in _FILE_SETTINGS:
        if options[name] is not None:
            settings[name] = str(Path(options[name]).absolute())
    for name in ("tls_insecure_skip_verify", "snappy", "deflate"):
        settings[name] = bool(options[name])
    return settings | {
        "tls": bool(options["tls_v1"]),
        "tls_min_version": options["tls_min_version"],
        "deflate_level": options["deflate_level"],
        "auth_secret_env": options["auth_secret_env"],
    }


def _check(options: dict[str, Any]) -> None:
    if not any(options[param] for param in ADDRESS_PARAMS):
        fail(f"give at least one address: {', '.join(_ADDRESS_FLAGS.values())}")
    for param, flag in _ADDRESS_FLAGS.items():
        check_addresses(options[param], flag)
    variable, secret_file = options["auth_secret_env"], options["auth_secret_file"]
    if variable is not None and not _VARIABLE.fullmatch(variable):
        fail(f"--auth-secret-env: {variable!r} is not an environment variable's name")
    if variable is not None and secret_file is not None:
        fail("give --auth-secret-file or --auth-secret-env, not both")
    if secret_file is not None and not secret_file.is_file():
        fail(f"--auth-secret-file {secret_file}: no such file")
    build_config("nsq context", options)  # TLS files readable, a certificate with its key


@command.command("use", context_settings=CONTEXT_SETTINGS)
@click.argument("name", required=False, shell_complete=completers.contexts)
@click.option(
    "--none", "select_none", is_flag=True, help="Select no context: programs behave as Go's."
)
def use(name: str | None, select_none: bool) -> None:
    """Select context NAME for every program (until another `use`)."""
    from nsqtools.contexts import ENVIRONMENT, config_directory
    from nsqtools.contexts.store import find, set_current

    if (name is None) == (not select_none):
        raise click.UsageError("give a context's NAME, or --none")
    directory = config_directory()
    if name is not None:
        find(directory, name)
    set_current(directory, name)
    chosen = os.environ.get(ENVIRONMENT)
    if chosen:
        click.echo(f"note: {ENVIRONMENT}={chosen} selects {chosen!r} where it is set", err=True)


@command.command("ls", context_settings=CONTEXT_SETTINGS)
def ls() -> None:
    """List the contexts, the selected one marked *: addresses, TLS, where AUTH's
    secret is read from (never the secret)."""
    from nsqtools.commands.cluster_cli import Column, Table, print_tables
    from nsqtools.contexts import config_directory, selected_name
    from nsqtools.contexts.store import load_all

    directory = config_directory()
    contexts = load_all(directory)
    if not contexts:
        click.echo("no contexts: save one with `nsq context add NAME ...`", err=True)
        return
    chosen, _ = selected_name(directory)
    columns = ["", "name", "lookupd http", "nsqd tcp", "nsqd http", "tls", "auth"]
    table = Table([Column(header, gives_way=index > 1) for index, header in enumerate(columns)])
    for name, context in sorted(contexts.items()):
        addresses = [
            " ".join(context.lookupd_http_addresses),
            " ".join(context.nsqd_tcp_addresses),
            " ".join(context.nsqd_http_addresses),
        ]
        tls = "yes" if context.uses_tls else ""
        mark = "*" if name == chosen else ""
        table.add([mark, name, *addresses, tls, _secret_source(context)])
    print_tables([table])


def _secret_source(context: ClusterContext) -> str:
    """Where a program reads the context's AUTH secret from."""
    if context.auth_secret_file:
        return f"file {context.auth_secret_file}"
    if context.auth_secret_env:
        return f"env ${context.auth_secret_env}"
    return ""


@command.command("show", context_settings=CONTEXT_SETTINGS)
@click.argument("name", required=False, shell_complete=completers.contexts)
def show(name: str | None) -> None:
    """Print context NAME (else the selected one) as its file holds it."""
    from nsqtools.contexts import config_directory, selected_name
    from nsqtools.contexts.store import find, toml_tables

    directory = config_directory()
    if name is None:
        name, _ = selected_name(directory)
    if name is None:
        fail("no context is selected: name one, or select one with `nsq context use NAME`")
    context = find(directory, name)
    sys.stdout.write(toml_tables({name: context.settings()}))


@command.command("rm", context_settings=CONTEXT_SETTINGS)
@click.argument("name", shell_complete=completers.contexts)
def rm(name: str) -> None:
    """Remove context NAME (if it is selected, nothing is selected any more)."""
    from nsqtools.contexts import config_directory
    from nsqtools.contexts.store import remove

    if remove(config_directory(), name):
        click.echo(f"removed the selected context {name!r}: none is selected now", err=True)
