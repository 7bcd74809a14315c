"""nsq_stat's live table (rich), redrawn in place after every poll.

One row for the channel asked for, or for the topic and each channel; under each, a
row per nsqd when there are several (per partition of the Youzan fork, "address pN");
the rates' history as sparklines, paused rows marked, e2e latency percentiles when nsqd
tracks them (--e2e-processing-latency-percentile); below, the servers that failed and
a topic or channel not found yet.
Imported only for a table: plain and JSON output never load rich's renderers. What came
from the cluster (names, addresses, error texts) is shown as text: consoles.printable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from rich import box
from rich.console import (
    Console,
    ConsoleOptions,
    Group,
    JustifyMethod,
    RenderableType,
    RenderResult,
)
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nsqtools.commands import consoles
from nsqtools.commands.consoles import printable
from nsqtools.commands.fitting import layout, space
from nsqtools.durations import format_duration
from nsqtools.httpapi.nsqd import Percentile
from nsqtools.stats.counters import Counters, Rates
from nsqtools.stats.tracking import NodeRow, Report, Row

SPARK_WIDTH = 16  # polls of history shown
_SPARKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class _Column:
    heading: str
    gives_way: int = 0  # 0: never; on a narrow terminal the highest gives way first
    style: str = ""


# The rates, the depth and in flight never give way; the sparklines first, then the
# latency and the counts a glance needs least.
_NUMBER_COLUMNS = (
    _Column("in/s"),
    _Column("out/s"),
    _Column("depth"),
    _Column("mem", 7),
    _Column("disk", 6),
    _Column("inflt"),
    _Column("def", 4),
    _Column("req", 3),
    _Column("t-o", 5),
    _Column("msgs", 1),
    _Column("clients", 2),
)
_HISTORY_COLUMNS = (_Column("in/s history", 9, "green"), _Column("out/s history", 10, "cyan"))
_E2E_COLUMN = _Column("e2e latency", 8)
_NAME_LEAST = 24
_GAP = 3  # cells between two columns: their padding and the rule between them

Cell = Text | str


class LiveTable:
    """The Output of --format table: each report drawn over the previous one."""

    def __init__(self, interval: float, live: Live) -> None:
        self.interval = interval
        self.live = live

    def show(self, report: Report) -> bool:
        self.live.update(stats_view(report, self.interval), refresh=True)
        return True


@contextmanager
def live_table(topic: str, interval: float, color: bool) -> Iterator[LiveTable]:
    """The live table of `topic` polled every `interval` for the run; the last drawing
    stays on screen after it."""
    consoles.use_color(color)
    console = consoles.stdout()
    waiting = Text(f"nsq_stat: polling topic {topic}...", style="dim")
    with Live(
        waiting, console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
    ) as live:
        yield LiveTable(interval, live)


def stats_view(report: Report, interval: float) -> RenderableType:
    """Everything one report shows: a title, the table, the problems below it."""
    parts: list[RenderableType] = [_title(report, interval)]
    if report.found:
        parts.append(_FittedTable(report))
    else:
        what = f"channel {report.channel} of topic" if report.channel else "topic"
        parts.append(
            Text(
                printable(
                    f"{what} {report.topic} not found on any nsqd that answered: polling again"
                )
            )
        )
    parts += [
        Text(printable(f"✗ {failure.server} {failure.address}: {failure.reason}"), style="red")
        for failure in report.failures
    ]
    return Group(*parts)


def _title(report: Report, interval: float) -> Text:
    clock = time.strftime("%H:%M:%S", time.localtime(report.wall_time))
    title = Text.assemble(("nsq_stat", "bold"), "  topic ", (printable(report.topic), "bold"))
    if report.channel is not None:
        title.append_text(Text.assemble("  channel ", (printable(report.channel), "bold")))
    title.append(f"  every {format_duration(interval)}  {clock}  poll {report.poll + 1}")
    return title


class _FittedTable:
    """The report's table as wide as the console has room for: columns that do not fit
    give way (fitting.layout), never a number cut."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield _table(self.report, options.max_width)


def _table(report: Report, room: int) -> Table:
    show_e2e = any(row.e2e for row in report.rows)
    columns = [_Column(""), *_NUMBER_COLUMNS, *_HISTORY_COLUMNS]
    columns += [_E2E_COLUMN] if show_e2e else []
    rows = _rows(report, show_e2e)
    spaces = [
        space([column.heading, *(_plain(cells[index]) for cells, _ in rows)], column.gives_way)
        for index, column in enumerate(columns)
    ]
    # A name longer than _NAME_LEAST (topics may have 64 characters) is cut rather than
    # the numbers, on a terminal too narrow for both.
    names = spaces[0]
    spaces[0] = replace(names, least=min(names.natural, _NAME_LEAST))
    widths = layout(spaces, room, _GAP)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, pad_edge=False)
    for column, width in zip(columns, widths, strict=True):
        if width is not None:
            justify: JustifyMethod = "right" if column in _NUMBER_COLUMNS else "left"
            table.add_column(
                column.heading, justify=justify, style=column.style, width=width, no_wrap=True
            )
    for cells, style in rows:
        kept = [cell for cell, width in zip(cells, widths, strict=True) if width is not None]
        table.add_row(*kept, style=style)
    return table


