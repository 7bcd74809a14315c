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

from rich import box
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nsqtools.commands import consoles
from nsqtools.commands.consoles import printable
from nsqtools.durations import format_duration
from nsqtools.httpapi.nsqd import Percentile
from nsqtools.stats.counters import Counters, Rates
from nsqtools.stats.tracking import NodeRow, Report, Row

SPARK_WIDTH = 16  # polls of history shown
_SPARKS = "▁▂▃▄▅▆▇█"
_NUMBER_COLUMNS = (
    "in/s",
    "out/s",
    "depth",
    "mem",
    "disk",
    "inflt",
    "def",
    "req",
    "t-o",
    "msgs",
    "clients",
)


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
        parts.append(_table(report))
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


def _table(report: Report) -> Table:
    show_e2e = any(row.e2e for row in report.rows)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, pad_edge=False)
    table.add_column("", no_wrap=True)
    for heading in _NUMBER_COLUMNS:
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_column("in/s history", no_wrap=True, style="green")
    table.add_column("out/s history", no_wrap=True, style="cyan")
    if show_e2e:
        table.add_column("e2e latency", no_wrap=True)
    nsqds = max(len(row.nodes) for row in report.rows) + _failed_nsqds(report)
    for row in report.rows:
        indent = "  " if report.channel is None and row.channel is not None else ""
        table.add_row(
            _name(report, row, indent),
            *_numbers(row.counters, row.rates, row.channel is not None),
            _sparkline([rates.ingress for rates in row.history]),
            _sparkline([rates.egress for rates in row.history]),
            *([_percentiles(row.e2e)] if show_e2e else []),
            style="bold" if row.channel is None else "",
        )
        for node in row.nodes if nsqds > 1 else ():
            table.add_row(
                Text(printable(f"{indent}  {_node_name(node)}")),
                *_numbers(node.counters, node.rates, row.channel is not None),
                "",
                "",
                *([_percentiles(node.e2e.percentiles if node.e2e else ())] if show_e2e else []),
                style="dim",
            )
    return table


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


def _numbers(counters: Counters, rates: Rates | None, channel: bool) -> list[Text | str]:
    """The counters in Go's columns; a topic has no per-channel counts."""
    per_channel: list[Text | str] = [
        _count(counters.in_flight_count),
        _count(counters.deferred_count),
        _count(counters.requeue_count),
        _count(counters.timeout_count),
    ]
    clients: Text | str = _count(counters.client_count)
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


def _rate(value: float | None) -> Text | str:
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
