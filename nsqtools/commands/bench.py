"""`nsq bench`: how fast an nsqd takes and delivers messages, and how long they take.

The command's side of the benchmark (nsqtools.benchmark runs it): the options, checked
into BenchSettings; progress bars on stderr while it runs (on a terminal only); the
summary tables on stdout; the same figures as JSON and CSV (--json, --csv).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import consoles
from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    OUTPUT,
    GroupedOption,
    fail,
    grouped_option,
    run_event_loop,
)
from nsqtools.commands.options import (
    DURATION,
    GoInt,
    nsqd_and_lookupd_addresses,
    nsqd_http_addresses,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from nsqtools.benchmark import BenchResults, BenchRun, BenchSettings, LiveCounts, Mode

DEFAULT_NSQD = "127.0.0.1:4150"  # bench_writer's and bench_reader's default
DEFAULT_DURATION = 10.0  # seconds: bench_writer's and bench_reader's --runfor
REFRESH_INTERVAL = 0.1
STDOUT = "-"

_HELP = """Measure an nsqd: publish and consume throughput, and end-to-end latency.

\b
Publishers and consumers run at once by default (--mode both): each message carries
the time it was published and consumers record how long it took to reach them, so
the latency is that of a live flow (use --rate to measure it under a given load
rather than at saturation). --mode publish only publishes (as NSQ's bench_writer);
--mode consume drains an existing channel (as bench_reader), for example one filled
by `nsq bench --mode publish --keep-topic --topic T --channel C`.

\b
Without --topic, the run uses a topic of its own (bench-<random>), deleted at the end
through nsqd's HTTP API unless --keep-topic.

\b
Clients: --publishers and --consumers are connections, spread over --processes worker
processes per role (publishers and consumers never share a process). One process per
role is the default because it measures nsqd best on a small machine: on 2 cores, one
Python process with a few connections keeps nsqd as busy as NSQ's bench_writer and
bench_reader do, while a second process per role measured no more (publishing alone)
or about 15% less (publishing and consuming at once): every process takes CPU that
nsqd itself needs. Give more processes when the machine has cores to spare.
"""


@click.command("bench", context_settings=CONTEXT_SETTINGS, help=_HELP)
@click.option(
    "--mode",
    type=click.Choice(["both", "publish", "consume"]),
    default="both",
    show_default=True,
    help="Publish and consume at once, or only one of them.",
)
@nsqd_and_lookupd_addresses(
    f"nsqd TCP address to measure  [default: {DEFAULT_NSQD}]",
    "nsqlookupd HTTP address (may be given multiple times): consumers find nsqd through it.",
)
@nsqd_http_addresses(
    "nsqd's HTTP API, to delete the run's own topic (and create it when consumers "
    "use nsqlookupd)  [default: the TCP address's host, its port + 1]"
)
@click.option("--topic", help="Topic  [default: bench-<random>, deleted at the end]")
@click.option("--channel", default="bench", show_default=True, help="Channel to consume.")
@click.option("--keep-topic", is_flag=True, help="Do not delete the run's own topic.")
@click.option(
    "--size", type=GoInt(), default=200, show_default=True, help="Bytes per message (at least 8)."
)
@click.option(
    "--batch-size", type=GoInt(), default=200, show_default=True, help="Messages per MPUB."
)
@click.option(
    "--count",
    type=GoInt(),
    help="Messages to publish (to consume, with --mode consume), instead of a duration.",
)
@click.option(
    "--duration",
    "--runfor",
    type=DURATION,
    help="How long to publish (to consume, with --mode consume), e.g. 30s  [default: 10s]",
)
@click.option(
    "--publishers", type=GoInt(), default=2, show_default=True, help="Publishing connections."
)
@click.option(
    "--consumers", type=GoInt(), default=2, show_default=True, help="Consuming connections."
)
@click.option(
    "--processes",
    type=GoInt(),
    default=1,
    show_default=True,
    help="Worker processes per role, sharing its connections.",
)
@click.option(
    "--in-flight",
    type=GoInt(),
    default=4,
    show_default=True,
    help="MPUBs awaiting nsqd's answer per publishing connection (bench_writer: 1).",
)
@click.option(
    "--rdy", type=GoInt(), default=2500, show_default=True, help="RDY per consuming connection."
)
@click.option(
    "--rate",
    type=GoInt(),
    default=0,
    show_default=True,
    help="Messages per second over all publishers (0: as fast as nsqd takes them).",
)
@click.option(
    "--producer-opt",
    "producer_options",
    multiple=True,
    metavar="KEY,VALUE",
    help="go-nsq option of the publishers' connections (may be given multiple times), e.g. snappy.",
)
@click.option(
    "--consumer-opt",
    "consumer_options",
    multiple=True,
    metavar="KEY,VALUE",
    help="go-nsq option of the consumers' connections (may be given multiple times), e.g. "
    "output_buffer_size,-1: nsqd then sends each message at once (by default it holds a "
    "consumer's messages until 16 KiB or 250ms have gathered, which dominates the latency "
    "at low rates).",
)
@grouped_option(
    OUTPUT,
    "--json",
    "json_file",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
    help="Write the figures as JSON to FILE (-: stdout, instead of the tables).",
)
@grouped_option(
    OUTPUT,
    "--csv",
    "csv_file",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
    help="Add the figures as a CSV row to FILE, after a header when it is new or empty "
    "(-: stdout, instead of the tables).",
)
@click.option(
    "--no-color",
    is_flag=True,
    cls=GroupedOption,
    help_group=OUTPUT,
    help="No colors, even on a terminal (or set NO_COLOR).",
)
def command(**options: Any) -> None:
    settings = _settings(options)
    outputs = _Outputs(options)
    run_event_loop(_bench, settings, outputs)


def _settings(options: dict[str, Any]) -> BenchSettings:
    from nsqtools.benchmark import BenchSettings, Mode

    mode = Mode(options["mode"])
    nsqd_address, lookupds = _addresses(options)
    topic, own_topic = _topic(options, mode)
    delete_topic = own_topic and not options["keep_topic"]
    needs_http = delete_topic or bool(lookupds and mode.consumes)
    count = options["count"]
    try:
        return BenchSettings(
            mode=mode,
            nsqd_tcp_address=nsqd_address,
            topic=topic,
            channel=options["channel"],
            size=options["size"],
            batch_size=options["batch_size"],
            count=count,
            duration=options["duration"] or (None if count is not None else DEFAULT_DURATION),
            publishers=options["publishers"],
            consumers=options["consumers"],
            processes=options["processes"],
            in_flight=options["in_flight"],
            rdy=options["rdy"],
            rate=options["rate"],
            lookupd_http_addresses=lookupds,
            producer_options=_client_options(options, "producer"),
            consumer_options=_client_options(options, "consumer"),
            nsqd_http_address=_http_address(options, nsqd_address) if needs_http else None,
            delete_topic=delete_topic,
        )
    except ValueError as error:
        fail(str(error))


def _addresses(options: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The nsqd to measure, and the lookupds its consumers use (if any), checked."""
    from nsqtools.commands.options import check_addresses

    nsqd_address = _one_address(options["nsqd_tcp_addresses"], "--nsqd-tcp-address", DEFAULT_NSQD)
    lookupds = tuple(options["lookupd_http_addresses"])
    check_addresses([nsqd_address], "--nsqd-tcp-address")
    check_addresses(lookupds, "--lookupd-http-address")
    return nsqd_address, lookupds


def _topic(options: dict[str, Any], mode: Mode) -> tuple[str, bool]:
    """The topic, and whether it is the run's own (made up for it), checked with the
    channel. Draining needs a channel given: a topic of its own would be empty."""
    from nsqtools.benchmark import Mode
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    own_topic = options["topic"] is None
    if own_topic and mode is Mode.CONSUME:
        fail("--mode consume needs --topic (and --channel): the channel to drain")
    topic = options["topic"] or f"bench-{random.randrange(16**8):08x}"
    try:
        check_topic(topic)
        check_channel(options["channel"])
    except LocalProtocolError as error:
        fail(str(error))
    return topic, own_topic


def _client_options(options: dict[str, Any], role: str) -> tuple[str, ...]:
    """--producer-opt or --consumer-opt, checked as the other commands check them."""
    from nsqtools.commands.options import passthrough_config

    pairs = tuple(options[f"{role}_options"])
    passthrough_config("nsq_bench", {"client_options": pairs}, f"{role}-opt")
    return pairs


def _one_address(addresses: tuple[str, ...], option: str, default: str) -> str:
    if len(addresses) > 1:
        fail(f"{option}: nsq bench measures one nsqd, {len(addresses)} were given")
    return addresses[0] if addresses else default


def _http_address(options: dict[str, Any], nsqd_tcp_address: str) -> str:
    """--nsqd-http-address, else nsqd's own layout: the HTTP port after the TCP port."""
    from nsqtools.addresses import join_host_port, split_address
    from nsqtools.commands.options import check_addresses

    given = options["nsqd_http_addresses"]
    if given:
        address = _one_address(given, "--nsqd-http-address", "")
        check_addresses([address], "--nsqd-http-address")
        return address
    host, port = split_address(nsqd_tcp_address)
    return join_host_port(host, port + 1)


class _Outputs:
    """Where the results go: the tables (stdout, unless a file is "-"), JSON, CSV."""

    def __init__(self, options: dict[str, Any]) -> None:
        import os

        self.json_file: Path | None = options["json_file"]
        self.csv_file: Path | None = options["csv_file"]
        if str(self.json_file) == str(self.csv_file) == STDOUT:
            fail("--json - and --csv -: only one of them can have stdout")
        self.tables = STDOUT not in (str(self.json_file), str(self.csv_file))
        consoles.use_color(not (options["no_color"] or os.environ.get("NO_COLOR")))
        self.progress = sys.stderr.isatty()

    def write(self, results: BenchResults) -> None:
        if self.tables:
            consoles.stdout().print(*summary_tables(results))
        if self.json_file is not None:
            _write_json(self.json_file, results)
        if self.csv_file is not None:
            _write_csv(self.csv_file, results)


def _write_json(path: Path, results: BenchResults) -> None:
    import json

    text = json.dumps(results.to_json(), indent=2) + "\n"
    if str(path) == STDOUT:
        sys.stdout.write(text)
    else:
        _write_file(path, text, "w")


def _write_csv(path: Path, results: BenchResults) -> None:
    import csv
    import io

    row = results.flat()
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(row), lineterminator="\n")
    if str(path) == STDOUT or not path.exists() or not path.stat().st_size:
        writer.writeheader()
    writer.writerow(row)
    if str(path) == STDOUT:
        sys.stdout.write(text.getvalue())
    else:
        _write_file(path, text.getvalue(), "a")


