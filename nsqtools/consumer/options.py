"""What a Consumer is asked to do beyond its topic, channel and config: ConsumerOptions
(where to find nsqd, the -n budget, the give-up hook, the Youzan fork's partition and
start position), given once and passed through; and Budget, the -n that one consumer,
or every consumer of a run together, may hand out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqtools.consumer.batch import ReceivedBatch
    from nsqtools.protocol.youzan import StartPosition

# Takes a batch of messages past max_attempts and answers it (FIN once they are kept).
GiveUpHook = Callable[["ReceivedBatch"], None]


class Budget:
    """How many more messages may be handed out (-n). Shared by every consumer of a run
    (and the runtime that gives back what its sinks did not output): each consumer takes
    from it as it hands messages out, and requeues at once what it receives past it."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"a limit must be at least 1, got {total}")
        self.left = total

    def take(self, wanted: int) -> int:
        """Up to `wanted` of what is left, now taken."""
        granted = min(wanted, self.left)
        self.left -= granted
        return granted

    def give_back(self, count: int) -> None:
        """Messages taken and then not output after all: that many more may be."""
        self.left += count

    @property
    def spent(self) -> bool:
        return self.left == 0


@dataclass(frozen=True)
class ConsumerOptions:
    """Where a Consumer finds nsqd (direct TCP addresses or nsqlookupd HTTP addresses,
    one kind), and what else it is asked; see Consumer and open_consumer()."""

    nsqd_tcp_addresses: Sequence[str] = ()
    lookupd_http_addresses: Sequence[str] = ()
    budget: Budget | None = None  # at most this many messages handed out (None: no limit)
    give_up: GiveUpHook | None = None  # messages past max_attempts (None: log, then FIN)
    stop_timeout: float = 30.0  # how long a clean stop may take to requeue what is held
    partition: int | None = None  # the Youzan fork's: only this partition
    start_at: StartPosition | None = None  # the Youzan fork's: where the channel starts
