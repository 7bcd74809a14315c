"""What the inspection and admin commands (`nsq topics` ... `nsq tombstone`) share: the
cluster's addresses and --http-timeout, running one job with an HTTP client, names
checked, --json's one document, and tables: rich on a terminal, aligned plain text
otherwise (one line per row, deterministic, for grep and awk).

Heavy imports (rich, httpx, trio) wait until a command runs, so `nsq --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nsqtools.commands import consoles
from nsqtools.commands.front import fail
from nsqtools.commands.options import DURATION, check_addresses, nsqd_http_and_lookupd_addresses

if TYPE_CHECKING:
    import httpx
    from rich.console import Console, JustifyMethod

    from nsqtools.cluster import Cluster
    from nsqtools.httpapi import HttpApiError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

HTTP_TIMEOUT_OPTION = "--http-timeout"


def cluster_options(function: F) -> F:
    """The addresses of the nsqds and lookupds to ask, and how long to wait for each."""
    addresses = nsqd_http_and_lookupd_addresses(
        "nsqd HTTP address (may be given multiple times); instead of the nsqds the lookupds know.",
        "nsqlookupd HTTP address (may be given multiple times).",
    )
    timeout = click.option(
        HTTP_TIMEOUT_OPTION,
        "http_timeout",
        type=DURATION,
        default="5s",
        show_default=True,
        help="How long to wait for each nsqd's or nsqlookupd's answer.",
    )
    return addresses(timeout(function))


def json_option(function: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document (for scripts)."
    )(function)


def cluster_from(options: dict[str, Any]) -> Cluster:
    """The cluster the addresses given name; none given is an error."""
    from nsqtools.cluster import Cluster

    nsqds, lookupds = options["nsqd_http_addresses"], options["lookupd_http_addresses"]
    if not nsqds and not lookupds:
        fail(
            "--nsqd-http-address or --lookupd-http-address is required "
            "(or set NSQ_NSQD_HTTP_ADDRESS or NSQ_LOOKUPD_HTTP_ADDRESS)"
        )
    check_addresses(nsqds, "--nsqd-http-address")
    check_addresses(lookupds, "--lookupd-http-address")
    return Cluster(tuple(nsqds), tuple(lookupds))


def check_names(topic: str, channel: str = "") -> None:
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    try:
        check_topic(topic)
        if channel:
            check_channel(channel)
    except LocalProtocolError as error:
        fail(str(error))


def with_client(options: dict[str, Any], job: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """Run the job on trio with an HTTP client that waits --http-timeout per request."""
    import trio

    from nsqtools.httpapi.clients import async_client

    async def main() -> T:
        async with async_client(timeout=options["http_timeout"]) as client:
            return await job(client)

    return trio.run(main)


def fail_on(failures: Sequence[HttpApiError]) -> None:
    """Exit 1 naming every node that could not be asked, after what the others said."""
    if failures:
        fail(failures_said(failures))


def failures_said(failures: Sequence[HttpApiError]) -> str:
    """Each failure, but the requests to one node that failed alike named together
    (`nsqlookupd 127.0.0.1:4161: GET /topics, GET /nodes: connection refused`), so that
    a node down is said once."""
    requests: dict[tuple[str, str, str], list[str]] = {}
    for failure in failures:
        request, _, why = failure.reason.partition(": ")
        if not why:  # a reason that names no request
            request, why = "", failure.reason
        requests.setdefault((failure.server, failure.address, why), []).append(request)
    said = []
    for (server, address, why), names in requests.items():
        named = ", ".join(name for name in names if name)
        said.append(
            f"{server} {address}: {named}: {why}" if named else f"{server} {address}: {why}"
        )
    return "; ".join(said)


# -- output ------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, sort_keys=True))


def failure_json(failure: HttpApiError) -> dict[str, str]:
    return {"server": failure.server, "address": failure.address, "error": failure.reason}


@dataclass(frozen=True)
class Column:
    """A column of a table. On a terminal too narrow for the whole table, columns give
    way (the highest `gives_way` first; 0 never) and a text of words (a list of
    addresses, a user agent) wraps between its words; a number, a name, an address are
    never cut."""

    header: str
    numeric: bool = False  # right-aligned, never wrapped
    gives_way: int = 0


@dataclass
class Table:
    """Rows of text under headers; `style` (rich's) colours a row on a terminal."""

    columns: Sequence[Column]
    title: str = ""
    rows: list[tuple[list[str], str]] = field(default_factory=list)

    def add(self, cells: Sequence[str], style: str = "") -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append((list(cells), style))


def print_tables(tables: Sequence[Table], console: Console | None = None) -> None:
    """On stdout (or `console`): rich tables on a terminal; else each title, header and
    row as one aligned line, a blank line between tables, written as they are (rich is
    then never imported: some 50 ms of a piped `nsq topics`)."""
    terminal = consoles.is_terminal("stdout") if console is None else console.is_terminal
    if not terminal:
        sys.stdout.write("\n\n".join("\n".join(plain_lines(table)) for table in tables) + "\n")
        return
    console = console or consoles.stdout()
    for table in tables:
        console.print(_rich_table(table, console.width))


def plain_lines(table: Table) -> list[str]:
    lines = [[column.header for column in table.columns], *(cells for cells, _ in table.rows)]
    widths = [max(len(line[index]) for line in lines) for index in range(len(table.columns))]
    aligned = [
        "  ".join(
            cell.rjust(width) if column.numeric else cell.ljust(width)
            for cell, width, column in zip(line, widths, table.columns, strict=True)
        ).rstrip()
        for line in lines
    ]
    return [table.title, *aligned] if table.title else aligned


def _rich_table(table: Table, room: int) -> Any:
    """The table for rich, every text as Text, its control characters escaped: cells come
    from the cluster (a client's user agent may hold `[/]` or an escape sequence), and
    rich would read a string as markup, and a terminal the escape."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    from nsqtools.commands.consoles import printable
    from nsqtools.commands.fitting import layout, space

    rows = [([printable(cell) for cell in cells], style) for cells, style in table.rows]
    spaces = [
        space(
            [column.header, *(cells[index] for cells, _ in rows)],
            column.gives_way,
            not column.numeric,
        )
        for index, column in enumerate(table.columns)
    ]
    # rich's SIMPLE_HEAD box: a cell of padding each side of each column, a rule between.
    widths = layout(spaces, room, gap=3, edges=4)
    rich_table = RichTable(
        title=Text(printable(table.title), style="bold") if table.title else None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column, width in zip(table.columns, widths, strict=True):
        if width is not None:
            justify: JustifyMethod = "right" if column.numeric else "left"
            rich_table.add_column(
                column.header, justify=justify, width=width, no_wrap=column.numeric
            )
    for cells, style in rows:
        kept = [Text(cell) for cell, width in zip(cells, widths, strict=True) if width is not None]
        rich_table.add_row(*kept, style=style or None)
    return rich_table


# -- cells -------------------------------------------------------------------------------


def rate_cell(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}"


def flag_cell(value: bool) -> str:
    return "yes" if value else ""


def nanoseconds_cell(value: float) -> str:
    """A latency as Go prints a duration, to 3 significant digits: 850ns, 1.25ms, 2.5s."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}ns"


def percentile_header(quantile: float) -> str:
    return f"p{quantile * 100:g}"
