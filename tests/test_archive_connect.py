"""nsq archive compact, stats, sql (with `data`) and replay on a real Spark Connect
server (nsqtools.testing.spark_connect, on loopback), run as a user runs them, each its
own process: the same results as local mode's (the test run's session) on the same
files. The four ways of naming the server read alike; a server that does not answer is
one line, at once.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nsqtools import formats
from nsqtools.spark.session import ConfError, SparkSettings, resolve
from nsqtools.testing import Nsqd, our_tool, wait_until
from nsqtools.testing.spark_connect import RunningConnectServer
from tests.conftest import ArchiveRun
from tests.test_archive_replay import archive, message, read_back

Archive = Callable[..., ArchiveRun]
# Hour 0 of orders (JSON bodies, one written twice, a line that is no envelope), hour 1
# of payments (not JSON), and a raw archive: files Spark reads as they are.
ORDERS = [
    message(i, b'{"user": %d, "event": "%s"}' % (i, b"buy" if i % 2 else b"view")) for i in range(6)
]
PAYMENTS = [message(100 + i, b"payment %d" % i, seconds=3600 + i) for i in range(3)]
RAW = b"click 1\nclick 2\n"
TIMEOUT = 180


@pytest.fixture
def server(spark_connect: RunningConnectServer) -> RunningConnectServer:
    return spark_connect


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("archives") / "src"
    archive(directory, "orders", [*ORDERS, ORDERS[1]], junk=b"not an envelope\n")
    payments = archive(directory, "payments", PAYMENTS)
    payments.rename(payments.with_name("payments.host-000000.2026-11-23_01.log.gz"))
    (directory / "clicks.host.2026-11-23_02.log").write_bytes(RAW)
    return directory


def on_connect(
    *args: str, remote: str | None = None, environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`nsq archive ARGS...` as its own process, on the server --remote names (or
    however args and environment name it)."""
    argv = [*our_tool("nsq"), "archive", *args, *(["--remote", remote] if remote else [])]
    env = {**os.environ, **(environment or {})}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT)


