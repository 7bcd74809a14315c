"""The Youzan fork's routing: each batch to the nsqd leading its partition, a partition
picked in turn for a batch that names none (its topic looked up first if it was not
yet), the leaders dialed as batches need them. A batch whose partition has no writable
leader (not listed by nsqlookupd, or refused as moved, moving or busy) is held and its
topic looked up again with backoff, for config.partition_wait, then sent to the leader
found: a leader move ("0.5-1.4 s" on a running fork) loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import trio

from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import NsqError, NsqErrorResponse
from nsqtools.partitions import NoWritablePartition, PartitionError, Partitions
from nsqtools.producer.encoding import ForkPublish
from nsqtools.producer.node import Node, PartHandler
from nsqtools.producer.outcomes import BatchPart
from nsqtools.protocol import LocalProtocolError, youzan

log = logging.getLogger("nsqtools.producer")

# A held batch's topic is looked up again at once, then after 0.1 s, 0.2 s, ... 1 s:
# "a publisher must wait and look up again for a few seconds, not give up after a
# handful of back-to-back lookups".
FIRST_LOOKUP_DELAY = 0.1
MAX_LOOKUP_DELAY = 1.0


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
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Run the leaders' nodes and the lookups in nursery."""
        self._nursery = nursery

    def send(self, part: BatchPart) -> None:
        """To the nsqd leading the batch's partition, once there is one."""
        batch = part.batch
        assert batch.fork is not None
        if not self.partitions.knows(batch.topic):
            self._look_up_later(part, 0.0)
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
        return self.partitions.next_partition(topic)

    def refused(self, part: BatchPart, error: NsqErrorResponse) -> None:
        """nsqd refused the part for its partition (moved, moving, busy): hold it."""
        fork = part.batch.fork
        assert fork is not None and fork.partition is not None
        hint = youzan.explain_for_partition(error.code, fork.partition)
        self.hold(part, NsqErrorResponse(error.address, error.code, error.message, hint))

    def hold(self, part: BatchPart, reason: NsqError) -> None:
        """Look the topic up again after a backoff and send the part then; fail it with
        `reason` once it has waited for partition_wait."""
        now = trio.current_time()
        if part.held_since is None:
            part.held_since = now
        wait = self._config.partition_wait
        if now - part.held_since >= wait:
            self._fail(part, PartitionError(f"{reason}; waited {format_duration(wait)}"))
            return
        if not part.holds:
            log.warning(
                "%s; looking up %s again for up to %s",
                reason,
                part.batch.topic,
                format_duration(wait),
            )
        delay = 0.0 if not part.holds else FIRST_LOOKUP_DELAY * 2 ** (part.holds - 1)
        part.holds += 1
        self._look_up_later(part, min(delay, MAX_LOOKUP_DELAY))

    def _look_up_later(self, part: BatchPart, delay: float) -> None:
        self._require_nursery().start_soon(self._send_after_lookup, part, delay)

    async def _send_after_lookup(self, part: BatchPart, delay: float) -> None:
        await trio.sleep(delay)
        try:
            await self.partitions.refresh(part.batch.topic)
        except NoWritablePartition as error:
            self.hold(part, error)  # "an empty partition list means again"
            return
        except NsqError as error:
            self._fail(part, error)
            return
        self.send(part)

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the producer is not running")
        return self._nursery


def refused_for_partition(error: NsqError) -> bool:
    """The Youzan fork's refusal of a publish that waiting cures: its partition moved,
    is moving, or has too many publishes waiting."""
    return isinstance(error, NsqErrorResponse) and error.code in youzan.WAIT_ERRORS
