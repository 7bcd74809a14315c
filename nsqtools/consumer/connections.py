"""Connections: which nsqds a consumer is connected to, and keeping it so.

Direct nsqd addresses are dialed at start (the first attempt must succeed) and redialed
with exponential backoff, also when a connection ends soon after it was made; nsqds
found through nsqlookupd are connected while a poll lists them. On the Youzan fork
(found from nsqlookupd's partitions and meta, or from nsqd's version) there is one
connection per (nsqd, partition); a refusal that names a moved partition drops that
connection until the next lookup. Each connection, once subscribed, is a Link; a
configuration problem (AUTH, TLS, a refused SUB or start position) ends the consumer
through on_fatal. A start position is set once per partition (positions.py over the
leader's HTTP API, or SUB_ADVANCED straight to an nsqd): a reconnect, or a new leader,
goes on from where the channel is.

For a consumer that stops at the end (expected_links), Connections knows which nsqds
there are to read: every direct address, or those of the last lookup that a lookupd
answered (none before it); and which of them could not be reached (unreachable: the
last dial failed), until they are.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

from nsqtools.addresses import address_key
from nsqtools.config import ClientConfig
from nsqtools.consumer.link import Link, LinkHooks
from nsqtools.consumer.options import ConsumerOptions
from nsqtools.consumer.positions import StartPositionError, start_channel_at
from nsqtools.consumer.subscription import Subscription
from nsqtools.durations import format_duration
from nsqtools.errors import AuthError, NsqError, NsqErrorResponse, TlsError
from nsqtools.protocol import ProtocolError, youzan
from nsqtools.transport import Conn, open_connection

if TYPE_CHECKING:
    from nsqtools.httpapi.lookupd import TopicLookup

log = logging.getLogger("nsqtools.consumer")

# How often at most a consumer through nsqlookupd says that no nsqd has its topic.
ABSENCE_NOTE_EVERY = 60.0

# Direct nsqd addresses are redialed after 0.5s, 1s, 2s, ... up to this; the delay starts
# again at 0.5s once a connection has lasted STEADY_CONNECTION.
MAX_RECONNECT_DELAY = 30.0
STEADY_CONNECTION = 10.0
# Configuration problems: retrying cannot fix them, so they end the consumer.
FATAL_ERRORS = (AuthError, TlsError, NsqErrorResponse, StartPositionError)


class Connections:
    """A consumer's links, one per nsqd (per partition of it, on the Youzan fork)."""

    def __init__(
        self,
        topic: str,
        channel: str,
        config: ClientConfig,
        options: ConsumerOptions,
        hooks: LinkHooks,
        on_fatal: Callable[[BaseException], None],
        rng: random.Random,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.config = config
        self.nsqd_tcp_addresses = _distinct(options.nsqd_tcp_addresses)
        self.lookupd_http_addresses = list(options.lookupd_http_addresses)
        self.partition = options.partition
        self.start_at = options.start_at
        self.hooks = hooks
        self.on_fatal = on_fatal
        self.rng = rng
        self.stopping = False  # no more dialing: stop_dialing()
        # By each nsqd's address_key (and partition, on the fork):
        self._subscriptions: dict[str, Subscription] = {}  # outlive their connections
        self._links: dict[str, Link] = {}  # the subscribed connection, while there is one
        self._serving: set[str] = set()  # discovered nsqds with a connection task
        self._started: set[int] = set()  # the fork's partitions whose start position is set
        self._lookup_soon = trio.Event()  # set to poll nsqlookupd at once
        # The nsqds to read (keys): the direct ones, or the last lookup's (None before).
        self._expected: set[str] | None = None
        self.unreachable: dict[str, str] = {}  # key -> why its last dial failed
        self._nursery: trio.Nursery | None = None

    def live(self) -> list[Link]:
        return [link for link in self._links.values() if link.live]

    def expected_links(self) -> list[Link] | None:
        """The live link of every nsqd there is to read, or None while one has none (or,
        through nsqlookupd, before a lookup was answered)."""
        if self._expected is None:
            return None
        links = [self._links.get(key) for key in self._expected]
        if not all(link is not None and link.live for link in links):
            return None
        return [link for link in links if link is not None]

    def stop_dialing(self) -> None:
        """Redial nothing more and stop polling nsqlookupd (the consumer is stopping)."""
        self.stopping = True

    async def start(self, nursery: trio.Nursery) -> None:
        """Connect to every direct nsqd (failing on the first that cannot be reached),
        or start polling nsqlookupd."""
        self._nursery = nursery
        if self.nsqd_tcp_addresses:
            self._expected = {self._node(address) for address in self.nsqd_tcp_addresses}
        for address in self.nsqd_tcp_addresses:
            await nursery.start(self._serve_direct, address)
        if self.lookupd_http_addresses:
            nursery.start_soon(self._discover)

    def _node(self, address: str, subscription: Subscription | None = None) -> str:
        """The key of this nsqd (and partition); its subscription is `subscription` if new."""
        subscription = subscription or Subscription(self.partition, start=self.start_at)
        key = address_key(address)
        if subscription.fork and subscription.partition is not None:
            key = f"{key}/{subscription.partition}"
        self._subscriptions.setdefault(key, subscription)
        return key

    async def _serve_direct(
        self, address: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep a connection to a given nsqd, redialing with exponential backoff.

        The first attempt must succeed: a refused address at start is an error. A
        connection that ends within STEADY_CONNECTION of its dial counts as a failed
        one: an nsqd that takes SUB and then breaks the protocol is not redialed at
        full speed forever."""
        key = self._node(address)
        await self._connect_and_serve(address, key, task_status)
        failures = 0  # redials in a row that failed, or whose connection did not last
        while not self.stopping:
            delay = min(0.5 * 2**failures, MAX_RECONNECT_DELAY)
            delay *= 1 + self.rng.random() * 0.2
            log.info("%s: reconnecting in %.1fs", address, delay)
            await trio.sleep(delay)
            dialed_at = trio.current_time()
            try:
                await self._connect_and_serve(address, key, trio.TASK_STATUS_IGNORED)
            except (NsqError, ProtocolError, OSError) as error:
                log.warning("%s: %s", address, error)
                self._note_unreachable(address, key, error)
                failures += 1
                continue
            steady = trio.current_time() - dialed_at >= STEADY_CONNECTION
            failures = 0 if steady else failures + 1

    async def _serve_discovered(self, address: str, key: str) -> None:
        """One connection to a discovered nsqd; the next poll reconnects it if listed."""
        self._serving.add(key)
        try:
            await self._connect_and_serve(address, key, trio.TASK_STATUS_IGNORED, True)
        except (NsqError, ProtocolError, OSError) as error:
            log.warning("%s: %s", address, error)
            self._note_unreachable(address, key, error)
        finally:
            self._serving.discard(key)

    def _note_unreachable(self, address: str, key: str, error: BaseException) -> None:
        reason = str(error)
        self.unreachable[key] = reason if address in reason else f"{address}: {reason}"

    async def _connect_and_serve(
        self, address: str, key: str, task_status: trio.TaskStatus[None], discovered: bool = False
    ) -> None:
        """Connect, SUB, then serve until the connection ends; fatal errors end the consumer.

        On the Youzan fork, a refusal that a different SUB answers is answered so at
        once; one that names a moved partition ends only this link (discovered ones)."""
        subscription = self._subscriptions[key]
        while True:
            link = Link(address, subscription, self.config, self.hooks)
            try:
                await self._serve(link, key, task_status)
                return
            except (NsqErrorResponse, StartPositionError) as error:
                if isinstance(error, NsqErrorResponse) and subscription.adapt(error):
                    log.info("%s: %s; subscribing again as asked", address, error)
                    continue
                if discovered and error.code in youzan.REROUTE_ERRORS:
                    log.warning("%s; looking the topic up again", error)
                    self._lookup_soon.set()
                    return
                self.on_fatal(error)
                raise
            except FATAL_ERRORS as error:
                self.on_fatal(error)
                raise
            finally:
                # nsqd requeues (after msg_timeout) whatever was in flight on it.
                if self._links.get(key) is link:
                    del self._links[key]
                self.hooks.rebalance()

    async def _serve(self, link: Link, key: str, task_status: trio.TaskStatus[None]) -> None:
        subscription = link.subscription
        async with open_connection(
            link.address,
            self.config,
            on_messages=link.on_messages,
            on_error=link.on_error,
            extend_support=subscription.extend,
        ) as conn:
            _recognise(subscription, conn)
            if subscription.start is not None and subscription.http_address is not None:
                await self._start_channel(subscription, subscription.http_address)
            await conn.request(subscription.command(self.topic, self.channel))
            link.attach(conn)
            self._links[key] = link
            self.unreachable.pop(key, None)
            self._started_at(subscription)  # SUB_ADVANCED's, if it carried one
            self.hooks.rebalance()
            task_status.started()
            where = "" if subscription.partition is None else f" partition {subscription.partition}"
            log.info("%s: subscribed to %s/%s%s", link.address, self.topic, self.channel, where)
            await conn.wait_closed()
            if conn.error is not None and not self.stopping:
                log.warning("%s: connection lost: %s", link.address, conn.error)

    async def _start_channel(self, subscription: Subscription, http_address: str) -> None:
        """Set the start position over the partition leader's HTTP API: SUB_ADVANCED would
        apply it to a partition of the nsqd's choosing."""
        assert subscription.start is not None and subscription.partition is not None
        await start_channel_at(
            http_address,
            self.topic,
            self.channel,
            subscription.partition,
            subscription.start,
            self.config.lookupd_poll_timeout,
        )
        self._started_at(subscription)

    def _started_at(self, subscription: Subscription) -> None:
        """The subscription's start position is set: never again, for its partition."""
        if subscription.start is not None and subscription.partition is not None:
            self._started.add(subscription.partition)
        subscription.start = None

    async def _discover(self) -> None:
        # Imported here: httpx (and the rich it pulls in) costs ~100ms at start-up, and
        # consumers of direct nsqd addresses never need it.
        from nsqtools import discovery
        from nsqtools.httpapi.clients import async_client

        config = self.config
        async with async_client(
            timeout=config.lookupd_poll_timeout, headers=config.lookupd_headers()
        ) as client:
            asked_for_lookupds = False
            absence_noted_at: float | None = None
            while not self.stopping:
                found, errors = await discovery.lookup_topic_all(
                    client, self.lookupd_http_addresses, self.topic
                )
                for error in errors:
                    log.warning("%s", error)
                answered = len(errors) < len(self.lookupd_http_addresses)
                if answered and not (found.producers or found.partitions):
                    now = trio.current_time()
                    if absence_noted_at is None or now - absence_noted_at >= ABSENCE_NOTE_EVERY:
                        absence_noted_at = now
                        self._note_absence()
                if found.is_fork and not asked_for_lookupds:
                    asked_for_lookupds = True
                    more = await discovery.more_lookupds(client, self.lookupd_http_addresses)
                    self.lookupd_http_addresses.extend(more)
                found_keys = set()
                for address, subscription in self._subscriptions_found(found):
                    key = self._node(address, subscription)
                    found_keys.add(key)
                    if key not in self._serving and self._nursery is not None:
                        self._nursery.start_soon(self._serve_discovered, address, key)
                if answered:
                    self._expected = found_keys
                    for gone in set(self.unreachable) - found_keys:
                        del self.unreachable[gone]
                jitter = self.rng.random() * config.lookupd_poll_jitter
                self._lookup_soon = trio.Event()
                with trio.move_on_after(config.lookupd_poll_interval * (1 + jitter)):
                    await self._lookup_soon.wait()

    def _note_absence(self) -> None:
        """Say that no nsqd has the topic: a consumer through nsqlookupd otherwise waits
        in silence, as for a mistyped topic (Go logs TOPIC_NOT_FOUND each poll)."""
        log.warning(
            "topic %s: no nsqd has it (nsqlookupd lists none); looking again every %s",
            self.topic,
            format_duration(self.config.lookupd_poll_interval),
        )

    def _subscriptions_found(self, found: TopicLookup) -> list[tuple[str, Subscription]]:
        """Where to subscribe: each producer, or on the Youzan fork each partition's
        leader (only the partition asked for, if one was)."""
        if not found.is_fork:
            if found.producers and (self.partition is not None or self.start_at is not None):
                self.on_fatal(NsqError("partitions and start positions need the Youzan fork"))
            return [(node.tcp_address, Subscription()) for node in found.producers]
        meta = found.meta
        return [
            (
                node.tcp_address,
                Subscription(
                    partition,
                    fork=True,
                    ordered=meta is not None and meta.ordered,
                    extend=meta is not None and meta.extend_support,
                    start=None if partition in self._started else self.start_at,
                    advanced=self.start_at is not None,
                    http_address=node.http_address,
                ),
            )
            for partition, node in found.partitions.items()
            if self.partition in (None, partition)
        ]


def _recognise(subscription: Subscription, conn: Conn) -> None:
    """Whether nsqd is the Youzan fork, from its version; the fork's options need it."""
    subscription.fork = youzan.is_fork_version(conn.identify.version)
    if subscription.fork:
        return
    if subscription.partition is not None or subscription.start is not None:
        version = conn.identify.version or "an unknown version"
        raise NsqError(
            f"{conn.address} is NSQ {version}, not the Youzan fork: "
            "partitions and start positions need the fork"
        )


def _distinct(addresses: Sequence[str]) -> list[str]:
    """Each nsqd once, as first spelled: two connections to one nsqd would be one node
    here, each taking the other's place."""
    chosen: dict[str, str] = {}
    for address in addresses:
        chosen.setdefault(address_key(address), address)
    return list(chosen.values())
