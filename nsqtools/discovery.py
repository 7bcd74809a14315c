"""Discovery policy: asking several nsqlookupds at once and merging what they say.

The requests and the reading of answers belong to nsqtools.httpapi.lookupd; this module
owns what discovery does with them: every lookupd is asked concurrently, one being down
or answering junk never hides the others (its failure is returned beside the answers),
and the producers of a topic are merged by TCP address in the order of the lookupds.

What several lookupds are asked, and how their answers merge, is written once as plans
(nsqtools.httpapi.plans: lookup_all_plan, nodes_all_plan): the functions here run them
on trio (run_plan), a blocking program on threads (httpapi.blocking); trio and httpx
are imported where used, so that such a program loads neither.

Timeouts, TLS verification and connection limits come from the caller's
httpx.AsyncClient; a timeout is reported as lookupd_poll_timeout, the setting the
consumer makes it from. Every failure is a DiscoveryError (an HttpApiError) whose
message is one short line naming the nsqlookupd.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from nsqtools.httpapi import Call, HttpApiError, lookupd, send
from nsqtools.httpapi.lookupd import NsqdNode, RegisteredNsqd, TopicLookup
from nsqtools.httpapi.plans import Plan, each

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")
N = TypeVar("N", bound=NsqdNode)
R = TypeVar("R")

_TIMEOUT_OPTION = "lookupd_poll_timeout"  # the setting a lookupd's timeout comes from

# Discovery's failures are the HTTP client's; the name says where they come from.
DiscoveryError = HttpApiError

__all__ = [
    "DiscoveryError",
    "NsqdNode",
    "channels",
    "lookup",
    "lookup_all",
    "lookup_all_plan",
    "lookup_topic_all",
    "lookup_topics_all",
    "more_lookupds",
    "nodes",
    "nodes_all",
    "nodes_all_plan",
    "run_plan",
    "send_each",
    "topics",
    "topics_all_plan",
]


async def lookup(client: httpx.AsyncClient, address: str, topic: str) -> list[NsqdNode]:
    """The nsqds producing `topic` (GET /lookup); [] while nsqlookupd knows none."""
    return await _ask(client, lookupd.lookup(address, topic))


async def lookup_all(
    client: httpx.AsyncClient, lookupds: Sequence[str], topic: str
) -> tuple[list[NsqdNode], list[DiscoveryError]]:
    """Producers of `topic` from every lookupd, merged by tcp_address, and the failures.

    All lookupds are asked at once; the first to list an nsqd (in the order of
    `lookupds`) gives its record, and the result keeps that order.
    """
    return await run_plan(client, lookup_all_plan(lookupds, topic))


def lookup_all_plan(
    lookupds: Sequence[str], topic: str
) -> Plan[tuple[list[NsqdNode], list[DiscoveryError]]]:
    """lookup_all() as a plan, for any runner."""
    answers, errors = yield from _ask_each([lookupd.lookup(address, topic) for address in lookupds])
    return _merged(answers), errors


async def lookup_topic_all(
    client: httpx.AsyncClient, lookupds: Sequence[str], topic: str, access: str = "r"
) -> tuple[TopicLookup, list[DiscoveryError]]:
    """lookup_all() with the Youzan fork's partitions and meta, and the failures.

    Producers merge as in lookup_all; each partition's leader and the meta come from
    the first lookupd (in the order of `lookupds`) that names them."""
    calls = [lookupd.topic_lookup(address, topic, access) for address in lookupds]
    answers, errors = await run_plan(client, _ask_each(calls))
    partitions: dict[int, NsqdNode] = {}
    for answer in answers:
        for partition, node in answer.partitions.items():
            partitions.setdefault(partition, node)
    meta = next((answer.meta for answer in answers if answer.meta is not None), None)
    producers = _merged([list(answer.producers) for answer in answers])
    return TopicLookup(tuple(producers), dict(sorted(partitions.items())), meta), errors


async def more_lookupds(client: httpx.AsyncClient, lookupds: Sequence[str]) -> list[str]:
    """The Youzan fork's lookupds that `lookupds` list (/listlookup) and are not among
    them. Upstream nsqlookupd has no /listlookup: its failures say nothing new."""
    calls = [lookupd.list_lookup(address) for address in lookupds]
    answers, _ = await run_plan(client, _ask_each(calls))
    known = {address.removeprefix("http://") for address in lookupds}
    found = (node.http_address for answer in answers for node in answer)
    return [address for address in dict.fromkeys(found) if address not in known]


async def topics(client: httpx.AsyncClient, address: str) -> list[str]:
    """Every topic the lookupd knows (GET /topics)."""
    return await _ask(client, lookupd.topics(address))


async def lookup_topics_all(
    client: httpx.AsyncClient, lookupds: Sequence[str]
) -> tuple[list[str], list[DiscoveryError]]:
    """The sorted union of every lookupd's topics, and the failures."""
    return await run_plan(client, topics_all_plan(lookupds))


