"""nsq_tail run as a user runs it: installed command, real nsqd, stdout/stderr/exit status.

Side by side with the Go nsq_tail where the behaviour is the reference's.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nsqtools.testing import (
    Nsqd,
    TlsFiles,
    find_binary,
    imported_modules,
    imported_packages,
    our_tool,
    wait_until,
)
from nsqtools.testing.junklookupd import JUNK_LOOKUPS, JunkLookupd
from tests.conftest import AUTH_SECRETS, Cluster, LocalNsq

# Run from this copy of nsqtools (the console script may come from another worktree).
TOOL = our_tool("nsq_tail")
SHELL_TOOL = shlex.join(TOOL)
TOPIC = "cli"


def nsq_tail(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TOOL, *args], capture_output=True, timeout=30, check=False, env=env)


def go_nsq_tail(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(find_binary("nsq_tail")), *args], capture_output=True, timeout=30, check=False
    )


def channel_counts(nsqd: Nsqd, topic: str, channel: str) -> tuple[int, int]:
    stats = nsqd.channel_stats(topic, channel)
    return stats.depth, stats.in_flight_count


def settled_depth(nsqd: Nsqd, topic: str, channel: str) -> int:
    """The channel's depth once nothing is in flight: nsqd reads a tool's last FINs and
    REQs as they come, maybe after the tool exited. 10 s is far below nsqd's msg_timeout
    (60 s), so nothing in flight by then means each was answered, not timed out."""
    wait_until(lambda: channel_counts(nsqd, topic, channel)[1] == 0, 10, "FINs and REQs read")
    return channel_counts(nsqd, topic, channel)[0]


def test_raw_output_is_byte_identical_to_go(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "go", "ours")
    bodies = [b"plain", b'{"json": true}', "ünïcode".encode(), b"\xff\xfe binary", b"tab\there"]
    for body in bodies:
        nsqd.publish(TOPIC, body)
    common = [f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={TOPIC}", "-n", str(len(bodies))]
    go = go_nsq_tail(*common, "-channel=go", "-print-topic")
    ours = nsq_tail(*common, "-channel=ours", "-print-topic")
    assert go.returncode == ours.returncode == 0
    assert ours.stdout == go.stdout
    assert ours.stdout.startswith(b"cli | plain\n")


def test_go_command_line_spellings_all_parse(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, [b"1", b"2", b"3"])
    result = nsq_tail(
        "--nsqd-tcp-address", nsqd.tcp_address,
        "-topic", TOPIC,
        "--channel=spell",
        "-n=3",
        "-max-in-flight", "10",
        "-print-topic=false",
        "--consumer-opt=max_attempts,10",
        "-consumer-opt", "heartbeat_interval,5s",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"1\n2\n3\n"


def test_n_is_exact_across_topics_and_the_rest_goes_back_at_once(nsqd: Nsqd) -> None:
    for topic in ("left", "right"):
        nsqd.publish_many(topic, [f"{topic}-{index}".encode() for index in range(20)])
    result = nsq_tail(
        f"--nsqd-tcp-address={nsqd.tcp_address}", "--topic=left", "--topic=right",
        "--channel=exact", "-n", "25",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 25
    assert settled_depth(nsqd, "left", "exact") + settled_depth(nsqd, "right", "exact") == 15


def test_an_nsqd_given_twice_prints_each_message_once(nsqd: Nsqd) -> None:
    published = [b"%d" % index for index in range(300)]
    nsqd.publish_many(TOPIC, published)
    twice = [f"--nsqd-tcp-address={nsqd.tcp_address}"] * 2
    result = nsq_tail(*twice, f"--topic={TOPIC}", "--channel=twice", "-n", "300")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == sorted(published)
    assert b"E_FIN_FAILED" not in result.stderr
    assert channel_counts(nsqd, TOPIC, "twice") == (0, 0)


def test_a_closed_pipe_ends_quietly_and_requeues(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, [b"line %d" % index for index in range(5000)])
    tail = f"{SHELL_TOOL} --nsqd-tcp-address={nsqd.tcp_address} --topic={TOPIC} --channel=pipe"
    shell = f"{tail} | head -2"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell], capture_output=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    assert b"Traceback" not in result.stderr and b"Error" not in result.stderr
    assert settled_depth(nsqd, TOPIC, "pipe") > 0  # what was not written went back


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_cleanly_losing_nothing(nsqd: Nsqd, signum: signal.Signals) -> None:
    nsqd.publish_many(TOPIC, [b"%d" % index for index in range(50)])
    process = subprocess.Popen(
        [*TOOL, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "--channel=sig",
         "--max-in-flight=5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    printed = [process.stdout.readline() for _ in range(50)]
    assert all(printed)
    wait_until(lambda: channel_counts(nsqd, TOPIC, "sig")[1] == 0, 10, "all 50 answered")
    nsqd.publish_many(TOPIC, [b"later"])
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert settled_depth(nsqd, TOPIC, "sig") + len(stdout.splitlines()) == 1  # "later" once


def test_sigint_with_stdout_blocked_exits_and_requeues_at_once(nsqd: Nsqd) -> None:
    """stdout is a pipe the test never reads: the write under way never ends."""
    total = 2000
    nsqd.create_channels(TOPIC, "blocked")
    nsqd.publish_many(TOPIC, [b"%04d " % index + b"." * 1000 for index in range(total)])
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [*TOOL, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "--channel=blocked"],
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    try:
        # 200 unanswered: the pipe is full and a write blocks, the rest waits behind it.
        wait_until(lambda: channel_counts(nsqd, TOPIC, "blocked")[1] == 200, 10, "a full pipe")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=5)  # the grace, CLS and the requeue
        assert process.returncode == 0, stderr
        depth = settled_depth(nsqd, TOPIC, "blocked")
        assert nsqd.channel_stats(TOPIC, "blocked").timeout_count == 0
        written = read_all(read_end).split(b"\n")[:-1]  # the last may be cut short
        assert depth + len(written) >= total  # what was not written went back
    finally:
        process.kill()  # if it did not stop: a failed test leaves nothing running
        process.wait()
        os.close(read_end)


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_json_format_envelope(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, [b'{"a": 1}', b"\xffnot utf-8"])
    result = nsq_tail(
        f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "--channel=j",
        "-n", "2", "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert (first["body"], first["encoding"]) == ('{"a": 1}', "utf-8")
    assert (second["body"], second["encoding"]) == ("/25vdCB1dGYtOA==", "base64")
    assert first["topic"] == TOPIC and first["channel"] == "j"
    assert first["nsqd"] == nsqd.tcp_address
    assert first["attempts"] == 1 and len(first["id"]) == 16
    assert first["timestamp"].endswith("Z") and first["timestamp_ns"] > 0


def test_template_format(nsqd: Nsqd) -> None:
    nsqd.publish(TOPIC, b"hello")
    result = nsq_tail(
        f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "--channel=t", "-n", "1",
        "--format", "{topic}/{channel} {attempts} {body}",
    )  # fmt: skip
    assert result.stdout == b"cli/t 1 hello\n"


def test_through_lookupd(cluster: Cluster) -> None:
    cluster.nsqd.publish_many(TOPIC, [b"found"])
    result = nsq_tail(
        f"--lookupd-http-address={cluster.lookupd.http_address}", f"--topic={TOPIC}", "-n", "1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"found\n"


@pytest.mark.parametrize("junk", ["port out of range", "nested 100,000 deep", "HTML"])
def test_a_junk_lookupd_is_a_warning_next_to_a_healthy_one(cluster: Cluster, junk: str) -> None:
    """The junk lookupd listed first, a real one second: Go logs the junk and goes on."""
    cluster.nsqd.publish_many(TOPIC, [b"1", b"2", b"3"])
    with JunkLookupd() as lookupd:
        lookupd.answer_with("/lookup", JUNK_LOOKUPS[junk])
        result = nsq_tail(
            f"--lookupd-http-address={lookupd.address}",
            f"--lookupd-http-address={cluster.lookupd.http_address}",
            f"--topic={TOPIC}", "-n", "3",
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"1\n2\n3\n"
    about_junk = [line for line in result.stderr.decode().splitlines() if lookupd.address in line]
    assert about_junk and all(" WARNING: nsqlookupd " in line for line in about_junk), about_junk
    assert b"Traceback" not in result.stderr


def test_tls_snappy_deflate_from_the_command_line(tls_nsqd: Nsqd, tls_files: TlsFiles) -> None:
    tls_nsqd.create_channels(TOPIC, "c0", "c1", "c2")
    tls_nsqd.publish(TOPIC, b"a")
    base = [f"--nsqd-tcp-address={tls_nsqd.tcp_address}", f"--topic={TOPIC}", "-n", "1"]
    for index, extra in enumerate((["--snappy"], ["--deflate", "--deflate-level=9"], [])):
        result = nsq_tail(
            *base, f"--channel=c{index}", f"--tls-root-ca-file={tls_files.ca}", *extra
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"a\n"


def test_auth_from_the_environment_and_from_a_file(auth_nsqd: Nsqd, tmp_path: Path) -> None:
    (secret, _) = next(iter(AUTH_SECRETS.items()))
    auth_nsqd.create_channels(TOPIC, "env", "file")
    auth_nsqd.publish(TOPIC, b"secret stuff")
    base = [f"--nsqd-tcp-address={auth_nsqd.tcp_address}", f"--topic={TOPIC}", "-n", "1"]
    env = {**os.environ, "NSQ_AUTH_SECRET": secret}
    assert nsq_tail(*base, "--channel=env", env=env).stdout == b"secret stuff\n"
    secret_file = tmp_path / "secret"
    secret_file.write_text(secret + "\n")
    assert (
        nsq_tail(*base, "--channel=file", f"--auth-secret-file={secret_file}").stdout
        == b"secret stuff\n"
    )


def test_auth_denied_is_one_line_and_exit_1(auth_nsqd: Nsqd) -> None:
    result = nsq_tail(
        f"--nsqd-tcp-address={auth_nsqd.tcp_address}", f"--topic={TOPIC}", "--auth-secret=nope"
    )
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines()[-1].startswith("nsq_tail: error: ")
    assert b"denied AUTH" in result.stderr


def test_a_name_that_does_not_resolve_and_an_http_port_say_so(nsqd: Nsqd) -> None:
    for address, reason in [
        (
            "nosuchhost.invalid:4150",
            "cannot connect to nosuchhost.invalid:4150: name does not resolve",
        ),
        (
            nsqd.http_address,
            f"{nsqd.http_address} is an HTTP port, not nsqd's TCP port (it answered in HTTP)",
        ),
    ]:
        result = nsq_tail(f"--nsqd-tcp-address={address}", f"--topic={TOPIC}")
        assert result.returncode == 1
        assert result.stderr.decode().splitlines() == [f"nsq_tail: error: {reason}"]


def test_tls_verification_failure_is_one_line_and_exit_1(tls_nsqd: Nsqd) -> None:
    result = nsq_tail(f"--nsqd-tcp-address={tls_nsqd.tcp_address}", f"--topic={TOPIC}", "--tls")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"nsq_tail: error: TLS handshake with {tls_nsqd.tcp_address} failed: certificate verify "
        "failed: unable to get local issuer certificate"
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--nsqd-tcp-address=127.0.0.1:4150"], 1, "--topic required"),
        (["--topic=t"], 1, "--nsqd-tcp-address or --lookupd-http-address is required"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "--lookupd-http-address=b:2"], 1, "not both"),
        (["--topic=bad topic", "--nsqd-tcp-address=a:1"], 1, "invalid topic name 'bad topic'"),
        (
            ["--topic=t", "--channel=" + "c" * 65, "--nsqd-tcp-address=a:1"],
            1,
            "invalid channel name",
        ),
        (["--topic=t", "--nsqd-tcp-address=nope"], 1, "expected host:port"),
        (
            ["--topic=t", "--nsqd-tcp-address=a:1", "--consumer-opt=read_timeout,10"],
            2,
            "missing unit",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=a:1", "--consumer-opt=max_inflight,5"],
            2,
            "unknown option",
        ),
        (["--topic=t", "--nsqd-tcp-address=a:1", "--no-such-flag"], 2, "--no-such-flag"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "-n", "1.5"], 2, "-n"),
        (["--topic=t", "--nsqd-tcp-address=a:1", "-print-topic=maybe"], 2, "invalid boolean value"),
        (
            ["--topic=t", "--nsqd-tcp-address=a:1", "--format={nope}"],
            1,
            "unknown template field {nope}",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=a:1", "--tls-root-ca-file=/no/such/ca.pem"],
            2,
            "/no/such/ca.pem",
        ),
        (
            ["--topic=t", "--nsqd-tcp-address=127.0.0.1:1"],
            1,
            "cannot connect to 127.0.0.1:1: connection refused",
        ),
    ],
)
def test_bad_input_is_one_line_and_the_right_exit(args: list[str], code: int, message: str) -> None:
    result = nsq_tail(*args)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == code, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("nsq_tail: error: ")
    assert message in lines[0]
    assert result.stdout == b""


def test_a_negative_n_is_no_limit_as_in_go(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, [b"%d" % index for index in range(5)])
    process = subprocess.Popen(
        [*TOOL, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "-n", "-3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    printed = [process.stdout.readline() for _ in range(5)]
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert sorted(printed) == [b"%d\n" % index for index in range(5)]


def test_a_plain_run_loads_no_producer_http_client_nor_openssl(nsqd: Nsqd) -> None:
    """Start-up: what a run with --nsqd-tcp-address never uses is not imported (the
    producer is for a dead-letter topic, httpx and rich for lookupd and a terminal,
    OpenSSL for TLS: its libraries alone are 6 MiB of memory)."""
    nsqd.create_channels(TOPIC, "start")
    nsqd.publish(TOPIC, b"one")
    python, *code = TOOL
    argv = [python, "-X", "importtime", *code, f"--nsqd-tcp-address={nsqd.tcp_address}"]
    result = subprocess.run(
        [*argv, f"--topic={TOPIC}", "--channel=start", "-n", "1"], capture_output=True, timeout=30
    )
    assert result.stdout == b"one\n"
    imports = result.stderr.decode()
    assert imported_modules(imports).isdisjoint({"nsqtools.producer", "_ssl", "_hashlib"})
    assert imported_packages(imports).isdisjoint({"httpx", "httpcore", "rich"})


def test_version() -> None:
    for flag in ("-version", "--version"):
        result = nsq_tail(flag)
        assert result.returncode == 0
        assert result.stdout.decode().startswith("nsq_tail v")


def test_the_documented_reader_opt_line_works(local_nsq: LocalNsq, tls_files: TlsFiles) -> None:
    """From NSQ's docs: nsq_tail ... -reader-opt="tls_v1,true" -reader-opt="auth_secret,$SECRET"."""
    from nsqtools.testing.authd import AuthService

    (secret, identity) = next(iter(AUTH_SECRETS.items()))
    with AuthService({secret: identity}) as service:
        nsqd = local_nsq.nsqd("doc", tls=tls_files, auth_http_address=service.address)
        nsqd.publish(TOPIC, b"documented")
        command = (
            f"{SHELL_TOOL} --nsqd-tcp-address={nsqd.tcp_address} --topic={TOPIC} -n 1 "
            f'-reader-opt="tls_root_ca_file,{tls_files.ca}" '
            '-reader-opt="tls_v1,true" -reader-opt="auth_secret,$SECRET"'
        )
        result = subprocess.run(
            ["bash", "-c", command],
            env={**os.environ, "SECRET": secret},
            capture_output=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"documented\n"


def run_on_a_terminal(args: list[str], env: dict[str, str]) -> bytes:
    """Run nsq_tail with stdout on a pseudo-terminal; return what it printed there."""
    import pty

    controller, terminal = pty.openpty()
    with subprocess.Popen(
        [*TOOL, *args], stdout=terminal, stderr=subprocess.DEVNULL, env=env
    ) as process:
        os.close(terminal)
        output = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            output += chunk
        process.wait(timeout=30)
    os.close(controller)
    return output


def test_json_is_highlighted_on_a_terminal_and_markup_is_never_applied(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "color", "plain")
    nsqd.publish_many(TOPIC, [b'{"key": "value", "n": 1}', b"[bold]not markup[/bold]"])
    args = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "-n", "2"]
    env = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    colored = run_on_a_terminal([*args, "--channel=color"], env)
    assert b"\x1b[" in colored  # ANSI colors around the JSON
    assert b"[bold]not markup[/bold]" in colored
    plain = run_on_a_terminal([*args, "--channel=plain"], {**env, "NO_COLOR": "1"})
    assert b"\x1b[" not in plain
    assert plain.replace(b"\r\n", b"\n") == b'{"key": "value", "n": 1}\n[bold]not markup[/bold]\n'


