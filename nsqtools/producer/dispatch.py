"""Getting each batch acknowledged: which nsqd it goes to (every one in "all" mode, the
host policy's pick in the others, its partition's leader on the Youzan fork), and what
each answer means for it: done; cut again under the limit nsqd named; tried again, on
another nsqd or on the same one once redialed, after a failed connection; held and
rerouted when its partition moved, is moving or is busy; sent again after a backoff when
the fork's nsqd asks to slow down; or failed. A batch is resolved in the ledger once
every part of it has its outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import ConnectError, NsqError, NsqErrorResponse
from nsqtools.hostpolicy import HostPolicy
from nsqtools.partitions import Partitions, retry_delay
from nsqtools.producer.encoding import SIZE_ERRORS, cut_points
from nsqtools.producer.leaders import LeaderRouting, refused_for_partition
from nsqtools.producer.node import Node, is_transient
from nsqtools.producer.outcomes import BatchPart, OutcomeLedger, PublishBatch

log = logging.getLogger("nsqtools.producer")

# The Youzan fork's nsqd asking its publishers to slow down.
BACK_PRESSURE = "E_PUB_TOO_MUCH_WAITING"


class Dispatcher:
    """Sends batches to the nsqds at `addresses` (or, with the fork's `partitions`, to
    partitions' leaders) and settles them in `ledger`. max_message_size and max_body_size are where
    batches are cut, lowered to the smallest limits any nsqd named."""

    def __init__(
        self,
        addresses: Sequence[str],
        config: ClientConfig,
        policy: HostPolicy | None,
        reconnect_timeout: float,
        ledger: OutcomeLedger,
        *,
        max_message_size: int,
        max_body_size: int,
        partitions: Partitions | None = None,
    ) -> None:
        self.addresses = addresses
        self.max_message_size = max_message_size
        self.max_body_size = max_body_size
        self.reconnect_timeout = reconnect_timeout
        self.leaders = (
            None
            if partitions is None
            else LeaderRouting(partitions, config, reconnect_timeout, self.on_part, self.fail)
        )
        self._policy = policy
        self._ledger = ledger
        self._config = config
        self._nursery: trio.Nursery | None = None
        self._nodes = [
            Node(index, address, config, reconnect_timeout, self.on_part)
            for index, address in enumerate(addresses)
        ]

    def start(self, nursery: trio.Nursery) -> None:
        """Run the nodes (and the leaders, dialed later) in nursery."""
        self._nursery = nursery
        for node in self._nodes:
            nursery.start_soon(node.run, nursery)
        if self.leaders is not None:
            self.leaders.start(nursery)

    def send(self, batch: PublishBatch) -> None:
        self._ledger.add(batch)
        if self.leaders is not None:
            batch.awaiting = 1
            self.leaders.send(BatchPart(batch))
        elif self._policy is None:
            batch.awaiting = len(self._nodes)
            for node in self._nodes:
                node.send(BatchPart(batch))
        else:
            batch.awaiting = 1
            self._nodes[self._policy.pick(trio.current_time())].send(BatchPart(batch))

    def on_part(
        self, node: Node, part: BatchPart, error: NsqError | None, response_time: float
    ) -> None:
        """A node's answer (or failure) for a part it was sent."""
        if part.batch.resolved:
            return  # abandoned meanwhile
        now = trio.current_time()
        if error is None:
            if self._policy is not None or self.leaders is not None:
                part.batch.acknowledged_by = node.address
            if self._policy is not None:
                self._policy.mark_success(node.index, now, response_time)
            self._settle(part)
        elif self.leaders is not None and refused_for_partition(error):
            assert isinstance(error, NsqErrorResponse)
            self.leaders.refused(part, error)
        elif isinstance(error, NsqErrorResponse) and error.code == BACK_PRESSURE:
            self._slow_down(node, part, error, now)
        elif isinstance(error, NsqErrorResponse) and error.code in SIZE_ERRORS:
            self._cut_again(node, part, error)
        elif is_transient(error):
            self._try_again(node, part, error, now)
        else:
            self.fail(part, error)

    def _slow_down(self, node: Node, part: BatchPart, error: NsqError, now: float) -> None:
        """The fork's nsqd has too many publishes waiting ("treat it as retryable, not
        fatal"): send the part to it again after a backoff, for up to partition_wait."""
        if part.held_since is None:
            part.held_since = now
        if now - part.held_since >= self._config.partition_wait:
            waited = format_duration(self._config.partition_wait)
            self.fail(part, NsqError(f"{error}; waited {waited}"))
            return
        part.holds += 1
        assert self._nursery is not None, "the dispatcher is not running"
        self._nursery.start_soon(self._send_again_after, node, part, retry_delay(part.holds))

    @staticmethod
    async def _send_again_after(node: Node, part: BatchPart, delay: float) -> None:
        await trio.sleep(delay)
        node.send_again(part)

    def fail(self, part: BatchPart, error: NsqError) -> None:
        part.batch.fail(part.start, part.end, error)
        self._settle(part)

    def _settle(self, part: BatchPart) -> None:
        batch = part.batch
        batch.awaiting -= 1
        if not batch.awaiting:
            self._ledger.resolve(batch)

    def _cut_again(self, node: Node, part: BatchPart, error: NsqErrorResponse) -> None:
        """nsqd refused the part for its size: re-send it in pieces under the limit it
        named; a message over its message limit fails, alone."""
        node.learn_limit(part, error)
        self._learn_limits(node)
        if part.count == 1:
            self.fail(part, error)
            return
        sizes = part.sizes()
        body_limit = node.limits.max_body_size or self.max_body_size
        ranges = cut_points(sizes, body_limit, node.limits.max_message_size)
        if len(ranges) == 1:  # nothing learned that splits it: halve it
            middle = part.count // 2
            ranges = [(0, middle), (middle, part.count)]
        log.info("%s; sending its %d messages again in %d parts", error, part.count, len(ranges))
        part.batch.awaiting += len(ranges) - 1
        for start, end in ranges:
            node.send_again(BatchPart(part.batch, part.start + start, part.start + end))

    def _learn_limits(self, node: Node) -> None:
        """Cut later batches under the smallest limits any nsqd named."""
        if node.limits.max_body_size is not None:
            self.max_body_size = min(self.max_body_size, node.limits.max_body_size)
        if node.limits.max_message_size is not None:
            self.max_message_size = min(self.max_message_size, node.limits.max_message_size)

    def _try_again(self, node: Node, part: BatchPart, error: NsqError, now: float) -> None:
        """A connection failed under the part: another nsqd (host policies) or the same
        one again once redialed, until it has been down for reconnect_timeout."""
        node.mark_down(now, error)
        if self._policy is not None:
            self._policy.mark_failed(node.index, now)
            part.tried.append(node.index)
            other = self._policy.pick_another(now, part.tried)
            if other is not None:
                log.warning("%s; retrying on %s", error, self.addresses[other])
                self._nodes[other].send_again(part)
                return
        if not node.ever_connected:
            self.fail(part, error)  # never reachable: a wrong address, not an outage
            return
        if node.given_up(now):
            waited = format_duration(self.reconnect_timeout)
            self.fail(part, ConnectError(f"{error} (down for {waited}: reconnect_timeout)"))
            return
        if self._policy is not None:
            part.tried.clear()
            node = self._nodes[self._policy.pick(now)]
        node.send_again(part)