def topics_all_plan(lookupds: Sequence[str]) -> Plan[tuple[list[str], list[DiscoveryError]]]:
    """lookup_topics_all() as a plan, for any runner."""
    answers, errors = yield from _ask_each([lookupd.topics(address) for address in lookupds])
    return sorted({topic for found in answers for topic in found}), errors


async def channels(client: httpx.AsyncClient, address: str, topic: str) -> list[str]:
    """The channels of `topic` the lookupd knows (GET /channels)."""
    return await _ask(client, lookupd.channels(address, topic))


async def nodes(client: httpx.AsyncClient, address: str) -> list[RegisteredNsqd]:
    """Every nsqd registered with the lookupd (GET /nodes)."""
    return await _ask(client, lookupd.nodes(address))


async def nodes_all(
    client: httpx.AsyncClient, lookupds: Sequence[str]
) -> tuple[list[RegisteredNsqd], list[DiscoveryError]]:
    """Every nsqd registered with any lookupd, merged as lookup_all merges, and the failures."""
    return await run_plan(client, nodes_all_plan(lookupds))


def nodes_all_plan(
    lookupds: Sequence[str],
) -> Plan[tuple[list[RegisteredNsqd], list[DiscoveryError]]]:
    """nodes_all() as a plan, for any runner."""
    answers, errors = yield from _ask_each([lookupd.nodes(address) for address in lookupds])
    return _merged(answers), errors


def _merged(answers: list[list[N]]) -> list[N]:
    """The nodes of every answer, each nsqd once (its first record), in answer order."""
    merged: dict[str, N] = {}
    for node in (node for found in answers for node in found):
        merged.setdefault(node.tcp_address, node)
    return list(merged.values())


async def send_each(
    client: httpx.AsyncClient, calls: Sequence[Call[T]], *, timeout_option: str = ""
) -> list[T | HttpApiError]:
    """Send every call at once; each one's answer, or its failure, in the calls' order:
    one server down never hides what the others said (the cluster's nsqds are polled
    the same way)."""
    import trio

    results: dict[int, T | HttpApiError] = {}

    async def send_one(index: int) -> None:
        try:
            answer: T | HttpApiError = await send(
                client, calls[index], timeout_option=timeout_option
            )
        except HttpApiError as error:
            answer = error
        results[index] = answer

    async with trio.open_nursery() as nursery:
        for index in range(len(calls)):
            nursery.start_soon(send_one, index)
    return [results[index] for index in range(len(calls))]


async def _ask(client: httpx.AsyncClient, call: Call[T]) -> T:
    return await send(client, call, timeout_option=_TIMEOUT_OPTION)


async def run_plan(client: httpx.AsyncClient, plan: Plan[R]) -> R:
    """What the plan makes of the answers to its batches, each sent with send_each."""
    try:
        batch = next(plan)
        while True:
            answers = await send_each(client, batch.calls, timeout_option=batch.timeout_option)
            batch = plan.send(answers)
    except StopIteration as finished:
        result: R = finished.value
        return result


def _ask_each(calls: Sequence[Call[T]]) -> Plan[tuple[list[T], list[DiscoveryError]]]:
    """In a plan: every call at once; the answers and the failures, each in the calls' order."""
    results = yield from each(calls, timeout_option=_TIMEOUT_OPTION)
    errors = [result for result in results if isinstance(result, DiscoveryError)]
    return [result for result in results if not isinstance(result, DiscoveryError)], errors
