"""Discovery against real nsqlookupd v1.3.0; a fake only for answers a real one never gives."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import astuple
from typing import Any, TypeVar

import httpx
import pytest
import trio

from nsqtools.discovery import (
    DiscoveryError,
    NsqdNode,
    channels,
    lookup,
    lookup_all,
    lookup_topics_all,
    nodes,
    topics,
)
from nsqtools.httpapi.lookupd import RegisteredNsqd
from nsqtools.testing import Nsqd, Nsqlookupd, TlsFiles
from nsqtools.testing.httpserver import Reply
from nsqtools.testing.junklookupd import JUNK_LOOKUPS, JunkLookupd
from tests.conftest import Cluster, LocalNsq

T = TypeVar("T")

REGISTRATION_TIMEOUT = 10.0
POLL_INTERVAL = 0.01
ACCEPT_V1 = "application/vnd.nsq; version=1.0"
PRODUCER = {
    "remote_address": "127.0.0.1:50000",
    "hostname": "old-box",
    "broadcast_address": "10.0.0.7",
    "tcp_port": 4150,
    "http_port": 4151,
    "version": "0.2.31",
}
OLD_NODE = NsqdNode("10.0.0.7", "old-box", 4150, 4151, "0.2.31")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client


async def eventually(query: Callable[[], Awaitable[T]], done: Callable[[T], bool], what: str) -> T:
    """Ask again until the answer is `done`: nsqd registers with nsqlookupd asynchronously."""
    with trio.move_on_after(REGISTRATION_TIMEOUT):
        while not done(answer := await query()):
            await trio.sleep(POLL_INTERVAL)
        return answer
    raise TimeoutError(f"timed out after {REGISTRATION_TIMEOUT:g}s waiting for {what}")


async def producers_of(
    client: httpx.AsyncClient, lookupd: Nsqlookupd, topic: str, count: int
) -> list[NsqdNode]:
    return await eventually(
        lambda: lookup(client, lookupd.http_address, topic),
        lambda found: len(found) == count,
        f"{count} producer(s) of {topic} on {lookupd.name}",
    )


def tcp_addresses(found: Sequence[NsqdNode]) -> set[str]:
    return {node.tcp_address for node in found}


async def test_unknown_topic_has_no_producers(
    client: httpx.AsyncClient, lookupd: Nsqlookupd
) -> None:
    """nsqlookupd answers 404 TOPIC_NOT_FOUND: no producers yet, not a failure."""
    assert await lookup(client, lookupd.http_address, "nobody-publishes-here") == []


async def test_published_topic_lists_its_nsqd(client: httpx.AsyncClient, cluster: Cluster) -> None:
    cluster.nsqd.publish("found", b"x")
    (node,) = await producers_of(client, cluster.lookupd, "found", 1)
    assert node.tcp_address == cluster.nsqd.tcp_address
    assert node.http_address == cluster.nsqd.http_address
    assert node.broadcast_address == "127.0.0.1"
    assert node.version == "1.3.0"
    assert node.hostname


async def test_two_nsqds_both_listed(client: httpx.AsyncClient, cluster2: Cluster) -> None:
    for nsqd in cluster2.nsqds:
        nsqd.publish("shared", b"x")
    found = await producers_of(client, cluster2.lookupd, "shared", 2)
    assert tcp_addresses(found) == {nsqd.tcp_address for nsqd in cluster2.nsqds}


async def test_lookup_all_merges_lookupds_without_duplicates(
    client: httpx.AsyncClient, local_nsq: LocalNsq
) -> None:
    first, second = local_nsq.lookupd("lookupd1"), local_nsq.lookupd("lookupd2")
    on_both = local_nsq.nsqd("on-both", lookupds=[first, second])
    on_second = local_nsq.nsqd("on-second", lookupds=[second])
    on_both.publish("merged", b"x")
    on_second.publish("merged", b"x")
    await producers_of(client, first, "merged", 1)
    await producers_of(client, second, "merged", 2)

    found, errors = await lookup_all(client, [first.http_address, second.http_address], "merged")

    assert errors == []
    assert [node.tcp_address for node in found] == [on_both.tcp_address, on_second.tcp_address]


async def test_one_lookupd_down_does_not_hide_the_other(
    client: httpx.AsyncClient, local_nsq: LocalNsq
) -> None:
    up, down = local_nsq.lookupd("up"), local_nsq.lookupd("down")
    nsqd = local_nsq.nsqd("nsqd", lookupds=[up, down])
    nsqd.publish("resilient", b"x")
    await producers_of(client, up, "resilient", 1)
    down.stop()

    found, errors = await lookup_all(client, [down.http_address, up.http_address], "resilient")

    assert tcp_addresses(found) == {nsqd.tcp_address}
    (error,) = errors
    assert error.address == down.http_address
    assert str(error) == f"nsqlookupd {down.http_address}: GET /lookup: connection refused"


async def test_topics_channels_and_nodes(
    client: httpx.AsyncClient, cluster: Cluster, local_nsq: LocalNsq
) -> None:
    lookupd, nsqd = cluster.lookupd.http_address, cluster.nsqd
    nsqd.publish("beta", b"x")
    nsqd.publish("alpha", b"x")
    nsqd.create_channels("alpha", "archive")
    other_lookupd = local_nsq.lookupd("other")
    local_nsq.nsqd("other-nsqd", lookupds=[other_lookupd]).publish("gamma", b"x")

    await eventually(lambda: topics(client, lookupd), lambda found: len(found) == 2, "two topics")
    assert sorted(await topics(client, lookupd)) == ["alpha", "beta"]
    found = await eventually(lambda: channels(client, lookupd, "alpha"), bool, "the channel")
    assert found == ["archive"]
    assert await channels(client, lookupd, "beta") == []
    assert tcp_addresses(await nodes(client, lookupd)) == {nsqd.tcp_address}
    await eventually(lambda: topics(client, other_lookupd.http_address), bool, "a topic on other")
    everything = await lookup_topics_all(client, [other_lookupd.http_address, lookupd])
    assert everything == (["alpha", "beta", "gamma"], [])


async def test_lookupd_given_as_url(client: httpx.AsyncClient, cluster: Cluster) -> None:
    cluster.nsqd.publish("by-url", b"x")
    await producers_of(client, cluster.lookupd, "by-url", 1)
    for url in (
        f"http://{cluster.lookupd.http_address}",
        f"http://{cluster.lookupd.http_address}/",
    ):
        assert tcp_addresses(await lookup(client, url, "by-url")) == {cluster.nsqd.tcp_address}


async def test_an_nsqd_is_not_mistaken_for_an_empty_lookupd(
    client: httpx.AsyncClient, nsqd: Nsqd
) -> None:
    """nsqd answers /lookup with 404 NOT_FOUND: a wrong address, not "no producers"."""
    with pytest.raises(DiscoveryError, match="HTTP 404 NOT_FOUND"):
        await lookup(client, nsqd.http_address, "anything")


def test_ipv6_addresses_are_bracketed() -> None:
    node = NsqdNode("::1", "box", 4150, 4151, "1.3.0")
    assert (node.tcp_address, node.http_address) == ("[::1]:4150", "[::1]:4151")


# Below: answers a real nsqlookupd v1.3.0 cannot be made to give (the pre-1.0 wrapped
# shape, malformed documents, a stall), served by the junk lookupd (nsqtools.testing).


@pytest.fixture
def fake() -> Iterator[JunkLookupd]:
    with JunkLookupd() as server:
        yield server


def wrapped(data: Any, status_code: int = 200, status_txt: str = "OK") -> dict[str, Any]:
    return {"status_code": status_code, "status_txt": status_txt, "data": data}


async def test_every_request_asks_for_v1_json(client: httpx.AsyncClient, fake: JunkLookupd) -> None:
    """A fake server, because it records the request headers nsqlookupd never shows."""
    fake.answer("/topics", {"topics": []})
    await topics(client, fake.address)
    assert fake.request_headers[0]["Accept"] == ACCEPT_V1


async def test_old_wrapped_answers_are_unwrapped(
    client: httpx.AsyncClient, fake: JunkLookupd
) -> None:
    """A fake server: nsqlookupd v1.3.0 always answers bare JSON to our Accept header."""
    fake.answer("/lookup", wrapped({"channels": [], "producers": [PRODUCER]}))
    fake.answer("/topics", wrapped({"topics": ["t"]}))
    fake.answer("/channels", wrapped({"channels": ["c"]}))
    fake.answer("/nodes", wrapped({"producers": [{**PRODUCER, "tombstones": [], "topics": []}]}))
    assert await lookup(client, fake.address, "t") == [OLD_NODE]
    assert await topics(client, fake.address) == ["t"]
    assert await channels(client, fake.address, "t") == ["c"]
    assert await nodes(client, fake.address) == [RegisteredNsqd(*astuple(OLD_NODE))]


async def test_old_topic_not_found_means_no_producers(
    client: httpx.AsyncClient, fake: JunkLookupd
) -> None:
    """A fake server: pre-1.0 nsqlookupd said TOPIC_NOT_FOUND with a wrapped HTTP 500."""
    fake.answer("/lookup", wrapped(None, 500, "TOPIC_NOT_FOUND"), status=500)
    assert await lookup(client, fake.address, "t") == []


async def test_null_lists_are_empty(client: httpx.AsyncClient, fake: JunkLookupd) -> None:
    """A fake server: v1.3.0 sends [] where older servers sent null."""
    fake.answer("/lookup", {"channels": None, "producers": None})
    fake.answer("/topics", wrapped({"topics": None}))
    fake.answer("/channels", {"channels": None})
    fake.answer("/nodes", {"producers": None})
    assert await lookup(client, fake.address, "t") == []
    assert await topics(client, fake.address) == []
    assert await channels(client, fake.address, "t") == []
    assert await nodes(client, fake.address) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>oops</html>", "invalid answer: not JSON"),
        (b'["t"]', "invalid answer: expected an object with 'topics', got an array"),
        (b"{}", "invalid answer: no 'topics' in the answer"),
        (b'{"topics": "t"}', "invalid answer: 'topics' is a string, not an array"),
        (b'{"topics": [1]}', "invalid answer: 'topics' holds something other than strings"),
        (b'{"status_code": "200", "data": {}}', "invalid answer: 'status_code' is a string"),
    ],
)
async def test_malformed_answers_are_discovery_errors(
    client: httpx.AsyncClient, fake: JunkLookupd, body: bytes, reason: str
) -> None:
    """A fake server: a real nsqlookupd never sends malformed JSON."""
    fake.answer_with("/topics", Reply(200, body))
    with pytest.raises(DiscoveryError) as caught:
        await topics(client, fake.address)
    assert str(caught.value).startswith(f"nsqlookupd {fake.address}: GET /topics: {reason}")


async def test_malformed_producer_is_a_discovery_error(
    client: httpx.AsyncClient, fake: JunkLookupd
) -> None:
    """A fake server: a real nsqlookupd always sends whole producer records."""
    fake.answer("/lookup", {"channels": [], "producers": [{**PRODUCER, "tcp_port": "4150"}]})
    with pytest.raises(DiscoveryError, match="'tcp_port' is a string, not an integer"):
        await lookup(client, fake.address, "t")


async def test_server_errors_name_status_and_message(
    client: httpx.AsyncClient, fake: JunkLookupd
) -> None:
    """A fake server: nsqlookupd cannot be made to fail a plain GET /nodes."""
    fake.answer("/nodes", {"message": "INTERNAL_ERROR"}, status=500)
    fake.answer_with("/topics", Reply(502, b"bad gateway"))
    with pytest.raises(DiscoveryError, match=r"GET /nodes: HTTP 500 INTERNAL_ERROR$"):
        await nodes(client, fake.address)
    with pytest.raises(DiscoveryError, match=r"GET /topics: HTTP 502 Bad Gateway$"):
        await topics(client, fake.address)


@pytest.mark.parametrize("junk", JUNK_LOOKUPS)
async def test_a_junk_answer_is_one_error_line_and_the_other_lookupd_serves(
    client: httpx.AsyncClient, fake: JunkLookupd, cluster: Cluster, junk: str
) -> None:
    """The junk lookupd next to a real one: a real nsqlookupd never answers junk."""
    fake.answer_with("/lookup", JUNK_LOOKUPS[junk])
    cluster.nsqd.publish("mixed", b"x")
    await producers_of(client, cluster.lookupd, "mixed", 1)
    found, errors = await lookup_all(client, [fake.address, cluster.lookupd.http_address], "mixed")
    assert tcp_addresses(found) == {cluster.nsqd.tcp_address}
    (error,) = errors
    assert error.address == fake.address
    message = str(error)
    assert message.startswith(f"nsqlookupd {fake.address}: GET /lookup: ")
    assert "\n" not in message and len(message) < 200, message


async def test_an_out_of_range_port_names_the_field(
    client: httpx.AsyncClient, fake: JunkLookupd
) -> None:
    fake.answer_with("/lookup", JUNK_LOOKUPS["port out of range"])
    with pytest.raises(DiscoveryError, match="'tcp_port' is 99999, not a port number"):
        await lookup(client, fake.address, "t")


async def test_a_stalled_lookupd_times_out() -> None:
    """A socket that never answers: a real nsqlookupd cannot be made to stall.

    The timeout is the caller's client's; discovery sets none of its own.
    """
    with socket.create_server(("127.0.0.1", 0)) as stalled:
        address = "{}:{}".format(*stalled.getsockname()[:2])
        async with httpx.AsyncClient(timeout=0.2) as client:
            with pytest.raises(DiscoveryError) as caught:
                await nodes(client, address)
    assert (
        str(caught.value) == f"nsqlookupd {address}: GET /nodes: timed out (lookupd_poll_timeout)"
    )


async def test_https_url(tls_files: TlsFiles) -> None:
    """A fake TLS server: the fixtures' nsqlookupd serves plain HTTP only."""
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    with JunkLookupd(tls_files.cert, tls_files.key) as fake:
        fake.answer("/topics", {"topics": ["secure"]})
        async with httpx.AsyncClient(verify=context, timeout=5.0) as client:
            assert await topics(client, f"https://{fake.address}") == ["secure"]
