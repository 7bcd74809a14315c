"""The Youzan fork's routing: each batch to the nsqd leading its partition, a partition
picked in turn for a batch that names none (its topic looked up first if it was not
yet), the leaders dialed as batches need them. A batch whose partition has no writable
leader (not listed by nsqlookupd, or refused as moved, moving or busy) is held and its
topic looked up again with backoff, for config.partition_wait, then sent to the leader
found: a leader move ("0.5-1.4 s" on a running fork) loses nothing. A lookup that left a
moving partition out is made again (MAX_LOOKUP_DELAY apart) until it lists them all, so
the round robin gets that partition back.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import trio

from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import NsqError, NsqErrorResponse
from nsqtools.partitions import NoWritablePartition, PartitionError, Partitions, retry_delay
from nsqtools.producer.encoding import ForkPublish
from nsqtools.producer.node import Node, PartHandler
from nsqtools.producer.outcomes import BatchPart
from nsqtools.protocol import LocalProtocolError, youzan

log = logging.getLogger("nsqtools.producer")


@dataclass
class _Held:
    """Parts waiting for their partition's leader, and the last reason there is none."""

    parts: list[BatchPart]
    reason: NsqError | None


class LeaderRouting:
    """Sends parts to their partition's leader, through a node per leader. Answers go
    to on_part as every node's do; a part that cannot be routed goes to fail."""

    def __init__(
        self,
        partitions: Partitions,
        config: ClientConfig,
        reconnect_timeout: float,
        on_part: PartHandler,
        fail: Callable[[BatchPart, NsqError], None],
    ) -> None:
        self.partitions = partitions
        self._config = config
        self._reconnect_timeout = reconnect_timeout
        self._on_part = on_part
        self._fail = fail
        self._leaders: dict[str, Node] = {}  # by address, dialed as batches need them
        # Parts waiting for a partition's leader, by topic and partition (None: for
        # the topic's first lookup).
        self._held: dict[tuple[str, int | None], _Held] = {}
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Run the leaders' nodes and the lookups in nursery."""
        self._nursery = nursery

    def send(self, part: BatchPart) -> None:
        """To the nsqd leading the batch's partition, once there is one."""
        batch = part.batch
        assert batch.fork is not None
        if not self.partitions.knows(batch.topic):
            self.hold(part, None)
            return
        if batch.fork.partition is None:  # its topic was not known when it was made
            try:
                batch.to_partition(self._pick_partition(batch.topic))
            except LocalProtocolError as error:  # what would never be sent
                self._fail(part, NsqError(str(error)))
                return
            except PartitionError as error:
                self._fail(part, error)
                return
        partition = batch.fork.partition
        assert partition is not None
        held = self._held.get((batch.topic, partition))
        if held is not None:  # behind those already waiting for the leader
            held.parts.append(part)
            return
        address = self.partitions.leader(batch.topic, partition)
        if address is None:
            problem = f"no nsqd leads partition {partition} of {batch.topic} now"
            self.hold(part, NoWritablePartition(problem))
            return
        node = self._leaders.get(address)
        if node is None:
            nursery = self._require_nursery()
            node = Node(-1, address, self._config, self._reconnect_timeout, self._on_part)
            self._leaders[address] = node
            nursery.start_soon(node.run, nursery)
        node.send(part)

    def with_partition(self, topic: str, fork: ForkPublish) -> ForkPublish:
        """The batch's partition: the one named, else the next in turn once the topic
        is known (until then, none: send() picks it after looking the topic up)."""
        if fork.partition is not None or not self.partitions.knows(topic):
            return fork
        return replace(fork, partition=self._pick_partition(topic))

    def _pick_partition(self, topic: str) -> int:
        """The next partition in turn (an ordered topic's messages must name theirs:
        their order holds within one)."""
        if self.partitions.is_ordered(topic):
            raise PartitionError(
                f"topic {topic} is ordered: give each message a partition or a shard key"
            )
        if self.partitions.due_for_another_lookup(topic):
            self._require_nursery().start_soon(self._look_up_again, topic)
        return self.partitions.next_partition(topic)

    async def _look_up_again(self, topic: str) -> None:
        """A lookup that may list a partition the last one left out; the last one stays
        if it fails (the batches go on to the partitions it listed)."""
        with contextlib.suppress(NsqError):
            await self.partitions.refresh(topic)

    def refused(self, part: BatchPart, error: NsqErrorResponse) -> None:
        """nsqd refused the part for its partition (moved, moving, busy): hold it."""
        fork = part.batch.fork
        assert fork is not None and fork.partition is not None
        hint = youzan.explain_for_partition(error.code, fork.partition)
        self.hold(part, NsqErrorResponse(error.address, error.code, error.message, hint))

    def hold(self, part: BatchPart, reason: NsqError | None) -> None:
        """Hold the part with the others waiting for its partition's leader (or its
        topic's lookup), to be sent, in their first order, once nsqlookupd names one:
        the order of an ordered topic's partition holds through a move."""
        fork = part.batch.fork
        key = (part.batch.topic, None if fork is None else fork.partition)
        now = trio.current_time()
        if part.held_since is None:
            part.held_since = now
        wait = self._config.partition_wait
        if reason is not None and now - part.held_since >= wait:
            self._fail(part, PartitionError(f"{reason}; waited {format_duration(wait)}"))
            return
        part.holds += 1
        held = self._held.get(key)
        if held is not None:
            held.parts.append(part)
            return
        self._held[key] = _Held([part], reason)
        if reason is not None and part.holds == 1:
            log.warning(
                "%s; looking up %s again for up to %s", reason, key[0], format_duration(wait)
            )
        self._require_nursery().start_soon(self._wait_for_leader, key)

    async def _wait_for_leader(self, key: tuple[str, int | None]) -> None:
        """Look the topic up, at once then with backoff, until the partition has a
        leader, failing the parts that waited partition_wait meanwhile."""
        topic, partition = key
        held = self._held[key]
        # A part refused again and again (the leader named still refuses it) waits longer
        # each time: never back-to-back lookups.
        lookups = held.parts[0].holds - 1
        while held.parts:
            await trio.sleep(retry_delay(lookups))
            lookups += 1
            try:
                await self.partitions.refresh(topic)
            except NoWritablePartition as error:  # "an empty partition list means again"
                held.reason = error
            except NsqError as error:  # no such topic, no lookupd: waiting will not help
                self._release(key, error)
                return
            else:
                if partition is None or self.partitions.leader(topic, partition) is not None:
                    break
            self._fail_overdue(held)
        self._release(key, None)

    def _fail_overdue(self, held: _Held) -> None:
        now = trio.current_time()
        wait = self._config.partition_wait
        overdue = [part for part in held.parts if now - (part.held_since or now) >= wait]
        for part in overdue:
            held.parts.remove(part)
            self._fail(part, PartitionError(f"{held.reason}; waited {format_duration(wait)}"))

    def _release(self, key: tuple[str, int | None], error: NsqError | None) -> None:
        """Send the held parts in their first order, or fail them all with `error`."""
        for part in sorted(self._held.pop(key).parts, key=lambda part: part.order):
            if error is None:
                self.send(part)
            else:
                self._fail(part, error)

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the producer is not running")
        return self._nursery


def refused_for_partition(error: NsqError) -> bool:
    """The Youzan fork's refusal of a publish that waiting cures: its partition moved,
    is moving, or has too many publishes waiting."""
    return isinstance(error, NsqErrorResponse) and error.code in youzan.WAIT_ERRORS
