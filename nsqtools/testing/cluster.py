"""Real nsqd and nsqlookupd processes on free loopback ports.

Each process listens on port 0 and its real addresses are read from its own log
("TCP: listening on 127.0.0.1:40939"), so two tests never race for a port. After the
first start the ports are fixed, so a restart comes back on the same addresses.

No process outlives its owner: stop() is safe twice, an atexit hook kills whatever is
left, and on Linux each child gets PR_SET_PDEATHSIG so even a SIGKILL'd test run takes
its nsqds with it. Start processes from a long-lived thread: the death signal fires
when the thread that forked the child exits.

Their HTTP APIs (stats, publishing, admin, lookups) are asked through nsqtools.httpapi's
synchronous send_sync, so the harness reads answers exactly as the tools do.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx
import trio

from nsqtools.httpapi import Call, send_sync
from nsqtools.httpapi import lookupd as lookupd_api
from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi.clients import sync_client
from nsqtools.httpapi.nsqd import ChannelStats, NsqdStats
from nsqtools.testing.binaries import find_binary
from nsqtools.testing.lifetime import StartsAndStops

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
# wait_until polls every POLL_INTERVAL at first, then less often, up to
# POLL_INTERVAL_LONGEST apart: most conditions hold within milliseconds, and one that
# takes seconds (a tool draining a topic) would otherwise ask nsqd 200 times a second.
POLL_INTERVAL = 0.005
POLL_INTERVAL_LONGEST = 0.025
FAULT_CHECK_INTERVAL = 0.1  # holds_throughout: its condition may ask nsqd over HTTP
HTTP_TIMEOUT = 5.0
# not_in_nsqd gives up once no message has come for this long.
STALL_LIMIT = 30.0
MPUB_TIMEOUT = 30.0

T = TypeVar("T")

_LISTENING = re.compile(r"(TCP|HTTP|HTTPS): listening on (\S+)")
_PR_SET_PDEATHSIG = 1
_live: set[NsqProcess] = set()


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child die with its parent (Linux only): with the
    thread that started it, precisely."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # resolved before fork, not in the child

    def set_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return set_death_signal


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll a condition until it holds; raise TimeoutError naming `what` otherwise.

    The way tests synchronise with processes they do not control: a condition and a
    deadline, never a bare sleep.
    """
    deadline = time.monotonic() + timeout
    interval = POLL_INTERVAL
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.25, POLL_INTERVAL_LONGEST)


