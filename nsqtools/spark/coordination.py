"""How format("nsq")'s readers in the executors learn that Spark committed a batch: a
small control channel between the query's driver-side reader (the Coordinator) and
each executor process that reads for it (readers.py's Holder).

The protocol: lines of JSON over TCP, the holder speaking first with the query's token.

    holder -> coordinator   {"token": T}                      once, on connecting
                            {"waiting": N}                    messages received, in no batch
                            {"hold": [batch, slot], "count": N, "ask": K}
    coordinator -> holder   {"answer": K, "stale": bool}      to a hold: stale if the batch
                                                              is committed already
                            {"fin": [[batch, slot], ...]}     committed: FIN them
                            {"requeue": [[batch, slot], ...]} read twice: REQ them
                            {"stop": true}                    the query stops: requeue all

A read task registers what it took for (batch, slot) and waits for the answer before
Spark sees a row, so the task whose rows Spark used is always registered. When Spark
commits a batch, a (batch, slot) read by one holder alone is FIN'd there; one read by two
(a retried or speculative task in another process) is requeued by both: Spark used one
of them, which is not known here, so both come back (duplicates, never a loss).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import trio

log = logging.getLogger("nsqtools.spark.coordination")

Key = tuple[int, int]  # (batch, slot)
# How long the coordinator's thread may take to start and to stop.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
SEND_TIMEOUT = 5.0
# A line longer than this is no line of ours.
MAX_LINE = 1 << 20


@dataclass(frozen=True)
class CoordinatorAddress:
    """Where holders reach the coordinator: hosts to try in turn, its port and the
    query's token (also the key of a process's holder for that query)."""

    hosts: tuple[str, ...]
    port: int
    token: str


class Lines:
    """JSON objects, one per line, off a trio stream."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._buffer = bytearray()
        self._send_lock = trio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.stream.send_all(json.dumps(message).encode() + b"\n")

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            end = self._buffer.find(b"\n")
            while end < 0:
                if len(self._buffer) > MAX_LINE:
                    raise ValueError("a line too long on the control channel")
                data = await self.stream.receive_some()
                if not data:
                    return
                self._buffer += data
                end = self._buffer.find(b"\n")
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            message = json.loads(line)
            if not isinstance(message, dict):
                raise ValueError("not a JSON object on the control channel")
            yield message


@dataclass
class _Peer:
    """A holder, as the coordinator sees it."""

    lines: Lines
    waiting: int = 0


@dataclass
class _State:
    """What the coordinator knows; guarded by `lock` (Spark's thread reads it, the
    coordinator's thread writes it)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    peers: dict[int, _Peer] = field(default_factory=dict)
    holds: dict[Key, dict[int, int]] = field(default_factory=dict)  # key -> {peer: count}
    committed: int = -1


class Coordinator:
    """The driver side: a server in a thread of its own, on trio."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self.state = _State()
        self._token: trio.lowlevel.TrioToken | None = None
        self._port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="nsq-coordinator", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError('format("nsq")\'s coordinator did not start')
        if self._error is not None:
            raise self._error

    @property
    def address(self) -> CoordinatorAddress:
        return CoordinatorAddress(_advertised_hosts(), self._port, self.token)

    # -- what Spark's thread asks ---------------------------------------------------------

    def holders(self) -> int:
        with self.state.lock:
            return len(self.state.peers)

    def waiting(self) -> int:
        with self.state.lock:
            return sum(peer.waiting for peer in self.state.peers.values())

    def holds_messages(self) -> bool:
        """Whether a batch not yet committed carries messages."""
        with self.state.lock:
            return any(sum(counts.values()) for counts in self.state.holds.values())

    def commit(self, batch: int) -> None:
        """Spark committed every batch up to `batch`: FIN what one holder alone read,
        requeue what two read."""
        fins: dict[int, list[Key]] = {}
        requeues: dict[int, list[Key]] = {}
        with self.state.lock:
            self.state.committed = max(self.state.committed, batch)
            done = [key for key in self.state.holds if key[0] <= batch]
            for key in done:
                readers = self.state.holds.pop(key)
                answers = fins if len(readers) == 1 else requeues
                for peer in readers:
                    answers.setdefault(peer, []).append(key)
        for peer, keys in fins.items():
            self._tell(peer, {"fin": keys})
        for peer, keys in requeues.items():
            self._tell(peer, {"requeue": keys})

    def close(self) -> None:
        """Tell every holder to requeue what it holds and let go; stop serving."""
        with self.state.lock:
            peers = list(self.state.peers)
        for peer in peers:
            self._tell(peer, {"stop": True})
        if self._token is not None and self._stop is not None:
            stop = self._stop
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
        self._thread.join(STOP_TIMEOUT)

    def _tell(self, peer_id: int, message: dict[str, Any]) -> None:
        with self.state.lock:
            peer = self.state.peers.get(peer_id)
        if peer is None or self._token is None:
            return  # gone: nsqd takes its messages back
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run(_send_quietly, peer.lines, message, trio_token=self._token)

    # -- the server ---------------------------------------------------------------------

    def _run(self) -> None:
        # Signals are for the process's main thread (and, where readers run too, for
        # readers.py's thread that waits for them).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
        try:
            trio.run(self._serve)
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        listeners = await trio.open_tcp_listeners(0, host="0.0.0.0")
        self._port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._serve_holder, listeners)
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    async def _serve_holder(self, stream: trio.SocketStream) -> None:
        lines = Lines(stream)
        peer_id = id(lines)
        try:
            messages = aiter(lines)
            hello = await anext(messages, None)
            if hello is None or not secrets.compare_digest(str(hello.get("token")), self.token):
                return
            with self.state.lock:
                self.state.peers[peer_id] = _Peer(lines)
            async for message in messages:
                await self._on_message(peer_id, lines, message)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError) as error:
            log.debug("a holder's control channel ended: %s", error)
        finally:
            with self.state.lock:
                self.state.peers.pop(peer_id, None)
            await stream.aclose()

    async def _on_message(self, peer_id: int, lines: Lines, message: dict[str, Any]) -> None:
        if "waiting" in message:
            with self.state.lock:
                peer = self.state.peers.get(peer_id)
                if peer is not None:
                    peer.waiting = int(message["waiting"])
        if "hold" in message:
            batch, slot = (int(part) for part in message["hold"])
            with self.state.lock:
                stale = batch <= self.state.committed
                if not stale:
                    readers = self.state.holds.setdefault((batch, slot), {})
                    readers[peer_id] = int(message["count"])
            await lines.send({"answer": message["ask"], "stale": stale})


async def _send_quietly(lines: Lines, message: dict[str, Any]) -> None:
    """Send, unless the holder is gone or stuck: nsqd takes back what it held (a
    holder that stops reading is no reason to hold Spark's thread)."""
    with trio.move_on_after(SEND_TIMEOUT):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await lines.send(message)


def _advertised_hosts() -> tuple[str, ...]:
    """Addresses of this machine an executor may reach it at, most likely first: the
    one Spark was told (SPARK_LOCAL_IP), the one routes out leave by, then loopback
    (local mode, and clusters on one machine)."""
    hosts = [os.environ.get("SPARK_LOCAL_IP", ""), _outbound_address(), "127.0.0.1"]
    return tuple(dict.fromkeys(host for host in hosts if host))


def _outbound_address() -> str:
    """The address of the interface a route out leaves by (a UDP socket's connect
    sends nothing); "" without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
            address: str = probe.getsockname()[0]
        except OSError:
            return ""
    return address
