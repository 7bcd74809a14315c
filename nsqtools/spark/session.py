"""The SparkSession an archive job runs on: a classic one, whose JVM this process starts
(or spark-submit started), or a Spark Connect client of a server elsewhere.

Where the job runs is read as spark-submit reads it (resolve()): --remote or --master on
the command line, else --conf spark.remote or spark.master, else the SPARK_REMOTE
environment variable; a URL sc://host:port names a Spark Connect server. Without any,
--master local[*] (spark-submit's own master when run through it).

A classic session gets the --conf pairs, and defaults that suit a command-line job: no
web UI and no console progress bar (the command shows its own), UTC as the session's
time zone (partitions by date and hour are UTC's), Parquet timestamps as INT64
microseconds (not the deprecated INT96), Python workers on this interpreter,
the parallel collector, and a class-data archive (classdata.py) for a quicker start.
Spark's own logs are quiet: its JVM writes them to a log file unless the user asks to
see them. A Connect session gets the time zone, the Parquet timestamps and the --conf
pairs as runtime settings (the server refuses the others, in one line), but spark.jars*
and spark.driver.*, which are for the JVM this process starts to reach the files
(nsqtools.spark.storage); its server's JVM is not ours to set up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from nsqtools.spark import classdata

DEFAULT_MASTER = "local[*]"
CONNECT_SCHEME = "sc://"
REMOTE_ENV = "SPARK_REMOTE"
# Settings of a JVM this process starts: on Connect, the one nsqtools.spark.storage
# starts to list and publish files (S3A's jars, say); the server has its own.
_THIS_JVMS_KEYS = ("spark.jars", "spark.driver.")
_REMOTE_CONF = "spark.remote"
_MASTER_CONF = "spark.master"
_TIME_ZONE = "spark.sql.session.timeZone"
# A Connect client retries a call to a server that does not answer for ten minutes; the
# first call of a command gives up within about a second (retried after 100, 400 ms).
_FIRST_CALL_RETRIES = 2
_GRPC_STATUS = re.compile(r"status = StatusCode\.(\w+)")
_GRPC_DETAILS = re.compile(r'details = "(.*)"')
_CONNECT_ADDRESS = re.compile(r"sc://[^/;?]*")
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# What a JVM and Spark's launcher say on every start, failed or not.
_JVM_CHATTER = ("WARNING: Using incubator modules", "Using Spark's default log4j profile")
_PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger", "py4j")
# Parquet's timestamps as INT64 microseconds, the type every reader knows, instead of the
# deprecated INT96 (12 bytes each, and slower to write): classic and Connect sessions.
_PARQUET_TIMESTAMPS = "spark.sql.parquet.outputTimestampType"
_MICROSECONDS = "TIMESTAMP_MICROS"
# Defaults a --conf of the same key replaces.
_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    _TIME_ZONE: "UTC",
    _PARQUET_TIMESTAMPS: _MICROSECONDS,
    # The parallel collector: a batch job's throughput, not G1's pause times (measured:
    # compact of 2M envelopes 16.7 s against 18.5 s on 2 cores).
    _JAVA_OPTIONS: (f"-Dlog4j2.configurationFile={_LOG4J_CONFIG.as_uri()} -XX:+UseParallelGC"),
}


class ConfError(ValueError):
    """A --conf that is not key=value, or settings naming two places to run."""


class ConnectServerUnreachable(Exception):
    """A Spark Connect server that does not answer: one line, naming it."""


class StartInterrupted(Exception):
    """A SIGINT ended the session's start: it came while PySpark's own handler was in
    place (from the SparkContext's end to the session's), which abandons the start."""


class JvmDidNotStart(Exception):
    """The JVM this process started ended before it answered: one line, its first
    words and where the rest is."""


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = None  # None: spark-submit's, or DEFAULT_MASTER
    remote: str | None = None  # a Spark Connect server's URL (sc://host:port)
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


def resolve(settings: SparkSettings, environ: Mapping[str, str] = os.environ) -> SparkSettings:
    """The settings with where to run decided, as spark-submit decides it: the first of
    the command line (remote, master), --conf (spark.remote, spark.master) and the
    environment (SPARK_REMOTE) that names a place wins; a master sc://... is a Connect
    server. Then remote or master is set (or neither: the default master), and conf
    holds neither spark.remote nor spark.master."""
    conf = dict(settings.conf)
    places = [  # (the remote's name, the remote, the master's name, the master)
        ("--remote", settings.remote, "--master", settings.master),
        (
            f"--conf {_REMOTE_CONF}",
            conf.pop(_REMOTE_CONF, None),
            f"--conf {_MASTER_CONF}",
            conf.pop(_MASTER_CONF, None),
        ),
        (REMOTE_ENV, environ.get(REMOTE_ENV) or None, "", None),
    ]
    for remote_name, remote, master_name, master in places:
        if remote and master:
            raise ConfError(f"{remote_name} and {master_name}: give one of them")
        if master and master.startswith(CONNECT_SCHEME):
            remote_name, remote, master = master_name, master, None
        if remote and not remote.startswith(CONNECT_SCHEME):
            # Not shown: a URL may hold a token.
            raise ConfError(f"{remote_name}: a Spark Connect URL begins with {CONNECT_SCHEME}")
        if remote or master:
            return dataclasses.replace(settings, remote=remote, master=master, conf=conf)
    return dataclasses.replace(settings, remote=None, master=None, conf=conf)


def connect_address(url: str) -> str:
    """A Connect URL as it can be shown: sc://host:port, without its parameters (a
    token among them)."""
    found = _CONNECT_ADDRESS.match(url)
    return found[0] if found else CONNECT_SCHEME


def under_spark_submit() -> bool:
    """spark-submit started the JVM and runs this interpreter as its Python driver."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def start(settings: SparkSettings, log_file: Path | None = None) -> tuple[SparkSession, bool]:
    """The session the job runs on, and whether it was there already (spark-submit's, a
    test run's: its owner stops it); a classic session's JVM writes its output to
    log_file unless verbose."""
    if not settings.verbose:
        _quiet_pyspark()
    existing = SparkSession.getActiveSession()
    if existing is not None:
        return existing, True
    settings = resolve(settings)
    if settings.remote is not None:
        return _connect(settings.remote, settings.conf), False
    os.environ.pop(REMOTE_ENV, None)  # PySpark's builder would go there, whatever we chose
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


