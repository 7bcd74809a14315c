"""What Tab offers for an option's value where click offers nothing of its own (it does
for a click.Choice and a click.Path): the words an option takes (--format, --mode),
paths for a file or directory option typed as text, saved contexts' names, and topic
names.

Topic names come from the nsqlookupds given on the command line so far, else from
NSQ_LOOKUPD_HTTP_ADDRESS (several separated by spaces): one GET of /topics each, all at
once, on nsqtools.httpapi.blocking (no trio or httpx to import: a Tab must start fast),
connecting and each send and receive within LOOKUP_SECONDS, so a Tab never hangs on a
lookupd that is down or slow; one that fails offers nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import click
from click.shell_completion import CompletionItem

LOOKUPD_ENV = "NSQ_LOOKUPD_HTTP_ADDRESS"
LOOKUP_SECONDS = 0.25  # to connect to a lookupd, and for each send and receive after

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def words(*values: str) -> Completer:
    """The values of an option that takes one of a few words (and maybe more)."""

    def complete(
        ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return [CompletionItem(value) for value in values if value.startswith(incomplete)]

    return complete


def modes(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The relays' --mode: how messages are spread over the destinations."""
    from nsqtools.hostpolicy import MODES

    return words(*MODES)(ctx, param, incomplete)


def files(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Paths: the shell completes them (click's type "file")."""
    return [CompletionItem(incomplete, type="file")]


def directories(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Directories: the shell completes them (click's type "dir")."""
    return [CompletionItem(incomplete, type="dir")]


def contexts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The names of the saved contexts (`nsq context`); none if the file cannot be read."""
    from nsqtools.contexts import config_directory
    from nsqtools.contexts.store import ContextError, load_all

    try:
        names = load_all(config_directory())
    except ContextError:
        return []
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def topics(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The topics the lookupds know that start with what was typed, sorted."""
    given = ctx.params.get("lookupd_http_addresses") or os.environ.get(LOOKUPD_ENV, "").split()
    names = lookupd_topics([str(address) for address in given])
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def lookupd_topics(addresses: Sequence[str]) -> set[str]:
    """Every topic of the lookupds that answer in time, asked all at once."""
    # Here, not at the top: only a Tab on a topic pays for importing them.
    from nsqtools.httpapi import lookupd
    from nsqtools.httpapi.blocking import BlockingClient

    client = BlockingClient(connect_timeout=LOOKUP_SECONDS, request_timeout=LOOKUP_SECONDS)
    answers = client.send_each([lookupd.topics(address) for address in addresses])
    # A lookupd that cannot be asked offers nothing: no Tab is an error.
    return {name for answer in answers if isinstance(answer, list) for name in answer}
