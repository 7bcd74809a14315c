"""How a connection subscribes: upstream's SUB, or the Youzan fork's variants.

On the fork there is one connection per (nsqd, partition): SUB with the partition,
SUB_ORDERED for an ordered topic (one message in flight per partition: RDY 1), or
SUB_ADVANCED from a start position; messages are read as ForkMessages (the layout). An
extend topic's E_SUB_EXTEND_NEED and an ordered topic's E_SUB_ORDER_IS_MUST (partition
given) are answered by subscribing as asked (adapt).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    start: youzan.StartPosition | None = None  # SUB_ADVANCED from here

    def command(self, topic: str, channel: str) -> bytes:
        if self.ordered and self.partition is not None:
            return youzan.sub_ordered(topic, channel, self.partition)
        if self.start is not None and self.partition is not None:
            return youzan.sub_advanced(topic, channel, self.partition, self.start)
        return cmd.sub(topic, channel, self.partition)

    def layout(self) -> youzan.MessageLayout | None:
        if not self.fork:
            return None
        detail = self.partition is not None and (self.ordered or self.start is not None)
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
