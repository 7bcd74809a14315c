"""The cluster as the inspection and admin commands see it: the nsqds to ask, and their
/stats, polled at once.

The nsqds are those given (--nsqd-http-address), else those the lookupds know
(--lookupd-http-address): every registered nsqd, or a topic's producers. Every node is
asked concurrently; one that fails never hides the others: its failure is kept beside
the answers, for the caller to show (nsq_stat's table, `nsq topics`) or to make fatal
(Go's nsq_stat does).

Both are written once as plans (find_nsqds_plan, poll_stats_plan: nsqtools.httpapi.plans),
run on trio by find_nsqds and poll_stats, or on threads by a blocking program
(nsq_stat: httpapi.blocking.BlockingClient.run), which then loads neither trio nor httpx.

    cluster = Cluster(lookupd_http_addresses=("127.0.0.1:4161",))
    addresses, lookupd_failures = await find_nsqds(client, cluster, topic="events")
    for node in await poll_stats(client, addresses, topic="events"):
        print(node.address, node.stats if node.error is None else node.error)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqtools import discovery
from nsqtools.httpapi import HttpApiError, nsqd
from nsqtools.httpapi.nsqd import NsqdStats
from nsqtools.httpapi.plans import Plan, each

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class Cluster:
    """Where to find the nsqds: their HTTP addresses, or the lookupds that know them."""

    nsqd_http_addresses: tuple[str, ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeStats:
    """One nsqd's /stats, or why it could not be had."""

    address: str
    stats: NsqdStats | None
    error: HttpApiError | None


async def find_nsqds(
    client: httpx.AsyncClient, cluster: Cluster, topic: str | None = None
) -> tuple[list[str], list[HttpApiError]]:
    """The HTTP addresses of the nsqds to ask, and the lookupds that could not be asked.

    The given nsqds, each once; else every nsqd a lookupd knows (with `topic`: those
    producing it), each once, in the order of the lookupds."""
    return await discovery.run_plan(client, find_nsqds_plan(cluster, topic))


def find_nsqds_plan(
    cluster: Cluster, topic: str | None = None
) -> Plan[tuple[list[str], list[HttpApiError]]]:
    """find_nsqds() as a plan, for any runner."""
    if cluster.nsqd_http_addresses:
        return list(dict.fromkeys(cluster.nsqd_http_addresses)), []
    lookupds = cluster.lookupd_http_addresses
    if topic is None:
        registered, failures = yield from discovery.nodes_all_plan(lookupds)
        return [node.http_address for node in registered], failures
    producers, failures = yield from discovery.lookup_all_plan(lookupds, topic)
    return [node.http_address for node in producers], failures


async def poll_stats(
    client: httpx.AsyncClient,
    addresses: Sequence[str],
    topic: str = "",
    channel: str = "",
    *,
    include_clients: bool = False,
) -> list[NodeStats]:
    """Every nsqd's /stats (filtered to the topic, and channel, when given), asked at
    once; in the order of `addresses`."""
    plan = poll_stats_plan(addresses, topic, channel, include_clients=include_clients)
    return await discovery.run_plan(client, plan)


def poll_stats_plan(
    addresses: Sequence[str], topic: str = "", channel: str = "", *, include_clients: bool = False
) -> Plan[list[NodeStats]]:
    """poll_stats() as a plan, for any runner."""
    calls = [
        nsqd.stats(address, topic, channel, include_clients=include_clients)
        for address in addresses
    ]
    results = yield from each(calls)
    return [
        NodeStats(address, None, result)
        if isinstance(result, HttpApiError)
        else NodeStats(address, result, None)
        for address, result in zip(addresses, results, strict=True)
    ]
