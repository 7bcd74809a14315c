"""The fork cluster tests start (YouzanCluster): one nsqlookupd and N nsqds on loopback,
the threads that serve them, and what tests script (inject messages, refuse the next
commands with an error code, move a partition's leader, make a topic unwritable) and
read (messages stored, ids FIN'd, commands received, connections open).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

from nsqtools.testing.lifetime import StartsAndStops
from nsqtools.testing.youzan.lookupd import Lookupd
from nsqtools.testing.youzan.nsqd import ForkNsqd
from nsqtools.testing.youzan.session import ForkSession
from nsqtools.testing.youzan.state import (
    Draft,
    ForkTopic,
    Move,
    Partition,
    Store,
    StoredMessage,
)

# How often the HTTP servers' loops poll: shutdown() waits for the next one.
HTTP_POLL_SECONDS = 0.02


class YouzanCluster(StartsAndStops):
    """A fork cluster: one nsqlookupd (HTTP only) and `nsqd_count` nsqds, replica 1."""

    def __init__(self, topics: Sequence[ForkTopic] = (), nsqd_count: int = 2) -> None:
        if nsqd_count < 1:
            raise ValueError("a cluster has at least one nsqd")
        self._store = Store(nsqd_count)
        for topic in topics:
            self._store.add_topic(topic)
        self._nsqds = [ForkNsqd(index, self._store) for index in range(nsqd_count)]
        self._lookupd = Lookupd(self._store, self._nsqds)
        self.lookupd_http_address = self._lookupd.http_address
        self.nsqd_tcp_addresses = [nsqd.tcp_address for nsqd in self._nsqds]
        self.nsqd_http_addresses = [f"127.0.0.1:{nsqd.http_port}" for nsqd in self._nsqds]
        self._servers = [self._lookupd.http, *(nsqd.http for nsqd in self._nsqds)]
        self._threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._stopping = threading.Event()  # ends the moves under way

    # Lifetime.

    def start(self) -> None:
        self._started = True
        for server in self._servers:
            # shutdown() waits for the loop's next poll: short ones keep stop() fast.
            self._spawn(functools.partial(server.serve_forever, HTTP_POLL_SECONDS))
        for nsqd in self._nsqds:
            self._spawn(functools.partial(self._accept, nsqd))

    def stop(self) -> None:
        """Close every listener and connection and join every thread. Safe twice."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        for nsqd in self._nsqds:
            with contextlib.suppress(OSError):
                nsqd.listener.shutdown(socket.SHUT_RDWR)
            nsqd.listener.close()
        for server in self._servers:
            if self._started:
                server.shutdown()
            server.server_close()
        self._lookupd.close()
        with self._store.lock:
            sessions = list(self._store.sessions)
        for session in sessions:
            session.close()
        self._join_all()

    def _join_all(self) -> None:
        # Accepting threads end first (their listeners are closed), so once these are
        # joined no thread is added: join until the list stops growing.
        joined = 0
        while True:
            with self._threads_lock:
                threads = self._threads[joined:]
            if not threads:
                return
            for thread in threads:
                thread.join()
            joined += len(threads)

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        with self._threads_lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self, nsqd: ForkNsqd) -> None:
        while True:
            try:
                sock, _ = nsqd.listener.accept()
            except OSError:  # the listener was closed: the cluster stops
                return
            session = ForkSession(self._store, nsqd.index, sock)
            with self._store.lock:
                self._store.sessions.add(session)
            if self._stopped:
                session.close()
                session.file.close()
                continue
            self._spawn(functools.partial(session.serve, self._spawn))

    # What tests script.

    def add_topic(self, topic: ForkTopic) -> None:
        with self._store.lock:
            self._store.add_topic(topic)

    def inject(
        self,
        topic: str,
        partition: int,
        body: bytes,
        *,
        trace_id: int = 0,
        tag: str = "",
        ext: bytes = b"",
        timestamp: int | None = None,
    ) -> StoredMessage:
        """Store a message as if published (whatever the leader, refusals or writability).
        ext and tag are stored as given: a tag without ext goes out with ext version 0."""
        with self._store.lock:
            target = self._store.partition(topic, partition)
            if (ext or tag) and not target.topic.extend:
                raise ValueError(f"topic {topic!r} is not an extend topic: no ext, no tag")
            draft = Draft(body, trace_id=trace_id, ext=ext, tag=tag)
            stamp = time.time_ns() if timestamp is None else timestamp
            return self._store.append(target, draft, stamp)

    def refuse_next(
        self,
        topic: str,
        partition: int,
        code: str,
        times: int = 1,
        *,
        on: Literal["pub", "sub"] = "pub",
    ) -> None:
        """Answer the next `times` PUB-family commands to the partition (or SUB-family ones,
        with on="sub") with this error code. On PUB the codes the fork sends as non-fatal
        (not-leader, not-writable, ...: wire.NON_FATAL_ON_PUB) leave the connection open;
        every other code, E_PUB_TOO_MUCH_WAITING among them, and every code on SUB, closes
        it."""
        with self._store.lock:
            self._store.partition(topic, partition).refusals[on].extend([code] * times)

    def move_partition(self, topic: str, partition: int, nsqd: int, window: float = 0.0) -> None:
        """A leader change, as observed: for `window` seconds the partition has no
        writable leader (lookups with access=w leave it out) and PUB to it answers
        E_FAILED_ON_NOT_WRITABLE (the window's first half), then E_FAILED_ON_NOT_LEADER,
        non-fatal. Then lookups name the new nsqd and the old one answers not-leader.
        Consumers on the old nsqd are disconnected when the move ends (the page is
        silent: this makes them look the leader up again). The messages and channels
        move along: the replicas hold them too. moving() says when it is over."""
        if not 0 <= nsqd < len(self._nsqds):
            raise ValueError(f"no nsqd {nsqd}")
        if window < 0:
            raise ValueError(f"a move's window must not be negative, got {window}")
        with self._store.lock:
            moved = self._store.partition(topic, partition)
            if moved.move is not None:
                raise ValueError(f"partition {partition} of {topic!r} is moving already")
            moved.move = Move(nsqd)
        if not window:
            self._end_move(moved)
            return
        self._spawn(functools.partial(self._run_move, moved, window))

    def moving(self, topic: str, partition: int) -> bool:
        """True while a move_partition() of the partition is under way."""
        with self._store.lock:
            return self._store.partition(topic, partition).move is not None

    def _run_move(self, moved: Partition, window: float) -> None:
        if self._stopping.wait(window / 2):
            return
        with self._store.lock:
            assert moved.move is not None
            moved.move.refusal = "E_FAILED_ON_NOT_LEADER"
        if self._stopping.wait(window / 2):
            return
        self._end_move(moved)

    def _end_move(self, moved: Partition) -> None:
        with self._store.lock:
            assert moved.move is not None
            moved.former_leaders.add(moved.leader)
            moved.leader = moved.move.to
            moved.move = None
            stranded = [
                session
                for channel in moved.channels.values()
                for session in channel.sessions
                if session.nsqd != moved.leader
            ]
        for session in stranded:
            session.close()

    def set_writable(self, topic: str, enabled: bool) -> None:
        """Unwritable is a topic "right after creation": lookups with access=w list no
        partition and no producer, and publishing gets E_FAILED_ON_NOT_WRITABLE."""
        with self._store.lock:
            self._store.topic(topic).writable = enabled

    # What tests read.

    def stored(self, topic: str, partition: int | None = None) -> list[StoredMessage]:
        """Every message of the topic (or of one partition), by partition then offset."""
        with self._store.lock:
            partitions = self._store.topic(topic).partitions
            if partition is not None:
                partitions = [self._store.partition(topic, partition)]
            chosen = partitions
            return [message for p in chosen for message in p.messages]

    def finished(self, topic: str, channel: str) -> list[bytes]:
        """The ids FIN'd on the topic's channel, in order."""
        with self._store.lock:
            return list(self._store.finished.get((topic, channel), []))

    def commands(self, nsqd: int | None = None) -> list[bytes]:
        """Every command received (by one nsqd, or all), raw and in order: the line with its
        "\\n", and for those with a body the 4-byte size and the body."""
        with self._store.lock:
            return [raw for index, raw in self._store.commands if nsqd in (None, index)]

    def connections(self) -> int:
        """Client connections to the nsqds open now."""
        with self._store.lock:
            return len(self._store.sessions)