def _write_file(path: Path, text: str, mode: str) -> None:
    from nsqtools.errors import describe_file_error

    try:
        with path.open(mode) as output:
            output.write(text)
    except OSError as error:
        fail(f"cannot write the results: {describe_file_error(error, path)}")


# -- running -----------------------------------------------------------------------------


async def _bench(settings: BenchSettings, outputs: _Outputs) -> None:
    import functools

    import trio

    from nsqtools.benchmark import BenchRun
    from nsqtools.runtime.signals import watch_signals

    bench = BenchRun(settings)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(watch_signals, bench.interrupt))
        if outputs.progress:
            nursery.start_soon(_show_progress, bench)
        results = await bench.run()
        nursery.cancel_scope.cancel()
    outputs.write(results)
    if results.interrupted:
        fail("interrupted: the figures cover the run until then", EXIT_INTERRUPTED)


async def _show_progress(bench: BenchRun) -> None:
    """Progress bars on stderr, redrawn every REFRESH_INTERVAL, gone at the end."""
    import trio
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description:>8}"),
        BarColumn(),
        TextColumn("{task.fields[messages]:>12,} msgs {task.fields[rate]:>11,.0f} msg/s"),
        TimeElapsedColumn(),
        console=consoles.stderr(),
        auto_refresh=False,
        transient=True,
    )
    bars = _Bars(progress, bench)
    with progress:
        while True:
            bars.update(bench.live)
            progress.refresh()
            await trio.sleep(REFRESH_INTERVAL)


