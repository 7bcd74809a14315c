"""Publishing to one or more nsqds: pipelined PUB, MPUB and DPUB over Conn.

`async with open_producer(addresses) as producer:` runs a Producer for a block. It
dials each nsqd when a publish first needs it; keeps many commands in flight per
connection, written in the order they were made and answered FIFO; and offers a
streaming path (put, flush) that batches messages into MPUBs behind bounded
back-pressure and reports every outcome, message by message, to the caller (on_outcome,
a PublishOutcome each) as well as in counters.

Nothing is refused locally that nsqd may accept (only empty messages, which nsqd never
takes). nsqd's limits are learned from its own refusals: an MPUB refused with E_BAD_BODY
or E_BAD_MESSAGE is cut again under the limit nsqd named and re-sent, so only the
messages nsqd really refuses fail. A connection that fails (nsqd killed, restarting, a
link cut) is redialed with backoff and the commands it did not answer are re-sent in
order; the messages meant for it fail only once it has been down for reconnect_timeout
(or when it was never reachable at all). Meanwhile nothing is resolved, so put() blocks
at its limits and the caller stops reading: nothing piles up without bound.

Modes across nsqds: "all" (every nsqd gets every message, as to_nsq does), or a host
policy from hostpolicy.py ("round-robin", "hostpool", "epsilon-greedy", as nsq_to_nsq).

The Youzan fork: a batch may name its partition (PUB/MPUB with it), carry trace ids
(PUB_TRACE/MPUB_TRACE, whose 30-byte answer comes back in its PublishOutcome) or an
extend header (PUB_EXT, one message). With Partitions (nsqtools.partitions), batches go
to their partition's leader, a partition picked for each batch when none is named (a
topic not looked up yet is looked up first), and a batch whose partition has no writable
leader (moved, moving, busy) is held while Partitions looks the topic up again, with
backoff, for the config's partition_wait.

The modules, from the caller down:
- producer.py: the Producer (publish*, put*/flush) and open_producer();
- queues.py: what put() queued, not yet batched;
- dispatch.py: which nsqd gets each batch and what each answer means for it;
- leaders.py: the fork's routing to partitions' leaders;
- node.py: one nsqd's connection, redialed, and the commands waiting for it;
- outcomes.py: PublishOutcome, the batches and the ledger of outcomes;
- encoding.py: cutting MPUBs and building the commands (sans-IO).
"""

from nsqtools.hostpolicy import MODES
from nsqtools.producer.encoding import ForkPublish, cut_points
from nsqtools.producer.outcomes import OutcomeHandler, PublishOutcome
from nsqtools.producer.producer import (
    PUT_MANY_CHUNK,
    Producer,
    ProducerOptions,
    open_producer,
)

__all__ = [
    "MODES",
    "PUT_MANY_CHUNK",
    "ForkPublish",
    "OutcomeHandler",
    "Producer",
    "ProducerOptions",
    "PublishOutcome",
    "cut_points",
    "open_producer",
]