def output(result: subprocess.CompletedProcess[str] | ArchiveRun) -> str:
    code = (
        result.returncode if isinstance(result, subprocess.CompletedProcess) else result.exit_code
    )
    assert code == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_compact_as_in_local_mode(
    server: RunningConnectServer, source: Path, nsq_archive: Archive, tmp_path: Path
) -> None:
    """Spark's work on the server (a damaged file's whole lines read in its Python
    tasks); the publishing through a JVM of the command's own (a Connect client has
    none): twice into the same output, the second run replacing what the first wrote."""
    archives = tmp_path / "src"
    shutil.copytree(source, archives)
    cut = gzip.compress(formats.json_lines(ORDERS * 50, formats.Origin("orders", "a", "n")))
    (archives / "orders.host-000001.2026-11-23_00.log.gz").write_bytes(cut[: len(cut) // 2])
    remote_out, local_out = tmp_path / "remote", tmp_path / "local"
    for _ in range(2):
        run = on_connect(
            "compact", str(archives), "--out", str(remote_out), "--json", remote=server.url
        )
        remote = json.loads(output(run))
    local = json.loads(
        output(nsq_archive("compact", str(archives), "--out", str(local_out), "--json"))
    )
    assert len(remote["damaged"]) == 1
    assert {**remote, "seconds": None} == {**local, "seconds": None}
    assert sorted(path.relative_to(remote_out) for path in remote_out.rglob("*.parquet")) != []
    assert [name for name in os.listdir(remote_out) if name.startswith(".staging")] == []


@pytest.mark.slow
def test_stats_as_in_local_mode(
    server: RunningConnectServer, source: Path, nsq_archive: Archive
) -> None:
    remote = json.loads(output(on_connect("stats", str(source), "--json", remote=server.url)))
    local = json.loads(output(nsq_archive("stats", str(source), "--json")))
    assert remote == local
    assert {hour["topic"] for hour in remote["hours"]} == {"orders", "payments", "clicks"}


@pytest.mark.slow
def test_sql_with_json_bodies_as_in_local_mode(
    server: RunningConnectServer, source: Path, nsq_archive: Archive
) -> None:
    query = (
        "SELECT topic, id, data.user, data.event, body_text FROM messages "
        "ORDER BY topic, id, body_text"
    )
    args = ("sql", query, str(source), "--output", "json")
    remote = output(on_connect(*args, remote=server.url))
    assert remote == output(nsq_archive(*args))
    rows = [json.loads(line) for line in remote.splitlines()]
    assert {row["user"]: row["event"] for row in rows if row["topic"] == "orders"} == {
        0: "view",
        1: "buy",
        2: "view",
        3: "buy",
        4: "view",
        5: "buy",
    }


@pytest.mark.slow
def test_replay_as_in_local_mode(
    server: RunningConnectServer, source: Path, nsqd: Nsqd, nsq_archive: Archive
) -> None:
    """Without a rate, and with one (the messages spread over the tasks first)."""
    bodies = sorted([*(m.body for m in [*ORDERS, ORDERS[1], *PAYMENTS]), *RAW.splitlines()])
    for topic, rate in (("plain", "0"), ("paced", "1000")):
        args = [
            "replay",
            str(source),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--json",
            "--rate",
            rate,
        ]
        remote = json.loads(output(on_connect(*args, "--topic", topic, remote=server.url)))
        local = json.loads(output(nsq_archive(*args, "--topic", f"{topic}-local")))
        assert remote.pop("seconds") and local.pop("seconds")
        assert {**remote, "topic": None} == {**local, "topic": None}
        assert (remote["published"], remote["failed"], remote["malformed"]) == (len(bodies), 0, 1)
        assert sorted(m.body for m in read_back(nsqd, topic, len(bodies))) == bodies


@pytest.mark.slow
def test_a_bad_condition_is_one_line_as_in_local_mode(
    server: RunningConnectServer, source: Path, nsqd: Nsqd
) -> None:
    args = ["replay", str(source), "--topic=t", f"--nsqd-tcp-address={nsqd.tcp_address}"]
    result = on_connect(*args, "--where", "no_such_column = 1", remote=server.url)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("nsq: error: --where 'no_such_column = 1': "), line


@pytest.mark.slow
@pytest.mark.parametrize("way", ["--master", "--conf", "SPARK_REMOTE"])
def test_every_way_of_naming_the_server_reads_alike(
    server: RunningConnectServer, source: Path, way: str
) -> None:
    named: dict[str, tuple[list[str], dict[str, str]]] = {
        "--master": (["--master", server.url], {}),
        "--conf": ([f"--conf=spark.remote={server.url}"], {}),
        "SPARK_REMOTE": ([], {"SPARK_REMOTE": server.url}),
    }
    args, environment = named[way]
    before = server.sessions()
    query = "SELECT count(*) AS n FROM messages"
    result = on_connect("sql", query, str(source), *args, environment=environment)
    assert output(result) == "n\n12\n"
    assert server.sessions() - before  # it ran there


def test_a_server_that_does_not_answer_is_one_line_at_once(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a port nothing listens on once closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    source = archive(tmp_path / "src", "orders", ORDERS)
    started = time.monotonic()
    result = on_connect("stats", str(source), remote=f"sc://127.0.0.1:{port}/;token=s3cret")
    assert time.monotonic() - started < 30
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    address = f"sc://127.0.0.1:{port}"
    said = f"nsq: error: Spark: no Spark Connect server answers at {address}: "
    assert line.startswith(said + "UNAVAILABLE: "), line
    assert "s3cret" not in line


@pytest.mark.slow
def test_a_jvm_for_the_files_that_does_not_start_is_one_line(
    server: RunningConnectServer, source: Path, tmp_path: Path
) -> None:
    """compact on Connect starts a JVM of its own to publish: when that JVM cannot
    start, the command says why in one line (its first words), and where its log is."""
    no_java = tmp_path / "no-java"
    result = on_connect(
        "compact",
        str(source),
        "--out",
        str(tmp_path / "out"),
        remote=server.url,
        environment={"JAVA_HOME": str(no_java)},
    )
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    said = "nsq: error: Spark: the JVM for the files ended as it started: "
    assert line.startswith(said), line
    assert f"{no_java}/bin/java: No such file or directory (its log: " in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("settings", "environment", "remote", "master"),
    [
        (SparkSettings(remote="sc://a:1"), {"SPARK_REMOTE": "sc://b:1"}, "sc://a:1", None),
        (SparkSettings(master="sc://a:1"), {}, "sc://a:1", None),
        (SparkSettings(master="local[2]"), {"SPARK_REMOTE": "sc://b:1"}, None, "local[2]"),
        (
            SparkSettings(conf={"spark.remote": "sc://c:1"}),
            {"SPARK_REMOTE": "sc://b:1"},
            "sc://c:1",
            None,
        ),
        (
            SparkSettings(conf={"spark.master": "local[1]"}),
            {"SPARK_REMOTE": "sc://b:1"},
            None,
            "local[1]",
        ),
        (SparkSettings(), {"SPARK_REMOTE": "sc://b:1"}, "sc://b:1", None),
        (SparkSettings(), {}, None, None),
    ],
)
def test_where_to_run_is_read_as_spark_submit_reads_it(
    settings: SparkSettings, environment: dict[str, str], remote: str | None, master: str | None
) -> None:
    """The command line, then --conf, then the environment."""
    resolved = resolve(settings, environment)
    assert (resolved.remote, resolved.master) == (remote, master)
    assert not {"spark.remote", "spark.master"} & resolved.conf.keys()
    assert resolve(resolved, environment) == resolved


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        (
            SparkSettings(remote="sc://a:1", master="local"),
            "--remote and --master: give one of them",
        ),
        (
            SparkSettings(remote="http://a:1/;token=x"),
            "--remote: a Spark Connect URL begins with sc://",
        ),
        (
            SparkSettings(conf={"spark.remote": "sc://a:1", "spark.master": "local"}),
            "--conf spark.remote and --conf spark.master: give one of them",
        ),
    ],
)
def test_two_places_to_run_or_a_bad_url_is_an_error(settings: SparkSettings, error: str) -> None:
    with pytest.raises(ConfError) as raised:
        resolve(settings, {})
    assert str(raised.value) == error


@pytest.mark.slow
def test_a_stop_signal_interrupts_the_job_on_the_server(
    server: RunningConnectServer, tmp_path: Path, nsqd: Nsqd
) -> None:
    """SIGTERM while replay publishes from the server's tasks: its operations are
    interrupted, exit 1 with one line, part published."""
    source = archive(tmp_path / "in", "orders", [message(i, b"m%d" % i) for i in range(300)])
    argv = [*our_tool("nsq"), "archive", "replay", str(source), "--topic=stopped"]
    argv += [f"--nsqd-tcp-address={nsqd.tcp_address}", "--rate=20", f"--remote={server.url}"]
    with subprocess.Popen(argv, stderr=subprocess.PIPE) as tool:

        def publishing() -> bool:
            topics = nsqd.stats(topic="stopped").topics
            return bool(topics) and topics[0].message_count > 0

        wait_until(publishing, TIMEOUT, "replay to publish")
        tool.send_signal(signal.SIGTERM)
        _, stderr = tool.communicate(timeout=60)
    assert tool.returncode == 1, stderr
    [line] = stderr.decode().splitlines()
    assert line.endswith("stopped by a signal before the job's end"), line

    assert nsqd.stats(topic="stopped").topics[0].message_count < 300
