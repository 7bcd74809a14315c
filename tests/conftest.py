"""Fixtures that start real NSQ (v1.3.0, built by scripts/install-nsq) on free loopback ports.

Every process gets its own data dir under the test's tmp_path and is stopped at
teardown, whatever the test's outcome. A missing nsqd fails the test; it never skips.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nsqtools.testing import Nsqd, Nsqlookupd, NsqProcess, TlsFiles, run_go_tool
from nsqtools.testing.authd import AuthService
from nsqtools.testing.shared_services import SharedServices, run_folder

AUTH_SECRETS = {"s3cret": "alice"}


def shared_services(config: pytest.Config) -> SharedServices:
    """The services this test run shares across its processes, keyed by xdist's
    testrun_uid (which a run without xdist gets from pytest_configure here too)."""
    workerinput = getattr(config, "workerinput", None)
    run_id = workerinput["testrunuid"] if workerinput else config.option.testrunuid
    return SharedServices(run_folder(run_id))


def pytest_configure(config: pytest.Config) -> None:
    """The controller (xdist's, or the only process) names the run before its workers
    start (xdist hands them --testrunuid, or a uid of its own if that is unset)."""
    if not hasattr(config, "workerinput"):
        if getattr(config.option, "testrunuid", None) is None:
            config.option.testrunuid = uuid.uuid4().hex
        shared_services(config).begin(os.getpid())


@pytest.hookimpl(trylast=True)  # after xdist's own, which waits for its workers' end
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller ends the shared services once, when every test is done."""
    if not hasattr(session.config, "workerinput"):
        shared_services(session.config).end()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked `longest` (minutes each) first in the shares pytest-xdist's
    work-stealing scheduler hands out: it gives each of W workers a run of the collected
    tests (the first a W-th, the next a (W-1)-th of the rest, ...), and idle workers
    steal from the ends of the others' runs. So one longest test at the head of each run
    starts at once, instead of one starting late and the suite waiting for it alone."""
    longest = [item for item in items if item.get_closest_marker("longest")]
    if not longest:
        return
    others = [item for item in items if not item.get_closest_marker("longest")]
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    ordered: list[pytest.Item] = []
    left = len(items)
    for worker in range(workers):
        share = left // (workers - worker)
        heads = longest[worker::workers]
        ordered += heads
        taken = max(share - len(heads), 0)
        ordered += others[:taken]
        others = others[taken:]
        left -= share
    items[:] = ordered + others


@pytest.fixture(autouse=True, scope="session")
def no_saved_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test sees the saved contexts (`nsq context`) of whoever runs it: an empty
    config folder and no NSQ_CONTEXT, here and in every program a test starts."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    patch.delenv("NSQ_CONTEXT", raising=False)
    yield
    patch.undo()


# Every JVM the tests start (Spark's drivers and executors, the cluster's daemons, the
# Connect server, spark-submit's launcher) works seconds on small data, where the JIT's
# top tier (C2) is only CPU spent compiling. The first tier alone: the Spark test files
# 663 -> 535 s on 2 cores. A user's job keeps the JVM's default: `nsq archive compact`
# of the bench's 2M envelopes takes 2.4x as long on the first tier alone.
FIRST_JIT_TIER_ONLY = "-XX:TieredStopAtLevel=1"


@pytest.fixture(autouse=True, scope="session")
def quick_jvms() -> Iterator[None]:
    """Every JVM a test starts, here or in a program it runs, compiles with the JIT's
    first tier only (JAVA_TOOL_OPTIONS, which each JVM reads and names on stderr)."""
    patch = pytest.MonkeyPatch()
    options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    patch.setenv("JAVA_TOOL_OPTIONS", f"{options} {FIRST_JIT_TIER_ONLY}".strip())
    yield
    patch.undo()


class LocalNsq:
    """Starts NSQ processes under one folder and stops all of them at teardown."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[NsqProcess] = []

    def lookupd(self, name: str = "nsqlookupd") -> Nsqlookupd:
        lookupd = Nsqlookupd(self.root / name, name)
        self._start(lookupd)
        return lookupd

    def nsqd(
        self, name: str = "nsqd", *, lookupds: Sequence[Nsqlookupd] = (), **options: Any
    ) -> Nsqd:
        """An nsqd; with lookupds, returns once every lookupd lists it."""
        nsqd = Nsqd(self.root / name, name, lookupds=lookupds, **options)
        self._start(nsqd)
        for lookupd in lookupds:
            lookupd.wait_for_nsqd(nsqd)
        return nsqd

    def _start(self, process: NsqProcess) -> None:
        self.processes.append(process)
        process.start()

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()


@dataclass
class Cluster:
    lookupd: Nsqlookupd
    nsqds: list[Nsqd]

    @property
    def nsqd(self) -> Nsqd:
        return self.nsqds[0]

    def publish_many(self, topic: str, bodies: Callable[[Nsqd], list[bytes]]) -> None:
        """Publish bodies(nsqd) to each nsqd, and wait until the lookupd lists them all
        for the topic (else a consumer's first lookup may find only some)."""
        for nsqd in self.nsqds:
            nsqd.publish_many(topic, bodies(nsqd))
        self.lookupd.wait_for_topic(topic, self.nsqds)


@pytest.fixture
def local_nsq(tmp_path: Path) -> Iterator[LocalNsq]:
    local = LocalNsq(tmp_path / "nsq")
    try:
        yield local
    finally:
        local.close()


@pytest.fixture
def nsqd(local_nsq: LocalNsq) -> Nsqd:
    """One nsqd without a lookupd."""
    return local_nsq.nsqd()


@pytest.fixture
def lookupd(local_nsq: LocalNsq) -> Nsqlookupd:
    return local_nsq.lookupd()


@pytest.fixture
def cluster(local_nsq: LocalNsq, lookupd: Nsqlookupd) -> Cluster:
    """One nsqd registered with one nsqlookupd."""
    return Cluster(lookupd, [local_nsq.nsqd(lookupds=[lookupd])])


@pytest.fixture
def cluster2(local_nsq: LocalNsq, lookupd: Nsqlookupd) -> Cluster:
    """Two nsqds registered with one nsqlookupd."""
    nsqds = [local_nsq.nsqd(f"nsqd{i}", lookupds=[lookupd]) for i in (1, 2)]
    return Cluster(lookupd, nsqds)


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    """A test CA and a server certificate for 127.0.0.1, made for this test."""
    return TlsFiles(tmp_path / "tls")


@pytest.fixture
def tls_nsqd(local_nsq: LocalNsq, tls_files: TlsFiles) -> Nsqd:
    """An nsqd offering TLS, snappy and deflate."""
    return local_nsq.nsqd("tls-nsqd", tls=tls_files, snappy=True, deflate=True)


@pytest.fixture
def auth_service() -> Iterator[AuthService]:
    """nsqd's auth HTTP service: accepts the secrets in AUTH_SECRETS, denies the rest."""
    with AuthService(AUTH_SECRETS) as service:
        yield service


@pytest.fixture
def auth_nsqd(local_nsq: LocalNsq, auth_service: AuthService) -> Nsqd:
    """An nsqd that requires AUTH, checked against auth_service."""
    return local_nsq.nsqd("auth-nsqd", auth_http_address=auth_service.address)


@pytest.fixture
def go_tool() -> Callable[..., Any]:
    """Runs a Go reference utility (nsq_tail, to_nsq, ...) to completion."""
    return run_go_tool


# nsqd that loses nothing when killed: every message on disk, synced, as it comes.
DURABLE = ["--mem-queue-size=0", "--sync-every=1"]


@pytest.fixture
def durable_nsq() -> Iterator[LocalNsq]:
    """NSQ processes whose data lives in memory (/dev/shm): nsqd's fsync per message
    (DURABLE) costs ~0.06 ms there instead of ~0.7 ms on this disk, and a SIGKILL of nsqd
    loses nothing either way (the page cache outlives the process)."""
    root = Path(tempfile.mkdtemp(prefix="nsqtools-", dir="/dev/shm"))
    local = LocalNsq(root)
    try:
        yield local
    finally:
        local.close()
        shutil.rmtree(root, ignore_errors=True)


# -- Spark -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An S3 server on loopback (moto) for the whole test run: the Spark session reads
    and writes its s3a:// buckets."""
    from nsqtools.testing.s3 import S3Server

    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="session")
