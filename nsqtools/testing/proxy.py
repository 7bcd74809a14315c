"""A TCP proxy on loopback for fault tests: a slow link, a frozen link, a cut link.

LinkProxy listens on 127.0.0.1 and forwards each connection to a target address,
with an optional rate limit for each direction (bytes per second), read again for every
piece forwarded, so a link can be slowed and sped up while it carries connections. Its
receive buffers are kept small, so a throttled direction pushes back on the sender as a
slow network does, instead of the kernel soaking up megabytes. pause() stops forwarding
without closing anything (a link that went silent), resume() carries on, and cut() resets
every connection it carries (a link that broke). An observer, if given, sees every piece
forwarded and every end of a direction (the fault harness's tap reads NSQ's protocol
from it). Threads, not trio: the proxy must keep working while the test's own event loop
is busy or blocked.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

from nsqtools.testing.lifetime import StartsAndStops

# Small buffers: what a throttled direction cannot forward stays with its sender.
BUFFER_SIZE = 64 * 1024
# Pacing granularity: a throttled pump forwards about this many pieces a second.
PIECES_PER_SECOND = 50

# Told of each piece as it is forwarded (just before it goes on): (connection number,
# upstream?, the bytes); the bytes are empty once that direction of the connection has
# ended. Called from the pump threads.
Observer = Callable[[int, bool, bytes], None]


class LinkProxy(StartsAndStops):
    """Forwards 127.0.0.1:<port> to `target` ("host:port"), optionally throttled."""

    def __init__(
        self,
        target: str,
        *,
        upstream_rate: float | None = None,
        downstream_rate: float | None = None,
        observer: Observer | None = None,
    ) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host.strip("[]"), int(port))
        self.upstream_rate = upstream_rate  # client → target, bytes/s (None: unlimited)
        self.downstream_rate = downstream_rate  # target → client
        self.forwarded_up = 0  # bytes client → target so far
        self.observer = observer
        self._connections = 0  # accepted so far: each one's number
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_SIZE)
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        self._stopped = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> None:
        self._spawn(self._accept_loop)

    def stop(self) -> None:
        """Close the listener and every connection. Safe twice."""
        self._stopped = True
        self._running.set()
        self._listener.close()
        self.cut()
        for thread in self._threads:
            thread.join(timeout=5)

    def pause(self) -> None:
        """Forward nothing more until resume(); connections stay open."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cut(self) -> None:
        """Reset every connection carried so far (new ones are still accepted)."""
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            try:
                # Linger 0: closing sends RST, as a broken link does. Shutting the read
                # side first wakes the pump blocked reading it.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            sock.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_SIZE)
            with self._lock:
                self._sockets |= {client, server}
                number = self._connections
                self._connections += 1
            self._spawn(self._pump, client, server, number, True)
            self._spawn(self._pump, server, client, number, False)

    def _rate(self, upstream: bool) -> float | None:
        return self.upstream_rate if upstream else self.downstream_rate

    def _pump(
        self, source: socket.socket, sink: socket.socket, number: int, upstream: bool
    ) -> None:
        due = time.monotonic()
        try:
            while True:
                self._running.wait()
                rate = self._rate(upstream)
                piece = BUFFER_SIZE if rate is None else max(1, int(rate / PIECES_PER_SECOND))
                data = source.recv(piece)
                if not data:
                    break
                self._running.wait()
                if self.observer is not None:
                    # Before the bytes go on: the other side may answer them at once,
                    # and the observer must see a question before its answer.
                    self.observer(number, upstream, data)
                sink.sendall(data)
                if upstream:
                    self.forwarded_up += len(data)
                if rate is not None:
                    due = max(due, time.monotonic() - 1) + len(data) / rate
                    time.sleep(max(0.0, due - time.monotonic()))  # pacing, not syncing
                else:
                    due = time.monotonic()
        except OSError:
            pass
        finally:
            if self.observer is not None:
                self.observer(number, upstream, b"")
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
