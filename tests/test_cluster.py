"""The cluster as the inspection commands and nsq_stat see it: which nsqds, and their
/stats at once; each plan run on trio and httpx (the commands) and on threads (nsq_stat)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest

from nsqtools import discovery
from nsqtools.cluster import Cluster as Where
from nsqtools.cluster import find_nsqds, find_nsqds_plan, poll_stats, poll_stats_plan
from nsqtools.httpapi.blocking import BlockingClient
from nsqtools.httpapi.plans import Plan
from nsqtools.testing import Nsqd
from tests.conftest import Cluster
from tests.test_discovery import eventually

R = TypeVar("R")
Runner = Callable[[Plan[Any]], Awaitable[Any]]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client


@pytest.fixture(params=["trio", "threads"])
def run(request: pytest.FixtureRequest, client: httpx.AsyncClient) -> Runner:
    """Runs a plan as the commands do (trio, httpx) or as nsq_stat does (threads)."""
    if request.param == "trio":
        return lambda plan: discovery.run_plan(client, plan)
    blocking = BlockingClient(connect_timeout=5.0, request_timeout=5.0)

    async def on_threads(plan: Plan[R]) -> R:
        return blocking.run(plan)

    return on_threads


async def test_given_nsqds_are_asked_as_given_each_once(run: Runner) -> None:
    where = Where(nsqd_http_addresses=("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"))
    assert await run(find_nsqds_plan(where, "events")) == (["127.0.0.1:1", "127.0.0.1:2"], [])


async def test_lookupds_give_every_nsqd_or_a_topics_producers(
    run: Runner, cluster2: Cluster
) -> None:
    first, second = cluster2.nsqds
    first.publish("only-on-first", b"x")
    cluster2.lookupd.wait_for_topic("only-on-first", [first])
    where = Where(lookupd_http_addresses=(cluster2.lookupd.http_address, "127.0.0.1:1"))
    everyone, failures = await eventually(
        lambda: run(find_nsqds_plan(where)), lambda found: len(found[0]) == 2, "both nsqds"
    )
    assert set(everyone) == {first.http_address, second.http_address}
    assert [failure.address for failure in failures] == ["127.0.0.1:1"]
    producers, _ = await run(find_nsqds_plan(where, "only-on-first"))
    assert producers == [first.http_address]


async def test_a_node_down_is_reported_beside_the_others_stats(run: Runner, nsqd: Nsqd) -> None:
    nsqd.publish("events", b"x")
    down = "127.0.0.1:1"
    polled = await run(poll_stats_plan([nsqd.http_address, down], "events"))
    assert [node.address for node in polled] == [nsqd.http_address, down]
    alive, dead = polled
    assert alive.error is None and alive.stats is not None
    assert alive.stats.topic("events").message_count == 1
    assert dead.stats is None and dead.error is not None
    assert str(dead.error) == f"nsqd {down}: GET /stats: connection refused"


async def test_the_commands_functions_run_the_plans(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    nsqd.publish("events", b"x")
    where = Where(nsqd_http_addresses=(nsqd.http_address,))
    addresses, _ = await find_nsqds(client, where, "events")
    (polled,) = await poll_stats(client, addresses, "events", include_clients=True)
    assert polled.stats is not None and polled.stats.topic("events").message_count == 1
