"""The Youzan fork's routing: each batch to the nsqd leading its partition, a partition
picked in turn for a batch that names none, the leaders dialed as batches need them,
and a refusal saying the partition moved (not leader, not writable, not on this nsqd)
answered by looking the topic up again and following it, at most MAX_REROUTES times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from nsqtools.config import ClientConfig
from nsqtools.errors import NsqError, NsqErrorResponse
from nsqtools.partitions import PartitionError, Partitions
from nsqtools.producer.encoding import ForkPublish
from nsqtools.producer.node import Node, PartHandler
from nsqtools.producer.outcomes import BatchPart
from nsqtools.protocol import youzan

log = logging.getLogger("nsqtools.producer")

# How often a batch follows its partition to a new leader before it fails.
MAX_REROUTES = 5


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

    def with_partition(self, topic: str, fork: ForkPublish) -> ForkPublish:
        """The batch's partition: the one named, else the next in turn (an ordered
        topic's messages must name theirs: their order holds within one)."""
        if fork.partition is not None:
            return fork
        if self.partitions.is_ordered(topic):
            raise PartitionError(
                f"topic {topic} is ordered: give each message a partition or a shard key"
            )
        return ForkPublish(self.partitions.next_partition(topic), fork.trace_ids, fork.ext)

    def send(self, part: BatchPart) -> None:
        """To the nsqd leading the batch's partition."""
        assert part.batch.fork is not None
        topic, partition = part.batch.topic, part.batch.fork.partition
        assert partition is not None  # with_partition named one
        address = self.partitions.leader(topic, partition)
        if address is None:
            self._fail(part, PartitionError(f"no nsqd leads partition {partition} of {topic}"))
            return
        node = self._leaders.get(address)
        if node is None:
            nursery = self._require_nursery()
            node = Node(-1, address, self._config, self._reconnect_timeout, self._on_part)
            self._leaders[address] = node
            nursery.start_soon(node.run, nursery)
        node.send(part)

    def reroute(self, part: BatchPart, error: NsqErrorResponse) -> None:
        """The partition moved: look the topic up again and follow it, a few times."""
        part.reroutes += 1
        if part.reroutes > MAX_REROUTES:
            self._fail(part, error)
            return
        log.warning("%s; looking up %s again", error, part.batch.topic)
        self._require_nursery().start_soon(self._send_after_lookup, part)

    async def _send_after_lookup(self, part: BatchPart) -> None:
        try:
            await self.partitions.refresh(part.batch.topic)
        except NsqError as error:
            self._fail(part, error)
            return
        self.send(part)

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the producer is not running")
        return self._nursery


def moved(error: NsqError) -> bool:
    """The Youzan fork's refusal of a partition that moved, or is moving."""
    return isinstance(error, NsqErrorResponse) and error.code in youzan.REROUTE_ERRORS
