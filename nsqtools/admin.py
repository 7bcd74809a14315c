"""Admin actions across a cluster, as nsqadmin does them: create, delete, empty, pause or
unpause a topic or a channel, tombstone a topic's producer.

An action is planned first (plan_steps is sans-IO: which calls go to which nsqlookupds
and nsqds, in which order), then sent: each step's calls at once, the next step once
every call of this one has answered; a node that fails never stops the others. Every
call's outcome is kept: ok, absent (the node did not have the topic or channel:
nothing to do there) or failed, with why.

The order is nsqadmin's (v1.3.0 internal/clusterinfo): a delete finds the topic's
nsqds before removing the topic from the lookupds, then deletes it from those nsqds;
a channel is created on the lookupds (topic, then channel) before the nsqds; empty,
pause and unpause concern the nsqds only; a tombstone hides an nsqd from the lookupds'
lookups of the topic, then deletes the topic there. A topic is created on the lookupds
and on the nsqds given by address (an nsqd creates a topic the lookupds know once it
is published to).

    action = AdminAction(Verb.PAUSE, "events", "archive")
    plan = await prepare(client, Cluster(lookupd_http_addresses=("127.0.0.1:4161",)), action)
    outcomes = await execute(client, plan)
    if not succeeded(outcomes): ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import httpx

from nsqtools import discovery
from nsqtools.cluster import Cluster, find_nsqds, poll_stats
from nsqtools.errors import NsqError
from nsqtools.httpapi import Call, HttpApiError, lookupd, nsqd
from nsqtools.httpapi.lookupd import NsqdNode

# An nsqd's or nsqlookupd's answer meaning it has no such topic or channel.
NOT_FOUND = frozenset({"TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND"})

Step = tuple[Call[None], ...]  # sent at once


class Verb(Enum):
    CREATE = "create"
    DELETE = "delete"
    EMPTY = "empty"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    TOMBSTONE = "tombstone"

    @property
    def destructive(self) -> bool:
        """Loses messages: asked for confirmation."""
        return self in (Verb.DELETE, Verb.EMPTY, Verb.TOMBSTONE)


class AdminError(NsqError):
    """An action that cannot be planned: nothing to act on, or a node that is unknown."""


@dataclass(frozen=True)
class AdminAction:
    verb: Verb
    topic: str
    channel: str = ""  # "": the action is on the topic
    nsqd: str = ""  # tombstone: the HTTP address of the producer to hide

    def __str__(self) -> str:
        if self.verb is Verb.TOMBSTONE:
            return f"tombstone topic {self.topic} on nsqd {self.nsqd}"
        if self.channel:
            return f"{self.verb.value} channel {self.channel} of topic {self.topic}"
        return f"{self.verb.value} topic {self.topic}"


@dataclass(frozen=True)
class Holding:
    """What one nsqd holds of the topic (or the channel) an action is on: what a delete
    or an empty loses there."""

    address: str
    depth: int  # messages queued in the topic itself (or in the channel)
    channels: tuple[tuple[str, int], ...] = ()  # a topic's channels and their depths


@dataclass(frozen=True)
class Plan:
    action: AdminAction
    steps: tuple[Step, ...]
    # Lookupds (or nsqds) that could not say what they have: the plan may miss some.
    failures: tuple[HttpApiError, ...] = ()
    # The nsqds that hold what the action is on (those asked but not here could not say).
    holdings: tuple[Holding, ...] = ()


class Result(Enum):
    OK = "ok"
    ABSENT = "absent"  # the node has no such topic or channel: nothing to do there
    FAILED = "failed"


@dataclass(frozen=True)
class NodeOutcome:
    """What one node answered to one request of the action."""

    server: str  # "nsqd" or "nsqlookupd"
    address: str
    request: str  # "POST /topic/delete"
    result: Result
    detail: str = ""  # why it failed, or the node's NOT_FOUND answer

    @classmethod
    def of(cls, call: Call[None], answer: HttpApiError | None) -> NodeOutcome:
        request = f"{call.method} {call.path}"
        if answer is None:
            return cls(call.server, call.address, request, Result.OK)
        result = Result.ABSENT if answer.message in NOT_FOUND else Result.FAILED
        return cls(call.server, call.address, request, result, _detail(answer))

    @classmethod
    def failed(cls, error: HttpApiError) -> NodeOutcome:
        """A request made to find the nodes to act on, that failed."""
        request, _, detail = error.reason.partition(": ")
        return cls(error.server, error.address, request, Result.FAILED, detail)


def _detail(error: HttpApiError) -> str:
    """The reason, without the request it names (the outcome shows it apart)."""
    return error.reason.partition(": ")[2] or error.reason


def plan_steps(
    action: AdminAction,
    nsqds: Sequence[str],
    lookupds: Sequence[str],
    producer: NsqdNode | None = None,
) -> tuple[Step, ...]:
    """The calls of an action on these nsqds (HTTP addresses) and lookupds, step by step;
    a tombstone is of the producer given (and of no other nsqd)."""
    topic, channel = action.topic, action.channel
    if action.verb is Verb.TOMBSTONE:
        if producer is None:
            raise ValueError("a tombstone needs the producer to hide")
        return _steps(
            [lookupd.tombstone_topic_producer(address, topic, producer) for address in lookupds],
            [nsqd.delete_topic(producer.http_address, topic)],
        )
    on_nsqds = [_nsqd_call(action.verb, address, topic, channel) for address in nsqds]
    return _steps(*_lookupd_steps(action, lookupds), on_nsqds)


def _lookupd_steps(action: AdminAction, lookupds: Sequence[str]) -> list[list[Call[None]]]:
    topic, channel = action.topic, action.channel
    if action.verb is Verb.CREATE:
        topics = [lookupd.create_topic(address, topic) for address in lookupds]
        if not channel:
            return [topics]
        return [topics, [lookupd.create_channel(address, topic, channel) for address in lookupds]]
    if action.verb is Verb.DELETE and channel:
        return [[lookupd.delete_channel(address, topic, channel) for address in lookupds]]
    if action.verb is Verb.DELETE:
        return [[lookupd.delete_topic(address, topic) for address in lookupds]]
    return []


def _steps(*steps: list[Call[None]]) -> tuple[Step, ...]:
    """The non-empty steps, in order."""
    return tuple(tuple(step) for step in steps if step)


_TOPIC_CALLS: dict[Verb, Callable[[str, str], Call[None]]] = {
    Verb.CREATE: nsqd.create_topic,
    Verb.DELETE: nsqd.delete_topic,
    Verb.EMPTY: nsqd.empty_topic,
    Verb.PAUSE: nsqd.pause_topic,
    Verb.UNPAUSE: nsqd.unpause_topic,
}
_CHANNEL_CALLS: dict[Verb, Callable[[str, str, str], Call[None]]] = {
    Verb.CREATE: nsqd.create_channel,
    Verb.DELETE: nsqd.delete_channel,
    Verb.EMPTY: nsqd.empty_channel,
    Verb.PAUSE: nsqd.pause_channel,
    Verb.UNPAUSE: nsqd.unpause_channel,
}


def _nsqd_call(verb: Verb, address: str, topic: str, channel: str) -> Call[None]:
    if channel:
        return _CHANNEL_CALLS[verb](address, topic, channel)
    return _TOPIC_CALLS[verb](address, topic)


async def prepare(client: httpx.AsyncClient, cluster: Cluster, action: AdminAction) -> Plan:
    """The plan of the action on this cluster: its nsqds found (given, or the topic's
    producers through the lookupds) and what each holds; AdminError when there is
    nothing to act on (but a create): no nsqd has the topic, or the channel."""
    lookupds = cluster.lookupd_http_addresses
    if action.verb is Verb.TOMBSTONE:
        producer, failures = await _find_producer(client, cluster, action)
        holdings, _ = await _holdings(client, action, [producer.http_address])
        steps = plan_steps(action, [], lookupds, producer)
        return Plan(action, steps, tuple(failures), tuple(holdings))
    if action.verb is Verb.CREATE:
        if action.channel:
            found, failures = await find_nsqds(client, cluster, action.topic)
            nsqds = sorted(found)
        else:
            nsqds, failures = list(dict.fromkeys(cluster.nsqd_http_addresses)), []
        if not nsqds and not lookupds:
            raise AdminError(_nothing_to_act_on(action, failures))
        return Plan(action, plan_steps(action, nsqds, lookupds), tuple(failures))
    found, failures = await find_nsqds(client, cluster, action.topic)
    holdings, unanswered = await _holdings(client, action, sorted(found))
    if not holdings and not unanswered:
        if action.verb is Verb.DELETE and await _registered(client, lookupds, action):
            # Left on the lookupds by an nsqd gone for good: the delete clears them.
            return Plan(action, plan_steps(action, [], lookupds), tuple(failures))
        raise AdminError(_nothing_to_act_on(action, failures))
    # One that could not say what it holds is asked all the same: it may hold it.
    nsqds = sorted([holding.address for holding in holdings] + [e.address for e in unanswered])
    return Plan(action, plan_steps(action, nsqds, lookupds), tuple(failures), tuple(holdings))


async def _holdings(
    client: httpx.AsyncClient, action: AdminAction, nsqds: Sequence[str]
) -> tuple[list[Holding], list[HttpApiError]]:
    """What each nsqd holds of the action's topic or channel (those holding none left
    out), and the nsqds that could not say."""
    polled = await poll_stats(client, nsqds, action.topic, action.channel)
    holdings = []
    for node in polled:
        topics = [] if node.stats is None else node.stats.topics
        mine = [topic for topic in topics if topic.topic_name == action.topic]
        if action.channel:
            channels = [c for t in mine for c in t.channels if c.channel_name == action.channel]
            if channels:
                holdings.append(Holding(node.address, sum(c.depth for c in channels)))
        elif mine:
            depths: dict[str, int] = {}
            for channel in (channel for topic in mine for channel in topic.channels):
                depths[channel.channel_name] = depths.get(channel.channel_name, 0) + channel.depth
            depth = sum(topic.depth for topic in mine)
            holdings.append(Holding(node.address, depth, tuple(sorted(depths.items()))))
    return holdings, [node.error for node in polled if node.error is not None]


async def _registered(
    client: httpx.AsyncClient, lookupds: Sequence[str], action: AdminAction
) -> bool:
    """Whether a lookupd still registers the action's topic (or channel)."""
    for address in lookupds:
        try:
            if action.channel:
                known = action.channel in await discovery.channels(client, address, action.topic)
            else:
                known = action.topic in await discovery.topics(client, address)
        except HttpApiError:
            continue  # this lookupd cannot say; another may
        if known:
            return True
    return False


