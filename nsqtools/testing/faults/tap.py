"""A tap on the link between a tool and nsqd: NSQ's protocol read off the bytes a
LinkProxy forwards, into a ledger of what each message went through.

Through the tap the harness sees, independently of the tool's own code: every message
nsqd delivered (its id and body), every FIN, REQ and TOUCH the tool sent back, and every
answer to a publish. From that it knows, for each message, whether the tool FIN'd it (it
must then be in the output, or kept as a dead letter) and which messages nsqd held in
memory only when it was killed (delivered and not FIN'd, or REQ'd: nsqd keeps in-flight
and deferred messages in memory): losing those is nsqd's doing, not the tool's. The
times of FINs and publish answers show when a tool made progress again after a fault.

The tap reads plain NSQ only: the harness runs tools without TLS, snappy or deflate.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from nsqtools.testing.proxy import LinkProxy

MAGIC = b"  V2"
# Commands followed by a 4-byte size and that many bytes of body.
_WITH_BODY = (b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB")
_PUBLISHES = (b"PUB", b"MPUB", b"DPUB")
_FRAME_RESPONSE, _FRAME_ERROR, _FRAME_MESSAGE = 0, 1, 2
# A message frame's data: timestamp (8), attempts (2), id (16), body.
_MESSAGE_HEAD = 26
# What nsqd's own loss on one clean stop (Ledger.never_delivered) may come to in a test.
MOST_NSQD_LOSES = 3


@dataclass
class Ledger:
    """What the tap saw, by message. Bodies identify messages (the harness numbers them);
    ids are nsqd's, which FIN and REQ name."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    body_of: dict[bytes, bytes] = field(default_factory=dict)  # id → body
    deliveries: Counter[bytes] = field(default_factory=Counter)  # body → times delivered
    finished: dict[bytes, float] = field(default_factory=dict)  # body → first FIN's time
    errors: Counter[bytes] = field(default_factory=Counter)  # error frames by code
    # Delivered and not FIN'd since (REQ'd ones included: nsqd may hold them in memory).
    unfinished: set[bytes] = field(default_factory=set)  # ids
    # Bodies nsqd held in memory only when it was killed: its loss if they never return.
    at_risk: set[bytes] = field(default_factory=set)
    progress: list[float] = field(default_factory=list)  # times of FINs and publish OKs

    def delivered(self, message_id: bytes, body: bytes) -> None:
        with self.lock:
            self.body_of[message_id] = body
            self.deliveries[body] += 1
            self.unfinished.add(message_id)

    def never_delivered(self, sent: set[bytes]) -> set[bytes]:
        """The bodies of `sent` nsqd never delivered through the tap. After nsqd was
        stopped cleanly and the channel drained, these are nsqd v1.3.0's loss: as it
        stops, a message its disk queue has just handed a client's pump is neither in
        flight nor on disk when the channel flushes what it holds (rare: one at a time)."""
        with self.lock:
            return sent - set(self.deliveries)

    def fin(self, message_id: bytes) -> None:
        now = time.monotonic()
        with self.lock:
            self.unfinished.discard(message_id)
            body = self.body_of.get(message_id)
            if body is not None:
                self.finished.setdefault(body, now)
            self.progress.append(now)

    def acknowledged(self) -> None:
        with self.lock:
            self.progress.append(time.monotonic())

    def error(self, code: bytes) -> None:
        with self.lock:
            self.errors[code] += 1

    def nsqd_killed(self) -> None:
        """nsqd died with these in memory: whatever does not come back is its loss."""
        with self.lock:
            self.at_risk.update(self.body_of[message_id] for message_id in self.unfinished)
            self.unfinished.clear()

    def progress_after(self, moment: float) -> float | None:
        """Seconds from `moment` to the first FIN or publish answer after it (None: none)."""
        with self.lock:
            later = [when for when in self.progress if when > moment]
        return min(later) - moment if later else None


class _Connection:
    """The protocol state of one connection through the tap, in both directions."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.up = b""
        self.down = b""
        self.magic_seen = False
        self.publishes = 0  # publish commands sent and not yet answered

    def upstream(self, data: bytes) -> None:
        self.up += data
        if not self.magic_seen:
            if len(self.up) < len(MAGIC):
                return
            self.magic_seen, self.up = True, self.up[len(MAGIC) :]
        while self._next_command():
            pass

    def _next_command(self) -> bool:
        line, newline, rest = self.up.partition(b"\n")
        if not newline:
            return False
        words = line.split(b" ")
        if words[0] in _WITH_BODY:
            if len(rest) < 4:
                return False
            (size,) = struct.unpack(">I", rest[:4])
            if len(rest) < 4 + size:
                return False
            rest = rest[4 + size :]
            if words[0] in _PUBLISHES:
                self.publishes += 1
        elif words[0] == b"FIN" and len(words) > 1:
            self.ledger.fin(words[1])
        self.up = rest
        return True

    def downstream(self, data: bytes) -> None:
        self.down += data
        while len(self.down) >= 8:
            size, kind = struct.unpack(">II", self.down[:8])
            if len(self.down) < 4 + size:
                return
            frame, self.down = self.down[8 : 4 + size], self.down[4 + size :]
            self._frame(kind, frame)

    def _frame(self, kind: int, frame: bytes) -> None:
        if kind == _FRAME_MESSAGE and len(frame) >= _MESSAGE_HEAD:
            self.ledger.delivered(frame[10:26], frame[_MESSAGE_HEAD:])
        elif kind == _FRAME_RESPONSE and frame == b"OK" and self.publishes:
            self.publishes -= 1
            self.ledger.acknowledged()
        elif kind == _FRAME_ERROR:
            self.ledger.error(frame.split(b" ", 1)[0])
            self.publishes = max(0, self.publishes - 1)


class NsqTap:
    """A LinkProxy to `target` (an nsqd's TCP address) whose traffic fills `ledger`."""

    def __init__(self, target: str, ledger: Ledger | None = None) -> None:
        self.ledger = ledger or Ledger()
        self._connections: dict[int, _Connection] = {}
        self._lock = threading.Lock()
        self.proxy = LinkProxy(target, observer=self._observe)

    @property
    def address(self) -> str:
        return self.proxy.address

    def _observe(self, number: int, upstream: bool, data: bytes) -> None:
        with self._lock:
            connection = self._connections.setdefault(number, _Connection(self.ledger))
        # Each direction is read by one pump thread only: no lock needed past here.
        if not data:
            return
        if upstream:
            connection.upstream(data)
        else:
            connection.downstream(data)

    def __enter__(self) -> NsqTap:
        self.proxy.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.proxy.stop()
