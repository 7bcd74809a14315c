"""What the `nsq archive` subcommands share: the archive options, and running a job on
a SparkSession with a progress display on stderr (a terminal only), Spark's failures
as one line, and the first SIGINT/SIGTERM cancelling the job (exit 1, said in a line).

The archives are listed and scanned by Spark once the session has started (they may be
anywhere Hadoop reaches); a session that already exists (spark-submit's, or a test
run's) is used and left running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from nsqtools.commands.cluster_cli import Column, Table
from nsqtools.commands.front import fail
from nsqtools.runtime.signals import StopCalls

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

    from nsqtools.archive.nameparsing import NameParser
    from nsqtools.archive.reading import Format
    from nsqtools.spark.messages import ArchiveFile, Listed
    from nsqtools.spark.progress import StageProgress

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

GO_FILENAME_FORMAT = "<TOPIC>.<HOST><REV>.<DATETIME>.log"  # nsq_to_file's defaults
GO_DATETIME_FORMAT = "%Y-%m-%d_%H"
_SPARK_MISSING = "nsq archive needs PySpark: pip install 'nsqtools[spark]' (and Java 17 or newer)"
_STOPPED = "stopped by a signal before the job's end"


def sources_argument(function: F) -> F:
    return click.argument("sources", nargs=-1, required=True, metavar="SRC...")(function)


def archive_options(function: F) -> F:
    """How to read the archives' names and lines."""
    decorators = [
        click.option(
            "--filename-format",
            default=GO_FILENAME_FORMAT,
            show_default=True,
            help="The --filename-format nsq_to_file ran with: where a file's topic, host "
            "and time are in its name (relative to the SRC directory).",
        ),
        click.option(
            "--datetime-format",
            default=GO_DATETIME_FORMAT,
            show_default=True,
            help="The --datetime-format nsq_to_file ran with (strftime).",
        ),
        click.option(
            "--timezone",
            metavar="ZONE",
            help="The zone nsq_to_file named files in (its local time), e.g. Europe/Paris; "
            "default: this machine's.",
        ),
        click.option(
            "--format",
            "archive_format",
            type=click.Choice(["auto", "json", "raw"]),
            default="auto",
            show_default=True,
            help="Archive lines: JSON envelopes (nsq_to_file --format json) or raw bodies; "
            "auto tells by each file's first line.",
        ),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return spark_options(function)


def spark_options(function: F) -> F:
    decorators = [
        click.option(
            "--master",
            help="Spark master URL: local[N], spark://host:port, yarn..., or sc://host:port "
            "(a Spark Connect server, as --remote).  [default: local[*], or spark-submit's]",
        ),
        click.option(
            "--remote",
            metavar="URL",
            help="Run on a Spark Connect server, sc://host:port. Read as spark-submit reads "
            "it: --remote or --master here, else --conf spark.remote (or spark.master), "
            "else the SPARK_REMOTE environment variable.",
        ),
        click.option(
            "--conf",
            multiple=True,
            metavar="KEY=VALUE",
            help="A Spark setting, as spark-submit's --conf (may be given multiple times).",
        ),
        click.option(
            "--verbose",
            is_flag=True,
            help="Show Spark's own warnings and output (by default they go to a log file, "
            "named when a job fails).",
        ),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


@dataclass(frozen=True)
class Scanned(Generic[T]):
    """A job's result, beside the archive files it read (as the scan found them)."""

    files: list[ArchiveFile]
    result: T

    def damaged(self) -> list[ArchiveFile]:
        return [file for file in self.files if file.report.damage is not None]

    def damaged_json(self) -> list[dict[str, Any]]:
        return [
            {"file": file.report.path, "damage": file.report.damage, "lines": file.report.lines}
            for file in self.damaged()
        ]

    def damaged_table(self) -> list[Table]:
        """The damaged files and the whole lines used of each: a table, or none."""
        damaged = self.damaged()
        if not damaged:
            return []
        table = Table(
            [Column("damaged file"), Column("damage"), Column("whole lines used", numeric=True)],
            title=f"{len(damaged)} damaged files",
        )
        for file in damaged:
            table.add([file.report.path, file.report.damage or "", f"{file.report.lines:,}"])
        return [table]


@dataclass
class JobRun(Generic[T]):
    """A job's result and where the time went."""

    result: T
    seconds: dict[str, float] = field(default_factory=dict)


def find_archives(options: dict[str, Any]) -> Callable[[SparkSession], list[ArchiveFile]]:
    """The scan of the archives options name, its options checked now, run on the
    session once it has started."""
    names, archive_format = _archive_reading(options)

    def scan(spark: SparkSession) -> list[ArchiveFile]:
        from nsqtools.spark.messages import find_archives as scanned
        from nsqtools.spark.messages import list_sources

        listed = list_sources(spark, options["sources"])
        return scanned(spark, _once(listed.values()), names, archive_format)

    return scan


@dataclass(frozen=True)
class Sources:
    """What SRC... names: archive files (scanned), and directories compact wrote (their
    URIs, read as tables)."""

    archives: list[ArchiveFile]
    compacted: list[str]


def find_sources(options: dict[str, Any]) -> Callable[[SparkSession], Sources]:
    """As find_archives, with the directories compact wrote set apart (read as tables)."""
    names, archive_format = _archive_reading(options)

    def scan(spark: SparkSession) -> Sources:
        from nsqtools.spark.messages import find_archives as scanned
        from nsqtools.spark.messages import is_compacted, list_sources
        from nsqtools.spark.storage import location_uri

        listed = list_sources(spark, options["sources"])
        compacted = [source for source, files in listed.items() if is_compacted(files)]
        archives = [files for source, files in listed.items() if source not in compacted]
        found = scanned(spark, _once(archives), names, archive_format)
        return Sources(found, [location_uri(source) for source in compacted])

    return scan


def _archive_reading(options: dict[str, Any]) -> tuple[NameParser, Format | None]:
    """How the archives' names and lines are read, from the options (checked)."""
    from nsqtools.archive.nameparsing import NameParser
    from nsqtools.archive.names import BadName

    try:
        zone = ZoneInfo(options["timezone"]) if options["timezone"] else None
    except (ZoneInfoNotFoundError, ValueError):
        fail(f"--timezone {options['timezone']!r}: not a time zone name (e.g. Europe/Paris)")
    try:
        names = NameParser.build(options["filename_format"], options["datetime_format"], zone=zone)
    except BadName as error:
        fail(str(error))
    archive_format = None if options["archive_format"] == "auto" else options["archive_format"]
    return names, archive_format


def _once(listings: Iterable[list[Listed]]) -> list[Listed]:
    """The files of every source, each once (sources may overlap)."""
    files: dict[str, Listed] = {}
    for listed in listings:
        for file in listed:
            files.setdefault(file.uri, file)
    return list(files.values())


def run_job(
    options: dict[str, Any],
    prepare: Callable[[SparkSession], Any],
    job: Callable[[SparkSession, Any], T],
    console: Console,
) -> JobRun[T]:
    """Start Spark, then prepare(session) (the scan of the sources) and job(session,
    prepared), with progress on the console; Spark's failures end the command in one
    line."""
    try:
        from nsqtools.spark import session
    except ImportError:
        fail(_SPARK_MISSING)
    settings = _settings(options)
    log_file = session.default_log_file()
    seconds: dict[str, float] = {}
    stop = _JobStop()
    started = time.perf_counter()
    try:
        with StopCalls(stop.now), _Progress(console) as progress:
            progress.status("starting Spark")
            spark, existed = session.start(settings, log_file)
            seconds["session"] = time.perf_counter() - started
            try:
                stop.spark = spark
                stop.check()
                started = time.perf_counter()
                value = progress.follow(spark, lambda: prepare(spark))
                seconds["scan"] = time.perf_counter() - started
                stop.check()
                started = time.perf_counter()
                result = progress.follow(spark, lambda: job(spark, value))
                seconds["job"] = time.perf_counter() - started
            finally:
                stop.forget_session()  # a stop signal from now on cancels nothing
                if not existed:
                    spark.stop()
    except session.StartInterrupted:
        fail(_STOPPED)
    except Exception as error:
        if not session.is_spark_error(error):
            raise
        stop.check()
        # A classic session's JVM writes there; a Connect server keeps its own log.
        logged = "" if settings.remote else f" (Spark's log: {log_file})"
        fail(f"Spark: {session.error_line(error)}{logged}")
    log_file.unlink(missing_ok=True)
    return JobRun(result, seconds)


class _JobStop:
    """The first SIGINT/SIGTERM cancels the job's Spark jobs (from a thread: the signal
    handler must not wait on the JVM); the command then ends with exit 1, saying that it
    stopped before its end (compact publishes nothing of a job cut short; replay may
    have published part: running it again publishes all, duplicates included).

    A cancel and the session's stop take turns: a signal that comes as the job ends
    must not reach a SparkContext stopped meanwhile (PySpark then raises in the
    cancelling thread, a traceback on stderr)."""

    def __init__(self) -> None:
        self.spark: SparkSession | None = None
        self.stopped = False
        self._turns = threading.Lock()  # held by a cancel, and to forget the session

    def now(self) -> None:
        self.stopped = True
        if self.spark is not None:
            threading.Thread(target=self._cancel, daemon=True).start()

    def forget_session(self) -> None:
        """The session is about to stop (or to be left to its owner): cancel nothing
        more, once a cancel under way has ended."""
        with self._turns:
            self.spark = None

    def _cancel(self) -> None:
        from nsqtools.spark.session import cancel_jobs

        with self._turns:
            if self.spark is not None:  # None: the job ended and its session with it
                cancel_jobs(self.spark)

    def check(self) -> None:
        """End the command if the stop came (a job that ended all the same has done its
        work: its result stands)."""
        if self.stopped:
            fail(_STOPPED)


def _settings(options: dict[str, Any]) -> Any:
    from nsqtools.spark.session import ConfError, SparkSettings, parse_conf, resolve

    try:
        conf = parse_conf(options["conf"])
        given = SparkSettings(options["master"], options["remote"], conf, options["verbose"])
        return resolve(given)
    except ConfError as error:
        fail(str(error))


class _Progress:
    """A line of status and one bar per running Spark stage, on a terminal only."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Any = None
        self._tasks: dict[int, Any] = {}
        self._status: Any = None

    def __enter__(self) -> _Progress:
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn

            self._live = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} tasks"),
                console=self.console,
                transient=True,
            )
            self._live.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def status(self, text: str) -> None:
        if self._live is not None:
            self._status = self._live.add_task(text, total=None)

    def follow(self, spark: SparkSession, job: Callable[[], T]) -> T:
        if self._live is None:
            return job()
        from nsqtools.spark.progress import watched

        if self._status is not None:
            self._live.remove_task(self._status)
            self._status = None
        with watched(spark, self._show):
            return job()

    def _show(self, stages: list[StageProgress]) -> None:
        active = {stage.stage_id for stage in stages}
        for stage_id in set(self._tasks) - active:
            self._live.remove_task(self._tasks.pop(stage_id))
        for stage in stages:
            if stage.stage_id not in self._tasks:
                description = f"stage {stage.stage_id}"
                self._tasks[stage.stage_id] = self._live.add_task(description, total=stage.tasks)
            self._live.update(self._tasks[stage.stage_id], completed=stage.tasks_done)
