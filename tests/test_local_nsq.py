"""The NSQ every test stands on is real: processes, ports, data, TLS, auth, Go tools."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from nsqtools.testing import Nsqd, NsqNotInstalled, NsqProcessError, TlsFiles, binaries, wait_until
from nsqtools.testing.authd import AuthService
from tests.conftest import AUTH_SECRETS, Cluster, LocalNsq


def test_published_messages_show_as_topic_depth(nsqd: Nsqd) -> None:
    for body in (b"one", b"two", b"three"):
        nsqd.publish("first", body)
    assert nsqd.topic_depth("first") == 3


def test_nsqd_reports_version_1_3_0(nsqd: Nsqd) -> None:
    info = httpx.get(f"http://{nsqd.http_address}/info").json()
    assert info["version"] == "1.3.0"
    assert f"127.0.0.1:{info['tcp_port']}" == nsqd.tcp_address


def test_lookupd_lists_the_topic_producer(cluster: Cluster) -> None:
    cluster.nsqd.publish("found", b"x")
    lookup_url = f"http://{cluster.lookupd.http_address}/lookup"

    def producers() -> list[dict[str, Any]]:
        response = httpx.get(lookup_url, params={"topic": "found"})
        return response.json().get("producers", []) if response.status_code == 200 else []

    wait_until(lambda: bool(producers()), 10, "lookupd to list the topic")
    (producer,) = producers()
    assert f"{producer['broadcast_address']}:{producer['tcp_port']}" == cluster.nsqd.tcp_address


def test_two_nsqds_register_with_one_lookupd(cluster2: Cluster) -> None:
    ports = {int(nsqd.tcp_address.rsplit(":", 1)[1]) for nsqd in cluster2.nsqds}
    assert len(ports) == 2
    assert cluster2.lookupd.registered_tcp_ports() == ports


def test_restart_keeps_ports_and_messages(nsqd: Nsqd) -> None:
    nsqd.publish("kept", b"survives")
    addresses = dict(nsqd.addresses)
    old_pid = nsqd.pid
    nsqd.restart()
    assert nsqd.pid != old_pid
    assert nsqd.addresses == addresses
    assert nsqd.topic_depth("kept") == 1


def test_stop_is_safe_twice(nsqd: Nsqd) -> None:
    nsqd.stop()
    nsqd.stop()
    assert not nsqd.is_running()


def test_tls_nsqd_serves_https_with_the_test_ca(tls_nsqd: Nsqd, tls_files: TlsFiles) -> None:
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    response = httpx.get(f"https://{tls_nsqd.https_address}/ping", verify=context)
    assert response.text == "OK"


def test_tls_nsqd_is_not_trusted_without_the_ca(tls_nsqd: Nsqd) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"https://{tls_nsqd.https_address}/ping")


def test_auth_service_accepts_known_secrets_only(auth_service: AuthService) -> None:
    url = f"http://{auth_service.address}/auth"
    (secret, identity) = next(iter(AUTH_SECRETS.items()))
    accepted = httpx.get(url, params={"secret": secret, "remote_ip": "127.0.0.1"})
    assert accepted.status_code == 200
    assert accepted.json()["identity"] == identity
    assert httpx.get(url, params={"secret": "wrong"}).status_code == 403
    assert [query["secret"] for query in auth_service.queries] == [secret, "wrong"]


def test_auth_nsqd_starts_against_the_auth_service(auth_nsqd: Nsqd) -> None:
    assert "--auth-http-address" in " ".join(auth_nsqd.arguments())
    assert auth_nsqd.is_running()


def test_bad_flags_fail_with_the_log(local_nsq: LocalNsq) -> None:
    with pytest.raises(NsqProcessError, match="exited at start"):
        local_nsq.nsqd("broken", extra_args=["--no-such-flag"])


def test_missing_binary_is_an_error_not_a_skip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NSQ_BIN_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(binaries, "DEFAULT_BIN_DIR", tmp_path / "absent")
    with pytest.raises(NsqNotInstalled, match="run scripts/install-nsq"):
        binaries.find_binary("nsqd")


@pytest.mark.parametrize("tool", [tool for tool in binaries.GO_TOOLS if tool != "to_nsq"])
def test_go_reference_tools_are_v1_3_0(go_tool: Callable[..., Any], tool: str) -> None:
    result = go_tool(tool, ["--version"])
    assert result.returncode == 0
    assert result.stdout.decode().startswith(f"{tool} v1.3.0")


def test_go_to_nsq_runs(go_tool: Callable[..., Any]) -> None:
    """Go's to_nsq v1.3.0 has no -version flag; its usage proves the binary runs."""
    result = go_tool("to_nsq", ["-h"])
    assert b"-nsqd-tcp-address" in result.stderr


def _process_is_gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status  # a zombie has exited; only its parent's reaping is left


def test_nsqd_dies_with_a_killed_owner(tmp_path: Path) -> None:
    """A test process killed with SIGKILL (no teardown at all) leaks no nsqd."""
    owner_code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from nsqtools.testing import Nsqd\n"
        "nsqd = Nsqd(Path(sys.argv[1]))\n"
        "nsqd.start()\n"
        "print(nsqd.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code, str(tmp_path / "owned")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    nsqd_pid = int(owner.stdout.readline())
    assert not _process_is_gone(nsqd_pid)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    wait_until(lambda: _process_is_gone(nsqd_pid), 10, f"nsqd {nsqd_pid} to die with its owner")