def test_addresses_from_the_environment(cluster: Cluster) -> None:
    cluster.nsqd.publish_many(TOPIC, [b"from env"])
    env = {**os.environ, "NSQ_LOOKUPD_HTTP_ADDRESS": cluster.lookupd.http_address}
    assert nsq_tail(f"--topic={TOPIC}", "-n", "1", env=env).stdout == b"from env\n"
    env = {**os.environ, "NSQ_NSQD_TCP_ADDRESS": cluster.nsqd.tcp_address}
    cluster.nsqd.publish_many(TOPIC, [b"again"])
    assert nsq_tail(f"--topic={TOPIC}", "-n", "1", env=env).stdout == b"again\n"


def test_debug_shows_the_traceback() -> None:
    result = nsq_tail("--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--debug")
    assert result.returncode == 1
    assert b"Traceback (most recent call last)" in result.stderr
    assert result.stderr.decode().splitlines()[-1].startswith("nsq_tail: error: cannot connect")


def test_log_prefix_and_level(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "a", "b")
    nsqd.publish(TOPIC, b"x")
    base = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", "-n", "1"]
    logged = nsq_tail(*base, "--channel=a", "--log-prefix=[mine] ", "--log-level=info").stderr
    assert logged.decode().splitlines()[0].startswith("[mine] ")
    assert " INFO: " in logged.decode()
    assert nsq_tail(*base, "--channel=b", "--log-level=warn").stderr == b""


@pytest.mark.parametrize("through", ["lookupd", "nsqds"])
def test_n_across_two_nsqds_ends_without_waiting_for_a_redistribution(
    cluster2: Cluster, through: str
) -> None:
    """-n as many as the two nsqds hold: every connection keeps RDY while messages are
    still wanted, so the last ones come at once, not after low_rdy_idle_timeout (set to a
    minute here, as low_rdy_timeout: a redistribution cannot be what ends the run)."""
    cluster2.publish_many(TOPIC, lambda nsqd: [f"{nsqd.name}-{i}".encode() for i in range(7)])
    if through == "lookupd":
        addresses = [f"--lookupd-http-address={cluster2.lookupd.http_address}"]
    else:
        addresses = [f"--nsqd-tcp-address={nsqd.tcp_address}" for nsqd in cluster2.nsqds]
    started = time.monotonic()
    result = subprocess.run(
        [
            *TOOL, *addresses, f"--topic={TOPIC}", "--channel=spread",
            "-n", "14", "--consumer-opt=low_rdy_idle_timeout,1m",
            "--consumer-opt=low_rdy_timeout,1m", "--consumer-opt=rdy_redistribute_interval,5s",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 14
    assert took < 20, f"{took:.1f}s: the last message waited for a redistribution"