class _Bars:
    """A bar per role: messages against the count, or time against the duration; and
    consumers beside publishers against what was published so far."""

    def __init__(self, progress: Progress, bench: BenchRun) -> None:
        self.progress = progress
        self.settings = bench.settings
        mode = self.settings.mode
        self.publish: TaskID | None = self._add("publish") if mode.publishes else None
        self.consume: TaskID | None = self._add("consume") if mode.consumes else None

    def _add(self, name: str) -> TaskID:
        return self.progress.add_task(name, total=None, messages=0, rate=0.0)

    def update(self, live: LiveCounts) -> None:
        import trio

        if live.started_at is None:
            return
        elapsed = trio.current_time() - live.started_at
        if self.publish is not None:
            bar = self._ending_by_itself(live.published, elapsed)
            self._show(self.publish, live.published, elapsed, bar)
        if self.consume is not None:
            if self.settings.mode.publishes:
                bar = (float(live.consumed), float(max(live.published, 1)))
            else:
                bar = self._ending_by_itself(live.consumed, elapsed)
            self._show(self.consume, live.consumed, elapsed, bar)

    def _ending_by_itself(self, messages: int, elapsed: float) -> tuple[float, float]:
        """Messages against the count, or time against the duration."""
        if self.settings.count is not None:
            return float(messages), float(self.settings.count)
        duration = self.settings.duration or 0.0
        return min(elapsed, duration), duration

    def _show(self, task: TaskID, messages: int, elapsed: float, bar: tuple[float, float]) -> None:
        rate = messages / elapsed if elapsed > 0 else 0.0
        done, total = bar
        self.progress.update(task, completed=done, total=total, messages=messages, rate=rate)


