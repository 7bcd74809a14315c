"""A Spark Connect server on loopback, for tests of `nsq archive --remote`: pyspark's
own spark-connect jar run by its bin/spark-submit (Java 17 or newer), in local mode,
one process logging to a file in its folder.

    with SparkConnectServer(tmp_path / "connect") as server:
        server.url     # sc://127.0.0.1:PORT, for --remote

It listens on a free port of 127.0.0.1 that it picks itself (port 0): starting waits
until its log names that port. Its Python workers run this copy of nsqtools (a replay's
tasks publish from there). Stopping ends its process group.

SHARED is the server a whole test run shares (shared_services.py), started by the first
test that needs it; its tests get a RunningConnectServer.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsqtools.testing.binaries import PACKAGE_ROOT
from nsqtools.testing.cluster import wait_until
from nsqtools.testing.lifetime import StartsAndStops
from nsqtools.testing.shared_services import SharedService
from nsqtools.testing.spark_cluster import START_TIMEOUT, end_group, spark_home

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STARTED = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:(\d+)")
_SESSION = re.compile(r"sessionId: ([0-9a-f-]+)")


@dataclass(frozen=True)
class RunningConnectServer:
    """A server started elsewhere (by another process of the test run)."""

    url: str  # sc://127.0.0.1:PORT, for --remote
    log: str

    def sessions(self) -> set[str]:
        """The ids of the client sessions its log names so far: a client that ran a
        command here adds one."""
        return set(_SESSION.findall(Path(self.log).read_text(errors="replace")))


class SparkConnectServer(StartsAndStops):
    def __init__(
        self,
        folder: Path,
        master: str = "local[2]",
        on_spawn: Callable[[int], None] | None = None,
    ) -> None:
        """on_spawn: given the server's process group as it starts (shared_services)."""
        self.folder = folder
        self.master = master
        self.on_spawn = on_spawn
        self.log = folder / "connect-server.log"
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [
            str(spark_home() / "bin" / "spark-submit"), "--class", _SERVER_CLASS,
            "--master", self.master,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.connect.grpc.binding.port=0",
            "--conf", "spark.ui.enabled=false",
            "spark-internal",  # spark-submit's name for a class of its own jars
        ]  # fmt: skip
        environment = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": str(PACKAGE_ROOT),
        }
        with self.log.open("wb") as output:  # its own: the port it names is this run's
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,  # its Python workers join its group: stopped with it
            )
        if self.on_spawn is not None:
            self.on_spawn(self._process.pid)
        wait_until(self._listening, START_TIMEOUT, "the Spark Connect server")

    def _listening(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(
                f"the Spark Connect server exited ({self._process.returncode}): see {self.log}"
            )
        started = _STARTED.search(self.log.read_text(errors="replace"))
        if started is None:
            return False
        self.url = f"sc://127.0.0.1:{started[1]}"
        return True

    @property
    def running(self) -> RunningConnectServer:
        return RunningConnectServer(self.url, str(self.log))

    def stop(self) -> None:
        if self._process is not None:
            end_group(self._process)
            self._process = None


def _start_shared(folder: Path, record_group: Callable[[int], None]) -> dict[str, Any]:
    """Starts the run's shared server; its process outlives this object, ended by the
    run's end (shared_services) through the group recorded."""
    server = SparkConnectServer(folder, on_spawn=record_group)
    server.start()
    _outliving.append(server)  # its Popen kept: no warning that it still runs
    return dataclasses.asdict(server.running)


SHARED = SharedService("spark_connect", _start_shared)
_outliving: list[SparkConnectServer] = []