def _connect(url: str, conf: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session on the server at url, in UTC, with the conf's (runtime)
    settings; a server that does not answer its first call is a ConnectServerUnreachable."""
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # PySpark's own builder: it also tells pyspark.sql.functions to build Connect's
    # columns from now on.
    session = cast(ConnectSession, SparkSession.builder.remote(url).getOrCreate())
    client = session.client
    patient = client.get_retry_policies()
    client.set_retry_policies([DefaultPolicy(max_retries=_FIRST_CALL_RETRIES, initial_backoff=100)])
    try:
        session.conf.set(_TIME_ZONE, "UTC")  # the first call: the server answers, or not
    except PySparkException as error:
        client.close()
        address = connect_address(url)
        raise ConnectServerUnreachable(
            f"no Spark Connect server answers at {address}: {error_line(error)}"
        ) from None
    finally:
        client.set_retry_policies(patient)
    try:
        for key, value in {_PARQUET_TIMESTAMPS: _MICROSECONDS, **conf}.items():
            if not key.startswith(_THIS_JVMS_KEYS):
                session.conf.set(key, value)
    except PySparkException:
        session.stop()
        raise
    # The classic type names what both share, which is all the jobs use.
    return cast(SparkSession, session)


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session (no SparkContext, no RDDs, no JVM of ours)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def cancel_jobs(spark: SparkSession) -> None:
    """Cancel what the session is running (from any thread)."""
    if is_connect(spark):
        spark.interruptAll()
    else:
        spark.sparkContext.cancelAllJobs()


@contextlib.contextmanager
def _sigint_kept() -> Iterator[None]:
    """Keep the program's SIGINT handler over a SparkContext's start: PySpark installs
    its own, which raises KeyboardInterrupt (an exit 130 without a word, where the
    program's first stop cancels the job and says so, exit 1). A SIGINT it took before
    the start's end is a StartInterrupted, the context begun stopped (the program's own
    handler saw that signal too: Python writes every signal to its wakeup fd)."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    except KeyboardInterrupt:
        if handler is signal.default_int_handler:
            raise  # the program's own way with a SIGINT
        _stop_begun_context()
        raise StartInterrupted("stopped by a signal while Spark started") from None
    finally:
        # PySpark changes it only in the main thread (None: not set from Python).
        if handler is not None and signal.getsignal(signal.SIGINT) is not handler:
            signal.signal(signal.SIGINT, handler)


def _stop_begun_context() -> None:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        with contextlib.suppress(Exception):  # half made: what can be stopped is
            context.stop()


def _quiet_pyspark() -> None:
    """PySpark's Python side logs a failed query's context as JSON on stderr, and its
    Connect client warns as it gives up retrying; the command says it in one line."""
    for name in _PYSPARK_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", module=r"pyspark\.")


def _jvm_pid(session: SparkSession) -> int:
    jvm = session.sparkContext._jvm
    assert jvm is not None  # a session started here has its gateway
    pid: int = jvm.java.lang.ProcessHandle.current().pid()
    return pid


def is_spark_error(error: BaseException) -> bool:
    """A failure Spark reports (a job, the JVM, a query, a Connect server): one line
    for the user (error_line)."""
    kinds: tuple[type[BaseException], ...] = (
        PySparkException,
        Py4JError,
        ConnectServerUnreachable,
        JvmDidNotStart,
    )
    grpc = sys.modules.get("grpc")  # loaded by a Connect client only, whose calls raise it
    if grpc is not None:
        kinds += (grpc.RpcError,)
    return isinstance(error, kinds)


def error_line(error: BaseException) -> str:
    """A Spark failure in one line: its first, or a gRPC call's status and details
    (which a Connect client's errors give as a many-line repr)."""
    text = str(error)
    status, details = _GRPC_STATUS.search(text), _GRPC_DETAILS.search(text)
    if status is not None and details is not None:
        return f"{status[1]}: {details[1]}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@dataclass(frozen=True)
class OwnJvm:
    """A JVM this process started: py4j's view of it, and its process (which ends when
    its stdin closes: keep this while the JVM is in use)."""

    view: Any
    process: subprocess.Popen[bytes]


def own_jvm(conf: Mapping[str, str], log_file: Path) -> OwnJvm:
    """A JVM of this process's own without a Spark context (spark-submit's PySpark
    gateway, with conf), for a Connect client's work on files; its output goes to
    log_file. A JVM that ends before it answers is a JvmDidNotStart."""
    from py4j.java_gateway import GatewayParameters, JavaGateway  # type: ignore[import-untyped]
    from pyspark.find_spark_home import _find_spark_home

    command = [str(Path(_find_spark_home(), "bin", "spark-submit"))]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    with tempfile.TemporaryDirectory() as folder, log_file.open("ab") as log:
        answer = Path(folder, "gateway")  # where the JVM writes its port and secret
        environment = {
            **os.environ,
            "SPARK_CONNECT_MODE": "0",
            "_PYSPARK_DRIVER_CONN_INFO_PATH": str(answer),
        }
        start = log.tell()
        # No code of ours between fork and exec (a Connect client's gRPC threads make
        # that unsafe: it lost the JVM now and then), and a session of its own: a
        # terminal's Ctrl-C is the command's to act on.
        process = subprocess.Popen(
            [*command, "pyspark-shell"],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            env=environment,
            start_new_session=True,
        )
        while process.poll() is None and not answer.exists():
            time.sleep(0.05)  # the JVM takes seconds to start; it says nothing else
        if not answer.exists():
            said = _first_words(log_file.read_bytes()[start:].decode(errors="replace"))
            raise JvmDidNotStart(
                f"the JVM for the files ended as it started: {said} (its log: {log_file})"
            )
        port, secret = _gateway_answer(answer.read_bytes())
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(port=port, auth_token=secret, auto_convert=True)
    )
    return OwnJvm(gateway.jvm, process)


def _gateway_answer(data: bytes) -> tuple[int, str]:
    """PySpark's gateway's answer: its port (a big-endian int), then its secret (a
    big-endian length, then UTF-8)."""
    port, length = struct.unpack_from(">ii", data)
    return port, data[8 : 8 + length].decode()


def _first_words(output: str) -> str:
    """The first line of a JVM's output that is not the chatter of every start."""
    for line in output.splitlines():
        line = line.strip()
        if line and not line.startswith(_JVM_CHATTER) and " WARN " not in line:
            return line
    return "no word of why"


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
