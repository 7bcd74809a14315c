"""A Spark Connect server on loopback, for tests of `nsq archive --remote`: pyspark's
own spark-connect jar run by its bin/spark-submit (Java 17 or newer), in local mode,
one process logging to a file in its folder.

    with SparkConnectServer(tmp_path / "connect") as server:
        server.url     # sc://127.0.0.1:PORT, for --remote

It listens on a free port of 127.0.0.1 that it picks itself (port 0): starting waits
until its log names that port. Its Python workers run this copy of nsqtools (a replay's
tasks publish from there). Stopping ends its process group.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from nsqtools.testing.binaries import PACKAGE_ROOT
from nsqtools.testing.cluster import wait_until
from nsqtools.testing.lifetime import StartsAndStops
from nsqtools.testing.spark_cluster import START_TIMEOUT, spark_home
from nsqtools.testing.spark_cluster import _end_group as end_group

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STARTED = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:(\d+)")
_SESSION = re.compile(r"sessionId: ([0-9a-f-]+)")


class SparkConnectServer(StartsAndStops):
    def __init__(self, folder: Path, master: str = "local[2]") -> None:
        self.folder = folder
        self.master = master
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

    def sessions(self) -> set[str]:
        """The ids of the client sessions its log names so far: a client that ran a
        command here adds one."""
        return set(_SESSION.findall(self.log.read_text(errors="replace")))

    def stop(self) -> None:
        if self._process is not None:
            end_group(self._process)
            self._process = None
