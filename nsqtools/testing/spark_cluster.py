"""A Spark standalone cluster on loopback, for tests of jobs that must work beyond
local mode: a master and workers started from pyspark's own bin/spark-class (Java 17 or
newer), each a process of its own, logging to a file in the cluster's folder.

A worker can be given a private directory: it then runs in a mount namespace of its own
(unshare(1), which needs root) where that directory is covered by a tmpfs, so whatever
its executors write there no other process sees: an output directory that is not
shared storage, as a driver meets it when --out is local to each machine.

    with SparkCluster(tmp_path / "spark", workers=2, private={1: out}) as cluster:
        cluster.master_url     # spark://127.0.0.1:PORT, for --master
        cluster.submit_conf    # confs that spread a job's tasks over every worker

Starting waits on conditions: the master's log names its URL and web UI, and the UI's
JSON lists every worker alive. Stopping ends each process group it started.

SHARED is the cluster a whole test run shares (shared_services.py): two workers of one
core each, started by the first test that needs it; its tests get a RunningCluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx

from nsqtools.httpapi.clients import sync_client
from nsqtools.testing.binaries import PACKAGE_ROOT
from nsqtools.testing.cluster import wait_until
from nsqtools.testing.lifetime import StartsAndStops
from nsqtools.testing.shared_services import SharedService

START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"MasterWebUI.* started at (http://\S+)")


def spark_home() -> Path:
    """pyspark's folder, which holds bin/ and jars/ (found, not imported: PySpark is
    nsqtools.spark's to import)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed (the spark extra)")
    return Path(spec.origin).parent


def submit_conf(workers: int) -> MappingProxyType[str, str]:
    """Confs for a job on a cluster of `workers` workers that give each worker one
    executor of one core, start no task before all are there (waiting up to five minutes
    for them: a shared cluster's cores may be another job's until it ends), and never
    wait for a preferred one: a stage with as many tasks as workers runs one on each."""
    return MappingProxyType(
        {
            "spark.cores.max": str(workers),
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
            "spark.locality.wait": "0s",
            "spark.driver.host": "127.0.0.1",
        }
    )


@dataclasses.dataclass(frozen=True)
class RunningCluster:
    """A cluster started elsewhere (by another process of the test run): its addresses."""

    master_url: str  # spark://127.0.0.1:PORT, for --master
    ui_url: str  # the master's web UI: its JSON at /json/
    workers: int

    @property
    def submit_conf(self) -> MappingProxyType[str, str]:
        return submit_conf(self.workers)


class SparkCluster(StartsAndStops):
    def __init__(
        self,
        folder: Path,
        workers: int = 2,
        private: dict[int, Path] | None = None,
        on_spawn: Callable[[int], None] | None = None,
    ) -> None:
        """`workers` workers of one core each; private: worker index → a directory
        (which must exist) that only that worker's processes see, as an empty tmpfs;
        on_spawn: called with each process group the cluster starts, as it starts it."""
        self.folder = folder
        self.workers = workers
        self.private = dict(private or {})
        self.on_spawn = on_spawn
        self.master_url = ""
        self.ui_url = ""
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def submit_conf(self) -> MappingProxyType[str, str]:
        return submit_conf(self.workers)

    @property
    def running(self) -> RunningCluster:
        return RunningCluster(self.master_url, self.ui_url, self.workers)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        master_log = self.folder / "master.log"
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        self._spawn([*master, "--port", "0", "--webui-port", "0"], master_log)
        found: dict[str, str] = {}

        def master_started() -> bool:
            self._check_running()
            return _read_master_log(master_log, found)

        wait_until(master_started, START_TIMEOUT, "the master")
        self.master_url, self.ui_url = found["url"], found["ui"]
        for index in range(self.workers):
            self._start_worker(index)
        wait_until(self._all_workers_alive, START_TIMEOUT, f"{self.workers} workers alive")

    def _start_worker(self, index: int) -> None:
        work_dir = self.folder / f"worker{index}"
        work_dir.mkdir(exist_ok=True)
        worker = [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
            "--webui-port", "0", "--cores", "1", "--memory", "1g",
            "--work-dir", str(work_dir), self.master_url,
        ]  # fmt: skip
        hidden = self.private.get(index)
        self._spawn(worker, self.folder / f"worker{index}.log", hidden)

    def _spawn(self, arguments: list[str], log: Path, hidden: Path | None = None) -> None:
        command = [str(spark_home() / "bin" / "spark-class"), *arguments]
        if hidden is not None:
            mount_then_run = 'mount -t tmpfs tmpfs "$0" && exec "$@"'
            command = [
                "unshare", "--mount", "--propagation", "private",
                "sh", "-c", mount_then_run, str(hidden), *command,
            ]  # fmt: skip
        python_path = filter(None, [str(PACKAGE_ROOT), os.getenv("PYTHONPATH")])
        environment = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.folder),
            # Executors' Python workers import this checkout's nsqtools, as the tests do.
            "PYTHONPATH": os.pathsep.join(python_path),
        }
        with log.open("ab") as output:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,  # its executors join its group: stopped with it
            )
        self._processes.append(process)
        if self.on_spawn is not None:
            self.on_spawn(process.pid)  # the leader of its session: its group's id

    def _all_workers_alive(self) -> bool:
        self._check_running()
        try:
            with sync_client(timeout=5) as client:
                state = client.get(f"{self.ui_url}/json/").json()
        except (httpx.HTTPError, ValueError):
            return False
        return int(state.get("aliveworkers", 0)) >= self.workers

    def _check_running(self) -> None:
        for process in self._processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"a Spark process exited ({process.returncode}): see {self.folder}/*.log"
                )

    def stop(self) -> None:
        """Workers (and their executors) first, then the master."""
        for process in reversed(self._processes):
            end_group(process)
        self._processes.clear()


def _start_shared(folder: Path, record_group: Callable[[int], None]) -> dict[str, Any]:
    """Starts the run's shared cluster; its processes outlive this object, ended by the
    run's end (shared_services.end_run) through the groups recorded."""
    cluster = SparkCluster(folder, workers=2, on_spawn=record_group)
    cluster.start()
    _outliving.append(cluster)  # its Popen objects kept: no warning that they still run
    return dataclasses.asdict(cluster.running)


SHARED = SharedService("spark_cluster", _start_shared)
_outliving: list[SparkCluster] = []


def _read_master_log(log: Path, found: dict[str, str]) -> bool:
    text = log.read_text(errors="replace")
    url, ui = _MASTER_URL.search(text), _MASTER_UI.search(text)
    if url is None or ui is None:
        return False
    found["url"], found["ui"] = url[1], ui[1]
    return True


def end_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group it leads, SIGKILL if it is still there after a while."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # Executors outlive a worker killed hard: their group goes too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