# -- the summary ------------------------------------------------------------------------


def summary_tables(results: BenchResults) -> list[Any]:
    """What the run was, the throughput table and, when latencies were recorded, the
    latency table (rich renderables)."""
    from rich.table import Table

    throughput = Table()
    for heading in ("", "messages", "seconds", "msg/s", "MiB/s"):
        throughput.add_column(heading, justify="right" if heading else "left")
    for name, figures in (("publish", results.publish), ("consume", results.consume)):
        if figures is not None:
            throughput.add_row(
                name,
                f"{figures.messages:,}",
                f"{figures.seconds:.3f}",
                f"{figures.messages_per_second:,.0f}",
                f"{figures.mib_per_second:,.2f}",
            )
    tables: list[Any] = [_run_line(results), throughput]
    latency = results.latency_ms()
    if latency is not None:
        table = Table(title="end-to-end latency (ms)", title_justify="left")
        for name in latency:
            table.add_column(name, justify="right")
        table.add_row(*(f"{value:,.3f}" for value in latency.values()))
        tables.append(table)
    if results.unstamped:
        tables.append(f"{results.unstamped:,} messages consumed carried no stamp of nsq bench")
    return tables


def _run_line(results: BenchResults) -> str:
    """What was measured, in a line: nsqd, topic, messages, clients."""
    settings = results.settings
    parts = [f"nsq bench: nsqd {settings.nsqd_tcp_address}", f"topic {settings.topic}"]
    if settings.mode.publishes:
        parts.append(f"{settings.size}-byte messages in MPUBs of {settings.batch_size}")
        parts.append(f"{settings.publishers} publishers")
    if settings.mode.consumes:
        parts.append(f"{settings.consumers} consumers on channel {settings.channel}")
    return ", ".join(parts) + (" (interrupted)" if results.interrupted else "")
