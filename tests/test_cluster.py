"""The cluster as the inspection commands see it: which nsqds, and their /stats at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from nsqtools.cluster import Cluster as Where
from nsqtools.cluster import find_nsqds, poll_stats
from nsqtools.testing import Nsqd
from tests.conftest import Cluster
from tests.test_discovery import eventually


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client


async def test_given_nsqds_are_asked_as_given_each_once(client: httpx.AsyncClient) -> None:
    where = Where(nsqd_http_addresses=("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"))
    assert await find_nsqds(client, where, "events") == (["127.0.0.1:1", "127.0.0.1:2"], [])


async def test_lookupds_give_every_nsqd_or_a_topics_producers(
    client: httpx.AsyncClient, cluster2: Cluster
) -> None:
    first, second = cluster2.nsqds
    first.publish("only-on-first", b"x")
    cluster2.lookupd.wait_for_topic("only-on-first", [first])
    where = Where(lookupd_http_addresses=(cluster2.lookupd.http_address, "127.0.0.1:1"))
    everyone, failures = await eventually(
        lambda: find_nsqds(client, where), lambda found: len(found[0]) == 2, "both nsqds"
    )
    assert set(everyone) == {first.http_address, second.http_address}
    assert [failure.address for failure in failures] == ["127.0.0.1:1"]
    producers, _ = await find_nsqds(client, where, "only-on-first")
    assert producers == [first.http_address]


async def test_a_node_down_is_reported_beside_the_others_stats(
    client: httpx.AsyncClient, nsqd: Nsqd
) -> None:
    nsqd.publish("events", b"x")
    down = "127.0.0.1:1"
    polled = await poll_stats(client, [nsqd.http_address, down], "events")
    assert [node.address for node in polled] == [nsqd.http_address, down]
    alive, dead = polled
    assert alive.error is None and alive.stats is not None
    assert alive.stats.topic("events").message_count == 1
    assert dead.stats is None and dead.error is not None
    assert down in str(dead.error)