def holds_throughout(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Check that a condition holds all through a fault that lasts `seconds` (a sleep
    here is the fault's length, never a way to wait for something); fail naming `what`
    the first time it does not."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert condition(), f"{what} stopped holding during the fault"
        time.sleep(FAULT_CHECK_INTERVAL)


def ask(call: Call[T], timeout: float = HTTP_TIMEOUT) -> T:
    """One call to an nsqd's or nsqlookupd's HTTP API, from synchronous test code."""
    with sync_client(timeout=timeout) as client:
        return send_sync(client, call)


class NsqProcessError(RuntimeError):
    """An NSQ process failed to start; the message carries the tail of its log."""


class NsqProcess(StartsAndStops):
    """One NSQ daemon: its command line, log file, listening addresses and lifetime."""

    binary_name = ""
    listeners: tuple[str, ...] = ("TCP", "HTTP")

    def __init__(self, workdir: Path, name: str) -> None:
        self.name = name
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        self.addresses: dict[str, str] = {}
        self._process: subprocess.Popen[bytes] | None = None

    # Subclasses say which flags they need, given the addresses to listen on.
    def arguments(self) -> list[str]:
        raise NotImplementedError

    def listen_address(self, protocol: str) -> str:
        """Port 0 on the first start, the same port afterwards."""
        return self.addresses.get(protocol, "127.0.0.1:0")

    @property
    def tcp_address(self) -> str:
        return self.addresses["TCP"]

    @property
    def http_address(self) -> str:
        return self.addresses["HTTP"]

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._process.pid

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the process and wait until it listens and answers /ping.

        It dies with the thread that starts it (so no test leaves one behind): restart a
        process from a thread that outlives it, such as the test's own.
        """
        if self.is_running():
            raise RuntimeError(f"{self.name} is already running")
        argv = [str(find_binary(self.binary_name)), *self.arguments()]
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=die_with_parent(),
            )
        _live.add(self)
        try:
            self._wait_for_listeners(log_start, timeout)
            wait_until(self._answers_ping, timeout, f"{self.name} /ping")
        except Exception:
            self.stop()
            raise

    def _wait_for_listeners(self, log_start: int, timeout: float) -> None:
        def all_listening() -> bool:
            if not self.is_running():
                raise NsqProcessError(f"{self.name} exited at start:\n{self.log_tail()}")
            found = dict(_LISTENING.findall(self._log_since(log_start)))
            if all(protocol in found for protocol in self.listeners):
                self.addresses.update(found)
                return True
            return False

        wait_until(all_listening, timeout, f"{self.name} to listen")

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self._log_since(0).splitlines()[-lines:])

    def _answers_ping(self) -> bool:
        try:
            with sync_client(timeout=1.0) as client:
                return client.get(f"http://{self.http_address}/ping").text == "OK"
        except httpx.HTTPError:
            return False

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop gracefully (SIGTERM), then forcibly. Safe to call twice."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Stop at once, as a crash would (SIGKILL): nsqd persists nothing."""
        self._end(signal.SIGKILL, STOP_TIMEOUT)

    def freeze(self) -> None:
        """Stop the process without ending it (SIGSTOP): its sockets stay open, silent.

        Returns once every thread is stopped: SIGSTOP takes effect when the kernel next
        schedules each thread, and a request sent before that may still be answered."""
        os.kill(self.pid, signal.SIGSTOP)
        wait_until(self._all_threads_stopped, STOP_TIMEOUT, f"{self.name} frozen")

    def _all_threads_stopped(self) -> bool:
        states = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except FileNotFoundError:
                continue  # a thread that ended meanwhile
            states.append(stat.rpartition(")")[2].split()[0])
        return all(state in ("T", "t") for state in states)

    def thaw(self) -> None:
        """Let a frozen process run again (SIGCONT); harmless when it is not frozen."""
        if self.is_running():
            os.kill(self.pid, signal.SIGCONT)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Frozen for the body of the block, and thawed however it ends."""
        self.freeze()
        try:
            yield
        finally:
            self.thaw()

    def _end(self, sig: signal.Signals, timeout: float) -> None:
        process, self._process = self._process, None
        _live.discard(self)
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        process.send_signal(signal.SIGCONT)  # a frozen process handles nothing else
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Stop and start again on the same ports with the same data."""
        self.stop()
        self.start(timeout)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<{type(self).__name__} {self.name} {state} {self.addresses}>"


class Nsqlookupd(NsqProcess):
    binary_name = "nsqlookupd"

    def arguments(self) -> list[str]:
        return [
            f"--tcp-address={self.listen_address('TCP')}",
            f"--http-address={self.listen_address('HTTP')}",
            "--broadcast-address=127.0.0.1",
        ]

    def registered_tcp_ports(self) -> set[int]:
        """TCP ports of the nsqds this lookupd currently knows about."""
        return {node.tcp_port for node in ask(lookupd_api.nodes(self.http_address))}

    def topic_tcp_ports(self, topic: str) -> set[int]:
        """TCP ports of the nsqds this lookupd lists for the topic (none yet: empty)."""
        return {node.tcp_port for node in ask(lookupd_api.lookup(self.http_address, topic))}

    def wait_for_topic(self, topic: str, nsqds: Iterable[Nsqd]) -> None:
        """Wait until every nsqd given has registered the topic: nsqd registers a new
        topic with its lookupds in the background, after answering the publish."""
        ports = {int(nsqd.tcp_address.rsplit(":", 1)[1]) for nsqd in nsqds}
        wait_until(
            lambda: ports <= self.topic_tcp_ports(topic),
            START_TIMEOUT,
            f"{len(ports)} nsqds to register topic {topic} with {self.name}",
        )

    def wait_for_nsqd(self, nsqd: Nsqd, timeout: float = START_TIMEOUT) -> None:
        port = int(nsqd.tcp_address.rsplit(":", 1)[1])
        wait_until(
            lambda: port in self.registered_tcp_ports(),
            timeout,
            f"{nsqd.name} to register with {self.name}",
        )


class TlsFiles:
    """A test CA and a server certificate for 127.0.0.1/localhost, as PEM files."""

    def __init__(self, directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> None:
        import trustme  # a test dependency: only needed when certificates are made

        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._authority = trustme.CA()
        self.ca = directory / "ca.pem"
        self.cert = directory / "server.pem"
        self.key = directory / "server.key"
        server = self._authority.issue_cert(*hosts)
        self._authority.cert_pem.write_to_path(str(self.ca))
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))

    def make_client_cert(self, name: str) -> tuple[Path, Path]:
        """A client certificate and key signed by this CA (for client-auth tests)."""
        client = self._authority.issue_cert(f"{name}@example.com", common_name=name)
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        client.cert_chain_pems[0].write_to_path(str(cert))
        client.private_key_pem.write_to_path(str(key))
        return cert, key


class Nsqd(NsqProcess):
    binary_name = "nsqd"

    def __init__(
        self,
        workdir: Path,
        name: str = "nsqd",
        *,
        lookupds: Iterable[Nsqlookupd] = (),
        tls: TlsFiles | None = None,
        tls_client_auth_policy: str = "",
        tls_required: bool = False,
        snappy: bool = True,
        deflate: bool = True,
        auth_http_address: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(workdir, name)
        self.data_path = workdir / "data"
        self.data_path.mkdir(exist_ok=True)
        self.lookupds = list(lookupds)
        self.tls = tls
        self.tls_client_auth_policy = tls_client_auth_policy
        self.tls_required = tls_required
        self.snappy = snappy
        self.deflate = deflate
        self.auth_http_address = auth_http_address
        self.extra_args = list(extra_args)
        if tls is not None:
            self.listeners = ("TCP", "HTTP", "HTTPS")

    def arguments(self) -> list[str]:
        args = [
            f"--tcp-address={self.listen_address('TCP')}",
            f"--http-address={self.listen_address('HTTP')}",
            f"--https-address={self.listen_address('HTTPS')}",
            f"--data-path={self.data_path}",
            "--broadcast-address=127.0.0.1",
            f"--snappy={str(self.snappy).lower()}",
            f"--deflate={str(self.deflate).lower()}",
        ]
        args += [f"--lookupd-tcp-address={lookupd.tcp_address}" for lookupd in self.lookupds]
        if self.tls is not None:
            args += [
                f"--tls-cert={self.tls.cert}",
                f"--tls-key={self.tls.key}",
                f"--tls-root-ca-file={self.tls.ca}",
            ]
            if self.tls_client_auth_policy:
                args.append(f"--tls-client-auth-policy={self.tls_client_auth_policy}")
            # A client-auth policy makes nsqd require TLS everywhere, plain HTTP included;
            # tcp-https keeps plain HTTP open for /ping and /stats in tests.
            if self.tls_required or self.tls_client_auth_policy:
                args.append("--tls-required=tcp-https")
        if self.auth_http_address:
            args.append(f"--auth-http-address={self.auth_http_address}")
        return args + self.extra_args

    @property
    def https_address(self) -> str:
        return self.addresses["HTTPS"]

    def stats(self, topic: str = "", channel: str = "") -> NsqdStats:
        """nsqd's /stats, optionally filtered to a topic and channel."""
        return ask(nsqd_api.stats(self.http_address, topic, channel))

    def topic_depth(self, topic: str) -> int:
        return self.stats(topic=topic).topic(topic).depth

    def channel_stats(self, topic: str, channel: str) -> ChannelStats:
        """One channel's /stats entry (depth, in_flight_count, clients with ready_count...)."""
        return self.stats(topic=topic, channel=channel).topic(topic).channel(channel)

    def drained(self, topic: str, channel: str) -> bool:
        """The channel got messages and every one is FIN'd: none waiting, none in flight,
        and none left in the topic for it (nsqd copies a topic's messages to a new
        channel as it goes: a loaded nsqd can show an empty channel before it is done)."""
        found = self._topic_and_channel(topic, channel)
        if found is None:
            return False
        topic_depth, stats = found
        idle = topic_depth == stats.depth == stats.in_flight_count == 0
        return idle and stats.message_count > 0

    def finished_by_clients(self, topic: str, channel: str) -> int:
        """The FINs the channel's connected clients sent (each one's finish_count; a
        client gone takes its count along). The proof that a message was FIN'd while a
        tool runs: drained() can read nothing waiting and nothing in flight in the
        instant nsqd hands a message to a client, before it counts it in flight."""
        found = self._topic_and_channel(topic, channel)
        return 0 if found is None else sum(client.finish_count for client in found[1].clients)

    def emptied(self, topic: str, channel: str) -> bool:
        """The channel exists and holds nothing: none waiting, in flight or deferred, and
        none left in the topic for it.
        (After a restart its message_count starts again from 0: drained() cannot tell.)"""
        found = self._topic_and_channel(topic, channel)
        if found is None:
            return False
        topic_depth, stats = found
        return topic_depth == stats.depth == stats.in_flight_count == stats.deferred_count == 0

    def _topic_and_channel(self, topic: str, channel: str) -> tuple[int, ChannelStats] | None:
        """The topic's own depth and the channel's stats; None while either is missing."""
        try:
            found = self.stats(topic=topic, channel=channel).topic(topic)
            return found.depth, found.channel(channel)
        except KeyError:
            return None

    def read(
        self, topic: str, count: int, channel: str = "check", timeout: float = 60
    ) -> list[bytes]:
        """The bodies of `count` messages of the topic, read (and FIN'd) from `channel` by
        our consumer; fails if they are not all there within `timeout` seconds."""
        return trio.run(_read, self.tcp_address, topic, channel, count, timeout)

    def missing(self, topic: str, wanted: set[bytes], channel: str = "check") -> set[bytes]:
        """not_in_nsqd() from outside an event loop."""
        return trio.run(not_in_nsqd, self, topic, wanted, channel)

    def publish(self, topic: str, body: bytes) -> None:
        """Publish one message over HTTP /pub (independent of our own TCP client)."""
        ask(nsqd_api.pub(self.http_address, topic, body))

    def publish_many(self, topic: str, bodies: Iterable[bytes], chunk: int = 20_000) -> None:
        """Publish newline-free bodies over HTTP /mpub, `chunk` messages per request."""
        batch: list[bytes] = []
        for body in bodies:
            batch.append(body)
            if len(batch) == chunk:
                ask(nsqd_api.mpub(self.http_address, topic, batch), MPUB_TIMEOUT)
                batch = []
        if batch:
            ask(nsqd_api.mpub(self.http_address, topic, batch), MPUB_TIMEOUT)

    def create_channels(self, topic: str, *channels: str) -> None:
        """Create the topic and channels now, so each channel gets every later message."""
        ask(nsqd_api.create_topic(self.http_address, topic))
        for channel in channels:
            ask(nsqd_api.create_channel(self.http_address, topic, channel))

    def delete_topic(self, topic: str) -> None:
        ask(nsqd_api.delete_topic(self.http_address, topic))


async def _read(address: str, topic: str, channel: str, count: int, timeout: float) -> list[bytes]:
    from nsqtools.config import ClientConfig
    from nsqtools.consumer import ConsumerOptions, open_consumer

    bodies: list[bytes] = []
    with trio.fail_after(timeout):
        config = ClientConfig(max_in_flight=max(1, min(count, 2500)))
        async with open_consumer(
            topic, channel, config, ConsumerOptions(nsqd_tcp_addresses=[address])
        ) as consumer:
            async for batch in consumer:
                bodies.extend(batch.bodies)
                batch.finish()
                if len(bodies) >= count:
                    break
    return bodies


async def not_in_nsqd(
    nsqd: Nsqd, topic: str, wanted: set[bytes], channel: str = "check"
) -> set[bytes]:
    """Which of the wanted bodies the topic (or an existing channel of it) does not hold,
    read with our consumer until each is seen, or until none has come for STALL_LIMIT
    seconds (a durable nsqd fills a new channel from a large topic slowly: a bound on
    the whole read would depend on the machine). Reading by nsqd's depth would not do:
    after a crash nsqd keeps a message whose metadata it had not synced, and does not
    count it; and a relay may have delivered some twice."""
    from nsqtools.config import ClientConfig
    from nsqtools.consumer import ConsumerOptions, open_consumer

    missing = set(wanted)
    config = ClientConfig(max_in_flight=2500)
    async with open_consumer(
        topic, channel, config, ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address])
    ) as consumer:
        while missing:
            with trio.move_on_after(STALL_LIMIT):
                batch = await anext(consumer, None)
                if batch is None:
                    break
                missing.difference_update(batch.bodies)
                batch.finish()
                continue
            break  # nothing came for STALL_LIMIT
    return missing


def _kill_leftovers() -> None:
    for process in list(_live):
        process.kill()


atexit.register(_kill_leftovers)
