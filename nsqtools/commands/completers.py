"""What Tab offers for an option's value where click offers nothing of its own (it does
for a click.Choice and a click.Path): the words an option takes (--format, --mode),
paths for a file or directory option typed as text, and topic names.

Topic names come from the nsqlookupds given on the command line so far, else from
NSQ_LOOKUPD_HTTP_ADDRESS (several separated by spaces): one GET of /topics each, each
socket operation within what is left of LOOKUP_SECONDS, so a Tab never hangs on a
lookupd that is down or slow; one that fails offers nothing. The standard library's
http.client asks them: httpx would cost a Tab more to import than the request takes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable

import click
from click.shell_completion import CompletionItem

LOOKUPD_ENV = "NSQ_LOOKUPD_HTTP_ADDRESS"
LOOKUP_SECONDS = 0.5  # for every lookupd together

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


def topics(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The topics the lookupds know that start with what was typed, sorted."""
    given = ctx.params.get("lookupd_http_addresses") or os.environ.get(LOOKUPD_ENV, "").split()
    names = lookupd_topics([str(address) for address in given], LOOKUP_SECONDS)
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def lookupd_topics(addresses: Iterable[str], seconds: float) -> set[str]:
    """Every topic of the lookupds that answer within `seconds` in all."""
    deadline = time.monotonic() + seconds
    found: set[str] = set()
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        found.update(_topics_of(address, left))
    return found


def _topics_of(address: str, seconds: float) -> list[str]:
    import http.client  # here: only a Tab on a topic pays for importing it

    host = address.split("://", 1)[-1].split("/", 1)[0]
    connection = http.client.HTTPConnection(host, timeout=seconds)
    try:
        connection.request("GET", "/topics", headers={"Accept": "application/vnd.nsq; version=1.0"})
        answer = connection.getresponse()
        document = json.loads(answer.read()) if answer.status == 200 else {}
    except (OSError, ValueError, http.client.HTTPException):
        return []  # a lookupd that cannot be asked offers nothing; no Tab is an error
    finally:
        connection.close()
    listed = document.get("topics") if isinstance(document, dict) else None
    return [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else []
