"""How a connection subscribes: upstream's SUB, or the Youzan fork's variants.

On the fork there is one connection per (nsqd, partition): SUB with the partition,
SUB_ORDERED for an ordered topic (one message in flight per partition: RDY 1), or
SUB_ADVANCED when a start position was asked (its messages carry their queue offsets);
messages are read as ForkMessages (the layout). A start position is set over the
leader's HTTP API when nsqlookupd gave its address (positions.py), then SUB_ADVANCED or
SUB_ORDERED names the partition alone; straight to an nsqd, SUB_ADVANCED carries it,
and the fork may serve another partition (the link checks every message's). An extend
topic's E_SUB_EXTEND_NEED and an ordered topic's E_SUB_ORDER_IS_MUST (partition given)
are answered by subscribing as asked (adapt).
"""

from __future__ import annotations

from dataclasses import dataclass

from nsqtools.consumer.positions import StartPositionError
from nsqtools.errors import NsqErrorResponse
from nsqtools.protocol import commands as cmd
from nsqtools.protocol import youzan


@dataclass
class Subscription:
    """How a connection subscribes: upstream's SUB, or the Youzan fork's variants."""

    partition: int | None = None
    fork: bool = False  # the Youzan fork's nsqd: messages are read as ForkMessages
    ordered: bool = False  # SUB_ORDERED: one message in flight
    extend: bool = False  # identify extend_support; messages carry an extend header
    start: youzan.StartPosition | None = None  # where the channel starts; None once set
    advanced: bool = False  # SUB_ADVANCED (set when a start position is given)
    http_address: str | None = None  # the fork nsqd's HTTP API, to set `start` on

    def __post_init__(self) -> None:
        self.advanced = self.advanced or self.start is not None

    def command(self, topic: str, channel: str) -> bytes:
        partition = self.partition
        if partition is None:
            return cmd.sub(topic, channel, None)
        if self.ordered:
            if self.start is not None:
                raise StartPositionError(
                    f"cannot start ordered topic {topic} at {self.start}: SUB_ORDERED takes "
                    "no start position, and the nsqd HTTP API that sets one is found "
                    "through nsqlookupd"
                )
            return youzan.sub_ordered(topic, channel, partition)
        if self.advanced:
            return youzan.sub_advanced(topic, channel, partition, self.start)
        return cmd.sub(topic, channel, partition)

    def layout(self) -> youzan.MessageLayout | None:
        if not self.fork:
            return None
        detail = self.partition is not None and (self.ordered or self.advanced)
        return youzan.MessageLayout(self.partition, self.extend, detail)

    def adapt(self, error: NsqErrorResponse) -> bool:
        """Subscribe as the fork's refusal asks, if it can be; True when changed."""
        if error.code == "E_SUB_EXTEND_NEED" and not self.extend:
            self.extend = True
        elif error.code == "E_SUB_EXTEND_FORBIDDON" and self.extend:
            self.extend = False
        elif error.code == "E_SUB_ORDER_IS_MUST" and self.partition is not None:
            self.ordered = True
        else:
            return False
        return True
