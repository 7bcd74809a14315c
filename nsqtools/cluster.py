"""The cluster as the inspection and admin commands see it: the nsqds to ask, and their
/stats, polled at once.

The nsqds are those given (--nsqd-http-address), else those the lookupds know
(--lookupd-http-address): every registered nsqd, or a topic's producers. Every node is
asked concurrently; one that fails never hides the others: its failure is kept beside
the answers, for the caller to show (nsq_stat's table, `nsq topics`) or to make fatal
(Go's nsq_stat does).

    cluster = Cluster(lookupd_http_addresses=("127.0.0.1:4161",))
    addresses, lookupd_failures = await find_nsqds(client, cluster, topic="events")
    for node in await poll_stats(client, addresses, topic="events"):
        print(node.address, node.stats if node.error is None else node.error)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from nsqtools import discovery
from nsqtools.httpapi import HttpApiError, nsqd
from nsqtools.httpapi.nsqd import NsqdStats


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
    if cluster.nsqd_http_addresses:
        return list(dict.fromkeys(cluster.nsqd_http_addresses)), []
    lookupds = cluster.lookupd_http_addresses
    if topic is None:
        registered, failures = await discovery.nodes_all(client, lookupds)
        return [node.http_address for node in registered], failures
    producers, failures = await discovery.lookup_all(client, lookupds, topic)
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
    calls = [
        nsqd.stats(address, topic, channel, include_clients=include_clients)
        for address in addresses
    ]
    results = await discovery.send_each(client, calls)
    return [
        NodeStats(address, None, result)
        if isinstance(result, HttpApiError)
        else NodeStats(address, result, None)
        for address, result in zip(addresses, results, strict=True)
    ]