def _rows(report: Report, show_e2e: bool) -> list[tuple[list[Cell], str]]:
    """Every row's cells in every column, and the row's style."""
    rows: list[tuple[list[Cell], str]] = []
    nsqds = max(len(row.nodes) for row in report.rows) + _failed_nsqds(report)
    for row in report.rows:
        indent = "  " if report.channel is None and row.channel is not None else ""
        cells: list[Cell] = [
            _name(report, row, indent),
            *_numbers(row.counters, row.rates, row.channel is not None),
            _sparkline([rates.ingress for rates in row.history]),
            _sparkline([rates.egress for rates in row.history]),
            *([_percentiles(row.e2e)] if show_e2e else []),
        ]
        rows.append((cells, "bold" if row.channel is None else ""))
        for node in row.nodes if nsqds > 1 else ():
            cells = [
                Text(printable(f"{indent}  {_node_name(node)}")),
                *_numbers(node.counters, node.rates, row.channel is not None),
                "",
                "",
                *([_percentiles(node.e2e.percentiles if node.e2e else ())] if show_e2e else []),
            ]
            rows.append((cells, "dim"))
    return rows


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _node_name(node: NodeRow) -> str:
    """The nsqd, and on the Youzan fork the partition the row is."""
    return node.address if node.partition is None else f"{node.address} p{node.partition}"


def _failed_nsqds(report: Report) -> int:
    return sum(1 for failure in report.failures if failure.server == "nsqd")


def _name(report: Report, row: Row, indent: str) -> Text:
    name = Text(indent)
    if row.channel is None:
        name.append(printable(report.topic))
        name.append(" (topic)", style="dim")
    else:
        name.append(printable(row.channel))
    if row.counters.paused:
        name.append(" paused", style="bold yellow")
    return name


def _numbers(counters: Counters, rates: Rates | None, channel: bool) -> list[Cell]:
    """The counters in Go's columns; a topic has no per-channel counts."""
    per_channel: list[Cell] = [
        _count(counters.in_flight_count),
        _count(counters.deferred_count),
        _count(counters.requeue_count),
        _count(counters.timeout_count),
    ]
    clients: Cell = _count(counters.client_count)
    if not channel:
        per_channel, clients = [_unknown() for _ in per_channel], _unknown()
    return [
        _rate(None if rates is None else rates.ingress),
        _rate(None if rates is None else rates.egress),
        _count(counters.depth),
        _count(counters.memory_depth),
        _count(counters.backend_depth),
        *per_channel,
        _count(counters.message_count),
        clients,
    ]


def _unknown() -> Text:
    """A count that does not apply, or a rate not known yet."""
    return Text("-", style="dim")


def _count(value: int) -> str:
    return f"{value:,}"


def _rate(value: float | None) -> Cell:
    """Per second: whole numbers, with a decimal under 10; `-` until known."""
    if value is None:
        return _unknown()
    return f"{value:,.1f}" if abs(value) < 10 else f"{value:,.0f}"


def _sparkline(values: Sequence[float]) -> str:
    """The last SPARK_WIDTH values, scaled from 0 to their highest."""
    shown = [max(value, 0.0) for value in values[-SPARK_WIDTH:]]
    highest = max(shown, default=0.0)
    if highest == 0:
        return _SPARKS[0] * len(shown)
    top = len(_SPARKS) - 1
    return "".join(_SPARKS[round(value / highest * top)] for value in shown)


def _percentiles(percentiles: Sequence[Percentile]) -> str:
    return "  ".join(f"{_quantile(p.quantile)} {_latency(p.value)}" for p in percentiles)


def _quantile(quantile: float) -> str:
    """0.5 → p50, 0.99 → p99, 0.999 → p99.9."""
    return f"p{quantile * 100:.10g}"


def _latency(nanoseconds: float) -> str:
    milliseconds = nanoseconds / 1e6
    if milliseconds >= 1000:
        return f"{milliseconds / 1000:.2f}s"
    if milliseconds >= 10:
        return f"{milliseconds:.0f}ms"
    return f"{milliseconds:.2f}ms"
