"""One nsqd as the producer sees it: its connection, dialed when a part needs it and
redialed with backoff, the parts waiting for it, written in order with many in flight,
and the size limits it named in its refusals.

A node decides nothing about a part's fate: it reports each answer (or failure), in
order, to the handler it was given, which decides whether the part is done, cut again,
tried again or failed.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable

import trio

from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import ConnectError, ConnectionClosed, NsqError, NsqErrorResponse
from nsqtools.producer.encoding import NamedLimits
from nsqtools.producer.outcomes import BatchPart
from nsqtools.protocol import ProtocolError, youzan
from nsqtools.transport import Conn, open_connection

log = logging.getLogger("nsqtools.producer")

# A lost nsqd is redialed after 50ms, 100ms, ... up to this, with 20% jitter.
FIRST_REDIAL_DELAY = 0.05
MAX_REDIAL_DELAY = 2.0
# nsqd could not queue the messages (the topic is closing as nsqd exits): try again.
_TRANSIENT_ERRORS = {"E_PUB_FAILED", "E_MPUB_FAILED", "E_DPUB_FAILED"}

# Told of each part's answer: the node, the part, the error (None: acknowledged) and
# how long nsqd took to answer.
PartHandler = Callable[["Node", BatchPart, NsqError | None, float], None]


class Node:
    """One nsqd: its connection, dialed when a part needs it and redialed with backoff,
    the parts waiting for it, and the limits it has told us about. One task writes the
    parts in order, many in flight; the connection reports each answer, in order, as it
    comes. Parts that come back for another try go in front again, in their first order."""

    def __init__(
        self,
        index: int,
        address: str,
        config: ClientConfig,
        reconnect_timeout: float,
        on_part: PartHandler,
    ) -> None:
        self.index = index
        self.address = address
        self._config = config
        self._reconnect_timeout = reconnect_timeout
        self._on_part = on_part
        self._outbox: deque[BatchPart] = deque()
        self._again: list[BatchPart] = []  # parts back for another try
        self._wakeup = trio.Event()
        self._conn: Conn | None = None
        self.ever_connected = False
        self.down_since: float | None = None  # since the first failure after a success
        self._dial_failures = 0
        self._next_dial = 0.0
        self._dial_error: NsqError | None = None  # why the last dial failed
        self.limits = NamedLimits()

    def send(self, part: BatchPart) -> None:
        self._outbox.append(part)
        self._wakeup.set()

    def send_again(self, part: BatchPart) -> None:
        self._again.append(part)
        self._wakeup.set()

    def given_up(self, now: float) -> bool:
        """Never reachable, or down for reconnect_timeout: what is meant for it fails."""
        if not self.ever_connected:
            return True
        down_for = 0.0 if self.down_since is None else now - self.down_since
        return down_for >= self._reconnect_timeout

    def mark_down(self, now: float, error: NsqError) -> None:
        if self.down_since is not None:
            return
        self.down_since = now
        if self.ever_connected:
            waiting = format_duration(self._reconnect_timeout)
            log.warning("%s; keeping what is meant for it and redialing for %s", error, waiting)

    def learn_limit(self, part: BatchPart, error: NsqErrorResponse) -> None:
        """Remember the limit nsqd named in refusing the part (or guess it from the part)."""
        self.limits.learn(error.code, error.message, part.sizes())

    async def run(self, nursery: trio.Nursery) -> None:
        """Write the parts as they come; tasks for answers and the connection go in nursery."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            while self._outbox or self._again:
                if self._again:
                    self._again.sort(key=lambda part: part.order)
                    self._outbox.extendleft(reversed(self._again))
                    self._again.clear()
                await self._write_next(nursery)

    async def _write_next(self, nursery: trio.Nursery) -> None:
        try:
            conn = await self._connection(nursery)
        except NsqError as error:
            self._fail_waiting(error)  # their outcomes decide what is tried again
            return
        try:
            await conn.wait_writable()
        except ConnectionClosed:
            return  # closed meanwhile: the next round dials again
        part = self._outbox.popleft()
        refusal = self._known_refusal(part) or _not_the_fork(conn, part)
        if refusal is not None:
            self._on_part(self, part, refusal, 0.0)
            return
        started = trio.current_time()

        def on_answer(response: bytes, error: NsqError | None) -> None:
            if error is None:
                error = part.batch.note_answer(response, self.address)
            self._on_part(self, part, error, trio.current_time() - started)

        try:
            conn.send_request(part.command, on_answer)
        except ConnectionClosed as error:
            self._on_part(self, part, error, 0.0)

    def _fail_waiting(self, error: NsqError) -> None:
        waiting = list(self._outbox)
        self._outbox.clear()
        for part in waiting:
            self._on_part(self, part, error, 0.0)

    async def _connection(self, nursery: trio.Nursery) -> Conn:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = None
        now = trio.current_time()
        if self._dial_error is not None and now < self._next_dial and self.given_up(now):
            raise self._dial_error  # no waiting for a redial: it fails at once meanwhile
        await trio.sleep_until(self._next_dial)
        try:
            self._conn = await nursery.start(self._keep_open)
        except NsqError as error:
            self._dial_failures += 1
            self._dial_error = error
            delay = min(FIRST_REDIAL_DELAY * 2 ** (self._dial_failures - 1), MAX_REDIAL_DELAY)
            self._next_dial = trio.current_time() + delay * (1 + 0.2 * random.random())
            raise
        if self.down_since is not None:
            down_for = trio.current_time() - self.down_since
            log.warning("%s: connected again after %.1fs", self.address, down_for)
        self._dial_failures = 0
        self._dial_error = None
        self.ever_connected = True
        self.down_since = None
        return self._conn

    async def _keep_open(self, *, task_status: trio.TaskStatus[Conn]) -> None:
        try:
            async with open_connection(self.address, self._config) as conn:
                task_status.started(conn)
                await conn.wait_closed()
        except (ProtocolError, OSError, trio.BrokenResourceError) as error:
            # Set-up failures the transport does not already report as NsqError.
            reason = str(error) or type(error).__name__
            raise ConnectError(f"cannot connect to {self.address}: {reason}") from error

    def _known_refusal(self, part: BatchPart) -> NsqErrorResponse | None:
        """nsqd's answer, known in advance, to a part over a limit it named. Sending it
        would only make nsqd close the connection again, and the reset that closes it
        can take the answers to the commands before it along (sent again: duplicates)."""
        if not self.limits.known:
            return None  # the usual case: nothing refused yet
        refusal = self.limits.refusal(part.sizes())
        if refusal is None:
            return None
        code, problem = refusal
        return NsqErrorResponse(self.address, code, problem)


def is_transient(error: NsqError) -> bool:
    """A failure that a new connection may not have: try again rather than fail."""
    if isinstance(error, NsqErrorResponse):
        return error.code in _TRANSIENT_ERRORS
    return isinstance(error, ConnectError | ConnectionClosed)


def _not_the_fork(conn: Conn, part: BatchPart) -> NsqError | None:
    """A fork-only publish (a partition, a trace) to upstream nsqd, which would take
    `PUB topic 3` as `PUB topic` and refuse the rest: refused here, in words."""
    if part.batch.fork is None or youzan.is_fork_version(conn.identify.version):
        return None
    version = conn.identify.version or "an unknown version"
    return NsqError(
        f"{conn.address} is NSQ {version}, not the Youzan fork: partitions and tracing "
        "need the fork"
    )
