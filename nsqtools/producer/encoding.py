"""How messages become publish commands, sans-IO: where MPUBs are cut to fit nsqd's
limits, which command a batch is (PUB, MPUB, DPUB, and the Youzan fork's partitioned,
traced and extended variants), and the size limits an nsqd names in its refusals.

Nothing here dials, waits or raises nsqtools.errors: every function answers from its
arguments, so the cutting and the commands are tested without sockets.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

from nsqtools.protocol import LocalProtocolError, commands, youzan

# nsqd's defaults (--max-msg-size, --max-body-size): where cutting starts, until an nsqd
# says its own limits are smaller. Larger messages are still sent, each on its own.
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024

# nsqd's refusals of a command for its size: cut it again, or fail the message too big.
SIZE_ERRORS = frozenset({"E_BAD_BODY", "E_BAD_MESSAGE"})

_MPUB_OVERHEAD = 4  # the message count before the first message
_MESSAGE_OVERHEAD = 4  # the size before each message
# nsqd's answers that name the limit a command broke, e.g. "MPUB body too big 6000 > 4096".
_TOO_BIG = re.compile(r"too big (\d+) > (\d+)")


# -- cutting ----------------------------------------------------------------------------


def cut_points(
    sizes: Sequence[int], max_body_size: int, max_message_size: int | None = None
) -> list[tuple[int, int]]:
    """Ranges [start, end) of messages, in order, each fitting one MPUB body of at most
    max_body_size bytes. A message too big to share an MPUB, or over max_message_size,
    gets a range of its own (it goes out as a PUB)."""
    if max_message_size is not None and sizes and max(sizes) > max_message_size:
        return list(_cut_around_oversize(sizes, max_body_size, max_message_size))
    count = len(sizes)
    if not count:
        return []
    if commands.mpub_body_size(sizes) <= max_body_size:
        return [(0, count)]
    # ends[i]: MPUB body bytes taken by messages 0..i, without the count.
    ends = list(accumulate(map(_MESSAGE_OVERHEAD.__add__, sizes)))
    ranges = []
    start, before = 0, 0
    room = max_body_size - _MPUB_OVERHEAD
    while start < count:
        end = max(bisect_right(ends, before + room, start), start + 1)
        ranges.append((start, end))
        before, start = ends[end - 1], end
    return ranges


def _cut_around_oversize(
    sizes: Sequence[int], max_body_size: int, max_message_size: int
) -> Iterator[tuple[int, int]]:
    start = 0
    for index, size in enumerate(sizes):
        if size > max_message_size:
            for first, last in cut_points(sizes[start:index], max_body_size):
                yield start + first, start + last
            yield index, index + 1
            start = index + 1
    for first, last in cut_points(sizes[start:], max_body_size):
        yield start + first, start + last


# -- commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ForkPublish:
    """How the Youzan fork publishes a batch: to this partition (None: the one nsqd
    leads), with a trace id per message (PUB_TRACE, MPUB_TRACE), or with an extend
    header (PUB_EXT: one message; its "##trace_id" asks for a traced answer)."""

    partition: int | None = None
    trace_ids: Sequence[int] | None = None
    ext: Mapping[str, str] | None = None

    @property
    def traced(self) -> bool:
        return self.trace_ids is not None or (
            self.ext is not None and youzan.TRACE_ID_KEY in self.ext
        )

    def piece(self, start: int, end: int) -> ForkPublish:
        if self.trace_ids is None:
            return self
        return ForkPublish(self.partition, self.trace_ids[start:end], self.ext)


def publish_command(
    topic: str, bodies: list[bytes], delay: float | None, fork: ForkPublish | None = None
) -> bytes:
    """The one command that publishes the messages: a DPUB when deferred (one message),
    else a PUB for one message and an MPUB for several, as the fork says when it does."""
    if delay is not None:
        return commands.dpub(topic, delay, bodies[0])
    if fork is not None:
        return _fork_command(topic, bodies, fork)
    if len(bodies) == 1:
        return commands.pub(topic, bodies[0])
    return commands.mpub(topic, bodies, list(map(len, bodies)))


def _fork_command(topic: str, bodies: list[bytes], fork: ForkPublish) -> bytes:
    partition = fork.partition
    if fork.ext is not None or fork.trace_ids is not None:
        if partition is None:
            raise LocalProtocolError("traced and extended publishing needs a partition")
        if fork.ext is not None:
            return youzan.pub_ext(topic, partition, fork.ext, bodies[0])
        if fork.trace_ids is not None and len(bodies) == 1:
            return youzan.pub_trace(topic, partition, fork.trace_ids[0], bodies[0])
        return youzan.mpub_trace(topic, partition, fork.trace_ids or (), bodies)
    if len(bodies) == 1:
        return commands.pub(topic, bodies[0], partition)
    return commands.mpub(topic, bodies, list(map(len, bodies)), partition)


# -- the limits one nsqd named ----------------------------------------------------------


class NamedLimits:
    """The limits one nsqd named when it refused a command for its size (None: none
    refused yet), and the refusal it would give, known in advance, to another over them."""

    __slots__ = ("max_body_size", "max_message_size")

    def __init__(self) -> None:
        self.max_message_size: int | None = None
        self.max_body_size: int | None = None

    @property
    def known(self) -> bool:
        return self.max_message_size is not None or self.max_body_size is not None

    def learn(self, code: str, message: str, sizes: Sequence[int]) -> None:
        """Remember the limit nsqd named (code, message) in refusing a command of
        messages of these sizes, or guess it from the sizes when it named none."""
        named = _TOO_BIG.search(message)
        if code == "E_BAD_BODY":
            limit = int(named[2]) if named else commands.mpub_body_size(sizes) - 1
            self.max_body_size = min(limit, self.max_body_size or limit)
        elif named or len(sizes) == 1:
            limit = int(named[2]) if named else max(sizes) - 1
            self.max_message_size = min(limit, self.max_message_size or limit)

    def refusal(self, sizes: Sequence[int]) -> tuple[str, str] | None:
        """The code and message nsqd would answer a command of messages of these sizes
        with, if over a limit it named; None if within them."""
        message_limit, body_limit = self.max_message_size, self.max_body_size
        if message_limit is not None and max(sizes) > message_limit:
            command = "PUB" if len(sizes) == 1 else "MPUB"
            return "E_BAD_MESSAGE", f"{command} message too big {max(sizes)} > {message_limit}"
        body = commands.mpub_body_size(sizes)
        if body_limit is not None and len(sizes) > 1 and body > body_limit:
            return "E_BAD_BODY", f"MPUB body too big {body} > {body_limit}"
        return None
