"""The consumer: one topic/channel from many nsqds, in batches, losing nothing.

    async with open_consumer(topic, channel, config, ConsumerOptions(...)) as consumer:
        async for batch in consumer:  # a ReceivedBatch: one read from one nsqd
            ...
            batch.finish()  # or requeue(), message by message if need be; touch()

The package, from the application's side down:

- consumer.py: the Consumer (the queue of batches, RDY and backoff, the -n budget,
  messages past max_attempts, the clean stop) and open_consumer();
- options.py: ConsumerOptions, everything a consumer is asked beyond topic, channel
  and config; Budget, the -n that consumers may share;
- batch.py: ReceivedBatch, what the application answers;
- connections.py: which nsqds are connected (direct addresses redialed, or found
  through nsqlookupd), one Link each;
- link.py: Link, one subscribed connection: its RDY, in-flight count, open batches;
  answers for a closed connection are dropped there;
- subscription.py: how a connection subscribes (upstream's SUB, the Youzan fork's
  partitions, SUB_ORDERED and SUB_ADVANCED).
"""

from nsqtools.consumer.batch import ReceivedBatch
from nsqtools.consumer.consumer import Consumer, open_consumer
from nsqtools.consumer.options import Budget, ConsumerOptions, GiveUpHook

__all__ = [
    "Budget",
    "Consumer",
    "ConsumerOptions",
    "GiveUpHook",
    "ReceivedBatch",
    "open_consumer",
]
