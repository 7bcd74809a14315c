"""Where a message goes on the Youzan fork: a topic's partitions, for publishing.

The fork splits a topic into partitions, each led by one nsqd, and every PUB names
its partition. Partitions knows, per topic, each partition's leader and the topic's
meta, from nsqlookupd asked for writing (`access=w&metainfo=true`; the other lookupds
of the cluster, from /listlookup, are asked too), and refreshes them when an nsqd
refuses a publish to one. It picks a partition for each batch: the one asked for; on an
ordered topic the one a shard key hashes to; otherwise the next in turn (round-robin),
so every partition gets its share. The turns start at a partition of their own for each
Partitions in a process, from a random one: publishers started together do not all load
partition 0 first.

The shard key's partition is CRC-32 (IEEE, as zlib and Go's hash/crc32 compute it) of
the key's bytes modulo the topic's partition count: the same key always goes to the
same partition while the count stays, whatever process publishes it.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from nsqtools.config import ClientConfig
from nsqtools.errors import NsqError
from nsqtools.httpapi.lookupd import TopicLookup

if TYPE_CHECKING:
    import httpx


class PartitionError(NsqError):
    """A topic's partitions cannot be published to (none writable, not the fork, ...)."""


class NoWritablePartition(PartitionError):
    """nsqlookupd lists no writable partition of the topic: none, or not the one wanted.
    A leader move looks so for a while ("partitions:{}"): look again later."""


# While a topic has no writable partition, it is looked up again at once, then after
# 0.1 s, 0.2 s, ... 1 s: "a publisher must wait and look up again for a few seconds, not
# give up after a handful of back-to-back lookups".
FIRST_LOOKUP_DELAY = 0.1
MAX_LOOKUP_DELAY = 1.0

# Where each Partitions' round robin starts: the next of these, modulo the partition count.
_FIRST_TURNS = itertools.count(random.randrange(1 << 16))


def retry_delay(tries: int) -> float:
    """How long to wait before trying again after `tries` tries: none after the first,
    then FIRST_LOOKUP_DELAY, doubling up to MAX_LOOKUP_DELAY."""
    if not tries:
        return 0.0
    return min(FIRST_LOOKUP_DELAY * 2.0 ** (tries - 1), MAX_LOOKUP_DELAY)


def shard_partition(key: bytes, partition_count: int) -> int:
    """The partition a shard key goes to: CRC-32 of the key modulo the count."""
    return zlib.crc32(key) % partition_count


class Partitions:
    """The partitions of the topics published to, from nsqlookupd. Use as
    `async with Partitions(lookupds, config) as partitions:`."""

    def __init__(self, lookupd_http_addresses: Sequence[str], config: ClientConfig) -> None:
        if not lookupd_http_addresses:
            raise ValueError("no nsqlookupd address given")
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.config = config
        self._topics: dict[str, TopicLookup] = {}
        self._turns: dict[str, int] = {}  # the round robin's next turn, by topic
        self._looked_up_at: dict[str, float] = {}  # trio.current_time(), by topic
        self._first_turn = next(_FIRST_TURNS)
        self._refreshing: dict[str, trio.Event] = {}
        self._client: httpx.AsyncClient | None = None
        self._asked_for_lookupds = False  # the fork's /listlookup, asked once

    async def __aenter__(self) -> Partitions:
        from nsqtools.httpapi.clients import async_client

        self._client = async_client(
            timeout=self.config.lookupd_poll_timeout, headers=self.config.lookupd_headers()
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def refresh(self, topic: str) -> TopicLookup:
        """Look the topic up again (callers at once share one lookup). Raises
        PartitionError when no lookupd answers or the topic is not the fork's;
        NoWritablePartition when it has no writable partition now."""
        if topic in self._refreshing:
            await self._refreshing[topic].wait()
            return self.lookup(topic)
        done = self._refreshing[topic] = trio.Event()
        try:
            self._topics[topic] = await self._ask(topic)
            self._looked_up_at[topic] = trio.current_time()
            self._turns.setdefault(topic, self._first_turn)
        finally:
            del self._refreshing[topic]
            done.set()
        return self._topics[topic]

    async def refresh_until_writable(self, topic: str) -> TopicLookup:
        """refresh(), looking again with backoff while the topic has no writable
        partition (during a leader move), for config.partition_wait at most."""
        deadline = trio.current_time() + self.config.partition_wait
        tries = 0
        while True:
            try:
                return await self.refresh(topic)
            except NoWritablePartition:
                tries += 1
                if trio.current_time() + retry_delay(tries) > deadline:
                    raise
            await trio.sleep(retry_delay(tries))

    async def _ask(self, topic: str) -> TopicLookup:
        from nsqtools import discovery

        assert self._client is not None, "use Partitions in `async with`"
        found, errors = await discovery.lookup_topic_all(
            self._client, self.lookupd_http_addresses, topic, access="w"
        )
        if found.partitions:
            if not self._asked_for_lookupds:
                self._asked_for_lookupds = True
                more = await discovery.more_lookupds(self._client, self.lookupd_http_addresses)
                self.lookupd_http_addresses.extend(more)
            return found
        if errors:
            raise PartitionError(f"cannot look up topic {topic}: {errors[0]}")
        if found.producers:
            raise PartitionError(f"topic {topic} is not on the Youzan fork: it has no partitions")
        raise NoWritablePartition(
            f"topic {topic} has no writable partition now (nsqlookupd lists none)"
        )

    def knows(self, topic: str) -> bool:
        """True once the topic was looked up."""
        return topic in self._topics

    def lookup(self, topic: str) -> TopicLookup:
        """What the last refresh found (refresh first)."""
        found = self._topics.get(topic)
        if found is None:
            raise PartitionError(f"topic {topic} was not looked up")
        return found

    def is_ordered(self, topic: str) -> bool:
        meta = self.lookup(topic).meta
        return meta is not None and meta.ordered

    def partition_count(self, topic: str) -> int:
        found = self.lookup(topic)
        if found.meta is not None:
            return found.meta.partition_num
        return max(found.partitions) + 1

    def leader(self, topic: str, partition: int) -> str | None:
        """The TCP address of the nsqd leading the partition, if nsqlookupd named one."""
        node = self.lookup(topic).partitions.get(partition)
        return None if node is None else node.tcp_address

    def due_for_another_lookup(self, topic: str) -> bool:
        """True, once per MAX_LOOKUP_DELAY, while the last lookup listed fewer writable
        partitions than the topic has (one was moving): else the round robin would
        leave the missing one out until some publish is refused."""
        found = self.lookup(topic)
        if found.meta is None or len(found.partitions) >= found.meta.partition_num:
            return False
        now = trio.current_time()
        if topic in self._refreshing or now - self._looked_up_at[topic] < MAX_LOOKUP_DELAY:
            return False
        self._looked_up_at[topic] = now  # one lookup at a time, not one per batch
        return True

    def next_partition(self, topic: str) -> int:
        """The writable partitions in turn, for a topic whose messages need no order."""
        writable = sorted(self.lookup(topic).partitions)
        turn = self._turns[topic]
        self._turns[topic] = turn + 1
        return writable[turn % len(writable)]

    def for_key(self, topic: str, key: bytes) -> int:
        return shard_partition(key, self.partition_count(topic))
