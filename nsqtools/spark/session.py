"""The SparkSession an archive job runs on.

--master (local[*] by default; spark-submit's own when run through it), --conf key=value
pairs, and defaults that suit a command-line job: no web UI and no console progress bar
(the command shows its own), UTC as the session's time zone (partitions by date and
hour are UTC's), Python workers on this interpreter, the parallel collector, and a
class-data archive (classdata.py) for a quicker start. Spark's own logs are quiet: its
JVM writes them to a log file unless the user asks to see them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from nsqtools.spark import classdata

DEFAULT_MASTER = "local[*]"
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger", "py4j")
# Defaults a --conf of the same key replaces.
_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # The parallel collector: a batch job's throughput, not G1's pause times (measured:
    # compact of 2M envelopes 16.7 s against 18.5 s on 2 cores).
    _JAVA_OPTIONS: (f"-Dlog4j2.configurationFile={_LOG4J_CONFIG.as_uri()} -XX:+UseParallelGC"),
}


class ConfError(ValueError):
    """A --conf that is not key=value."""


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = None  # None: spark-submit's, or DEFAULT_MASTER
    conf: dict[str, str] = field(default_factory=dict)
    verbose: bool = False  # Spark's warnings and its JVM's output on stderr


def parse_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    """--conf key=value, as spark-submit takes it."""
    conf = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ConfError(f"--conf {pair!r}: expected key=value")
        conf[key.strip()] = value
    return conf


def under_spark_submit() -> bool:
    """spark-submit started the JVM and runs this interpreter as its Python driver."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def start(settings: SparkSettings, log_file: Path | None = None) -> tuple[SparkSession, bool]:
    """The session the job runs on, and whether it was there already (spark-submit's, a
    test run's: its owner stops it); the JVM's output goes to log_file unless verbose."""
    if not settings.verbose:
        _quiet_python_loggers()
    existing = SparkSession.getActiveSession()
    if existing is not None:
        return existing, True
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("nsq archive")
    launching = not under_spark_submit()  # else spark-submit launched the JVM
    defaults = dict(_DEFAULT_CONF)
    if launching:
        builder = builder.master(settings.master or DEFAULT_MASTER)
        defaults[_JAVA_OPTIONS] += " " + classdata.java_options()
    for key, value in {**defaults, **settings.conf}.items():
        builder = builder.config(key, value)
    if not settings.verbose:
        builder = builder.config("spark.log.level", "ERROR")
    with _stderr_to(None if settings.verbose else log_file), _sigint_kept():
        session = builder.getOrCreate()
    if launching:
        classdata.record_jvm(_jvm_pid(session))
    return session, False


@contextlib.contextmanager
def _sigint_kept() -> Iterator[None]:
    """Keep the program's SIGINT handler over a SparkContext's start: PySpark installs
    its own, which raises KeyboardInterrupt (an exit 130 without a word, where the
    program's first stop cancels the job and says so, exit 1)."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        # PySpark changes it only in the main thread (None: not set from Python).
        if handler is not None and signal.getsignal(signal.SIGINT) is not handler:
            signal.signal(signal.SIGINT, handler)


def _quiet_python_loggers() -> None:
    """PySpark's Python side logs a failed query's context as JSON on stderr; the
    command says it in one line."""
    for name in _PYSPARK_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _jvm_pid(session: SparkSession) -> int:
    jvm = session.sparkContext._jvm
    assert jvm is not None  # a session started here has its gateway
    pid: int = jvm.java.lang.ProcessHandle.current().pid()
    return pid


def is_spark_error(error: BaseException) -> bool:
    """A failure Spark reports (a job, the JVM, a query): one line for the user."""
    return isinstance(error, PySparkException | Py4JError)


def default_log_file() -> Path:
    """Where the JVM writes when it is quiet: one file per run, in the temp directory."""
    return Path(tempfile.gettempdir(), f"nsq-archive-spark-{os.getpid()}.log")


@contextlib.contextmanager
def _stderr_to(log_file: Path | None) -> Iterator[None]:
    """Send file descriptor 2 to log_file while the JVM starts: the JVM keeps it, this
    process gets its own stderr back."""
    if log_file is None:
        yield
        return
    saved = os.dup(2)
    try:
        with log_file.open("ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