def spark(s3_server: Any) -> Iterator[Any]:
    """One SparkSession (local[2]) for the whole test run: its start costs seconds. The
    `nsq archive` commands run in-process use it (an existing session is theirs to use,
    not to stop). It has the S3A jars and reaches the `s3_server` fixture's buckets: a
    process has one SparkContext, whose jars are set at its start."""
    from nsqtools.spark.session import SparkSettings, start

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one log per pytest worker
    log_file = Path(tempfile.gettempdir(), f"nsqtools-tests-spark-{worker}.log")
    settings = SparkSettings(master="local[2]", conf=dict(s3_server.spark_conf))
    session, _existed = start(settings, log_file)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(request: pytest.FixtureRequest) -> Any:
    """A Spark standalone cluster on loopback (a master, two workers of one core each)
    that the whole test run shares: the first test to ask starts it, in whichever
    pytest worker; it is stopped when the run ends. A RunningCluster: master_url,
    ui_url, submit_conf."""
    from nsqtools.testing.spark_cluster import SHARED, RunningCluster

    return RunningCluster(**shared_services(request.config).get(SHARED))


@pytest.fixture(scope="session")
def spark_connect(request: pytest.FixtureRequest) -> Any:
    """A Spark Connect server on loopback (local[2]) that the whole test run shares,
    started by the first test to ask: a RunningConnectServer (url, sessions())."""
    from nsqtools.testing.spark_connect import SHARED, RunningConnectServer

    return RunningConnectServer(**shared_services(request.config).get(SHARED))


@dataclass(frozen=True)
class ArchiveRun:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def nsq_archive(spark: Any, capsys: pytest.CaptureFixture[str]) -> Callable[..., ArchiveRun]:
    """Runs `nsq archive ARGS...` in this process as the program would (exit status, one
    line errors), on the test run's SparkSession."""
    from nsqtools.commands.archive import command
    from nsqtools.commands.front import run as run_program

    def run(*args: str) -> ArchiveRun:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            run_program(command, "nsq archive", list(args))
        captured = capsys.readouterr()
        return ArchiveRun(int(exited.value.code or 0), captured.out, captured.err)

    return run