def _nothing_to_act_on(action: AdminAction, failures: Sequence[HttpApiError]) -> str:
    reason = f"; {failures[0]}" if failures else ""
    what = f"topic {action.topic}"
    if action.channel and action.verb is not Verb.CREATE:
        what = f"channel {action.channel} of topic {action.topic}"
    return f"cannot {action}: no nsqd has {what}{reason}"


async def _find_producer(
    client: httpx.AsyncClient, cluster: Cluster, action: AdminAction
) -> tuple[NsqdNode, list[HttpApiError]]:
    """The nsqd to tombstone, as the lookupds know it (they match it by broadcast
    address and HTTP port, so an address they do not list would change nothing)."""
    if not cluster.lookupd_http_addresses:
        raise AdminError("a tombstone is kept by nsqlookupd: give --lookupd-http-address")
    registered, failures = await discovery.nodes_all(client, cluster.lookupd_http_addresses)
    for node in registered:
        if node.http_address == action.nsqd:
            if action.topic not in node.topics:
                raise AdminError(f"cannot {action}: that nsqd does not produce the topic")
            return node, failures
    known = ", ".join(node.http_address for node in registered) or "none"
    reason = f"; {failures[0]}" if failures else ""
    raise AdminError(
        f"cannot {action}: no lookupd knows that nsqd (HTTP addresses known: {known}){reason}"
    )


async def execute(
    client: httpx.AsyncClient, plan: Plan, *, timeout_option: str = ""
) -> list[NodeOutcome]:
    """Send the plan, step after step; every call's outcome, the plan's failures first.
    `timeout_option` names the setting of the client's timeout in a timed-out outcome."""
    outcomes = [NodeOutcome.failed(error) for error in plan.failures]
    for step in plan.steps:
        answers = await discovery.send_each(client, step, timeout_option=timeout_option)
        outcomes += [
            NodeOutcome.of(call, answer) for call, answer in zip(step, answers, strict=True)
        ]
    return outcomes


def succeeded(outcomes: Sequence[NodeOutcome]) -> bool:
    """No node failed, and at least one did what was asked."""
    results = {outcome.result for outcome in outcomes}
    return Result.FAILED not in results and Result.OK in results
