"""The nsqd and nsqlookupd HTTP client against real v1.3.0 daemons; the junk server only
for answers a real one never gives. The blocking client (nsq_stat's) reads and fails
as httpx's does."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.httpapi import Call, HttpApiError, send, send_sync
from nsqtools.httpapi import lookupd as lookupd_api
from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi.blocking import BlockingClient
from nsqtools.httpapi.clients import sync_client
from nsqtools.httpapi.nsqd import E2eLatency, NsqdStats
from nsqtools.protocol import MessageBatch, commands
from nsqtools.testing import Nsqd, Nsqlookupd, wait_until
from nsqtools.testing.httpserver import Reply
from nsqtools.testing.junklookupd import JunkLookupd
from nsqtools.transport import Conn, open_connection
from tests.conftest import Cluster, LocalNsq

TOPIC = "http-api"
CHANNEL = "archive"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client


async def stats_of(
    client: httpx.AsyncClient, nsqd: Nsqd, topic: str = "", channel: str = ""
) -> NsqdStats:
    return await send(client, nsqd_api.stats(nsqd.http_address, topic, channel))


async def test_nsqd_info(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    info = await send(client, nsqd_api.info(nsqd.http_address))
    assert (info.version, info.broadcast_address) == ("1.3.0", "127.0.0.1")
    assert f"127.0.0.1:{info.tcp_port}" == nsqd.tcp_address
    assert f"127.0.0.1:{info.http_port}" == nsqd.http_address
    assert (info.max_heartbeat_interval, info.max_output_buffer_timeout) == (60.0, 30.0)


async def test_stats_of_a_publisher_and_a_consumer(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    """A message in flight to a consumer with RDY 5, from a publisher still connected."""
    received: list[MessageBatch] = []

    def keep(conn: Conn, batch: MessageBatch) -> None:
        received.append(batch)

    config = ClientConfig()
    async with (
        open_connection(nsqd.tcp_address, config) as publisher,
        open_connection(nsqd.tcp_address, config, on_messages=keep) as consumer,
    ):
        assert await consumer.request(commands.sub(TOPIC, CHANNEL)) == b"OK"
        assert await publisher.request(commands.pub(TOPIC, b"body")) == b"OK"
        consumer.write(commands.rdy(5))
        await consumer.flush()
        with trio.fail_after(10):
            while not received:
                await trio.sleep(0.01)
        stats = await stats_of(client, nsqd)

    topic = stats.topic(TOPIC)
    assert (topic.depth, topic.message_count, topic.paused) == (0, 1, False)
    channel = topic.channel(CHANNEL)
    assert (channel.depth, channel.in_flight_count, channel.client_count) == (0, 1, 1)
    (subscriber,) = channel.clients
    assert (subscriber.ready_count, subscriber.in_flight_count) == (5, 1)
    assert subscriber.user_agent == config.user_agent
    (producer,) = stats.producers
    assert producer.pub_counts == {TOPIC: 1}
    assert (stats.version, stats.health) == ("1.3.0", "OK")


async def test_null_lists_read_as_empty(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    """nsqd v1.3.0 sends `"producers": null`, and `"clients": null` when not asked for them."""
    nsqd.create_channels(TOPIC, CHANNEL)
    stats = await send(client, nsqd_api.stats(nsqd.http_address, include_clients=False))
    assert stats.producers == ()
    assert stats.topic(TOPIC).channel(CHANNEL).clients == ()


async def test_stats_filtered_to_a_topic_and_channel(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, CHANNEL, "other")
    nsqd.create_channels("elsewhere")
    stats = await stats_of(client, nsqd, topic=TOPIC, channel=CHANNEL)
    (topic,) = stats.topics
    assert [channel.channel_name for channel in topic.channels] == [CHANNEL]
    with pytest.raises(KeyError, match="no topic 'elsewhere'"):
        stats.topic("elsewhere")


@pytest.mark.slow
async def test_e2e_latency_only_when_nsqd_tracks_it(
    client: httpx.AsyncClient, local_nsq: LocalNsq, nsqd: Nsqd
) -> None:
    tracking = local_nsq.nsqd("e2e", extra_args=["--e2e-processing-latency-percentile=0.99,0.5"])
    for each in (nsqd, tracking):
        each.create_channels(TOPIC, CHANNEL)
    untracked = (await stats_of(client, nsqd)).topic(TOPIC)
    assert untracked.e2e_processing_latency is None
    assert untracked.channel(CHANNEL).e2e_processing_latency is None
    channel = (await stats_of(client, tracking)).topic(TOPIC).channel(CHANNEL)
    latency = channel.e2e_processing_latency
    assert isinstance(latency, E2eLatency)
    assert [percentile.quantile for percentile in latency.percentiles] == [0.99, 0.5]


async def test_topic_and_channel_admin(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    address = nsqd.http_address

    async def channel_state() -> tuple[bool, bool, int]:
        topic = (await stats_of(client, nsqd)).topic(TOPIC)
        return topic.paused, topic.channel(CHANNEL).paused, topic.channel(CHANNEL).depth

    await send(client, nsqd_api.create_topic(address, TOPIC))
    await send(client, nsqd_api.create_channel(address, TOPIC, CHANNEL))
    await send(client, nsqd_api.pub(address, TOPIC, b"one"))
    await send(client, nsqd_api.mpub(address, TOPIC, [b"two", b"three"]))
    assert await channel_state() == (False, False, 3)
    await send(client, nsqd_api.pause_topic(address, TOPIC))
    await send(client, nsqd_api.pause_channel(address, TOPIC, CHANNEL))
    assert await channel_state() == (True, True, 3)
    await send(client, nsqd_api.unpause_topic(address, TOPIC))
    await send(client, nsqd_api.unpause_channel(address, TOPIC, CHANNEL))
    await send(client, nsqd_api.empty_channel(address, TOPIC, CHANNEL))
    assert await channel_state() == (False, False, 0)
    await send(client, nsqd_api.pub(address, TOPIC, b"four"))
    await send(client, nsqd_api.delete_channel(address, TOPIC, CHANNEL))
    assert (await stats_of(client, nsqd)).topic(TOPIC).channels == ()
    await send(client, nsqd_api.empty_topic(address, TOPIC))
    await send(client, nsqd_api.delete_topic(address, TOPIC))
    assert (await stats_of(client, nsqd)).topics == ()


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (nsqd_api.delete_topic, "POST /topic/delete: HTTP 404 TOPIC_NOT_FOUND"),
        (nsqd_api.pause_topic, "POST /topic/pause: HTTP 404 TOPIC_NOT_FOUND"),
        (lambda address, _: nsqd_api.create_topic(address, "no!"), "HTTP 400 INVALID_TOPIC"),
        (
            lambda address, topic: nsqd_api.empty_channel(address, topic, "none"),
            "POST /channel/empty: HTTP 404 TOPIC_NOT_FOUND",
        ),
    ],
    ids=["delete", "pause", "invalid name", "empty channel"],
)
async def test_an_admin_error_is_one_line_with_nsqds_message(
    client: httpx.AsyncClient, nsqd: Nsqd, call: Callable[[str, str], Call[None]], reason: str
) -> None:
    with pytest.raises(HttpApiError) as caught:
        await send(client, call(nsqd.http_address, "missing"))
    assert str(caught.value).startswith(f"nsqd {nsqd.http_address}: ")
    assert str(caught.value).endswith(reason)
    assert caught.value.message in reason


async def test_a_missing_channel_names_the_channel_error(
    client: httpx.AsyncClient, nsqd: Nsqd
) -> None:
    nsqd.create_channels(TOPIC)
    with pytest.raises(HttpApiError) as caught:
        await send(client, nsqd_api.delete_channel(nsqd.http_address, TOPIC, "none"))
    assert caught.value.message == "CHANNEL_NOT_FOUND"


async def test_an_nsqd_that_is_down_is_one_line(client: httpx.AsyncClient, nsqd: Nsqd) -> None:
    nsqd.stop()
    with pytest.raises(HttpApiError) as caught:
        await send(client, nsqd_api.create_topic(nsqd.http_address, TOPIC))
    assert str(caught.value) == f"nsqd {nsqd.http_address}: POST /topic/create: connection refused"


def test_the_sync_variant_reads_the_same(nsqd: Nsqd) -> None:
    """send_sync shares everything with send but the transport: the test harness uses it."""
    with httpx.Client(timeout=5.0) as client:
        send_sync(client, nsqd_api.create_topic(nsqd.http_address, TOPIC))
        stats = send_sync(client, nsqd_api.stats(nsqd.http_address, topic=TOPIC))
        with pytest.raises(HttpApiError, match="HTTP 404 TOPIC_NOT_FOUND"):
            send_sync(client, nsqd_api.delete_topic(nsqd.http_address, "missing"))
    assert stats.topic(TOPIC).channels == ()


# -- nsqlookupd -------------------------------------------------------------------------


async def test_lookupd_info(client: httpx.AsyncClient, lookupd: Nsqlookupd) -> None:
    info = await send(client, lookupd_api.info(lookupd.http_address))
    assert info.version == "1.3.0"


async def test_lookupd_topic_and_channel_admin(
    client: httpx.AsyncClient, lookupd: Nsqlookupd
) -> None:
    address = lookupd.http_address
    await send(client, lookupd_api.create_topic(address, TOPIC))
    await send(client, lookupd_api.create_channel(address, TOPIC, CHANNEL))
    assert await send(client, lookupd_api.topics(address)) == [TOPIC]
    assert await send(client, lookupd_api.channels(address, TOPIC)) == [CHANNEL]
    await send(client, lookupd_api.delete_channel(address, TOPIC, CHANNEL))
    assert await send(client, lookupd_api.channels(address, TOPIC)) == []
    await send(client, lookupd_api.delete_topic(address, TOPIC))
    assert await send(client, lookupd_api.topics(address)) == []
    with pytest.raises(HttpApiError) as caught:
        await send(client, lookupd_api.delete_channel(address, TOPIC, CHANNEL))
    assert str(caught.value) == (
        f"nsqlookupd {address}: POST /channel/delete: HTTP 404 CHANNEL_NOT_FOUND"
    )


async def test_a_tombstoned_producer_is_hidden_from_lookups(
    client: httpx.AsyncClient, cluster: Cluster
) -> None:
    address = cluster.lookupd.http_address
    cluster.nsqd.create_channels(TOPIC)
    cluster.lookupd.wait_for_topic(TOPIC, [cluster.nsqd])
    (producer,) = await send(client, lookupd_api.lookup(address, TOPIC))
    assert producer.tcp_address == cluster.nsqd.tcp_address

    await send(client, lookupd_api.tombstone_topic_producer(address, TOPIC, producer))

    assert await send(client, lookupd_api.lookup(address, TOPIC)) == []
    (node,) = await send(client, lookupd_api.nodes(address))
    assert (node.topics, node.tombstoned_topics) == ((TOPIC,), (TOPIC,))


# -- answers a real nsqd never gives: the junk server in its place ------------------------


@pytest.fixture
def fake() -> Iterator[JunkLookupd]:
    with JunkLookupd() as server:
        yield server


JUNK_STATS = {
    "html": (b"<html>bad gateway</html>", "invalid answer: not JSON"),
    "empty": (b"", "invalid answer: not JSON"),
    "nested": (b"[" * 100_000 + b"]" * 100_000, "invalid answer: JSON nested too deeply"),
    "no version": (b'{"topics": 7}', "invalid answer: no 'version' in the answer"),
    "depth as a string": (
        b'{"version": "1.3.0", "health": "OK", "start_time": 1, "producers": [],'
        b' "topics": [{"topic_name": "t", "depth": "7"}]}',
        "invalid answer: 'depth' is a string, not an integer",
    ),
    "topics as an object": (
        b'{"version": "1.3.0", "health": "OK", "start_time": 1, "producers": null,'
        b' "topics": {"t": 1}}',
        "invalid answer: 'topics' is an object, not an array",
    ),
}


@pytest.mark.parametrize(("body", "reason"), JUNK_STATS.values(), ids=JUNK_STATS.keys())
async def test_a_junk_stats_answer_is_one_line_naming_address_and_path(
    client: httpx.AsyncClient, fake: JunkLookupd, body: bytes, reason: str
) -> None:
    fake.answer_with("/stats", Reply(200, body))
    with pytest.raises(HttpApiError) as caught:
        await send(client, nsqd_api.stats(fake.address))
    assert str(caught.value) == f"nsqd {fake.address}: GET /stats: {reason}"


async def test_a_server_error_quotes_its_message_on_one_line(
    client: httpx.AsyncClient, fake: JunkLookupd
) -> None:
    fake.answer_with("/info", Reply(500, b'{"message": "line one\\nline two"}'))
    with pytest.raises(HttpApiError) as caught:
        await send(client, nsqd_api.info(fake.address))
    assert str(caught.value) == f"nsqd {fake.address}: GET /info: HTTP 500 line one line two"


# -- the blocking client -----------------------------------------------------------------


@pytest.fixture
def blocking() -> BlockingClient:
    return BlockingClient(connect_timeout=5.0, request_timeout=5.0)


def test_the_blocking_client_reads_the_same(blocking: BlockingClient, nsqd: Nsqd) -> None:
    blocking.send(nsqd_api.create_topic(nsqd.http_address, TOPIC))
    blocking.send(nsqd_api.create_channel(nsqd.http_address, TOPIC, CHANNEL))
    blocking.send(nsqd_api.pub(nsqd.http_address, TOPIC, b"one"))

    def channel_depth() -> int:
        stats = blocking.send(nsqd_api.stats(nsqd.http_address, topic=TOPIC))
        return stats.topic(TOPIC).channel(CHANNEL).depth

    # The topic hands a message to its channels in a goroutine of its own, after /pub
    # has answered: the channel's depth is 1 soon after, not at once.
    wait_until(lambda: channel_depth() == 1, 10, "the message in the channel")
    with pytest.raises(HttpApiError) as caught:
        blocking.send(nsqd_api.delete_topic(nsqd.http_address, "missing"))
    assert str(caught.value) == (
        f"nsqd {nsqd.http_address}: POST /topic/delete: HTTP 404 TOPIC_NOT_FOUND"
    )
    assert caught.value.message == "TOPIC_NOT_FOUND"


def test_the_blocking_client_reads_a_chunked_answer(blocking: BlockingClient, nsqd: Nsqd) -> None:
    """nsqd chunks an answer that outgrows Go's buffer (2 KiB): a /stats of many topics."""
    topics = [f"topic-{index:03}" for index in range(60)]
    for topic in topics:
        nsqd.create_channels(topic, CHANNEL)
    with httpx.Client(timeout=5.0) as plain:
        framing = plain.get(f"http://{nsqd.http_address}/stats?format=json").headers
    assert framing.get("transfer-encoding") == "chunked"
    stats = blocking.send(nsqd_api.stats(nsqd.http_address))
    assert sorted(topic.topic_name for topic in stats.topics) == topics


def test_the_blocking_client_sends_its_headers(fake: JunkLookupd) -> None:
    fake.answer("/topics", {"topics": ["t"]})
    agent = BlockingClient(1.0, 1.0, headers={"User-Agent": "nsq_stat/test"})
    assert agent.send(lookupd_api.topics(fake.address)) == ["t"]
    (headers,) = fake.request_headers
    assert headers["User-Agent"] == "nsq_stat/test"
    assert headers["Accept"] == "application/vnd.nsq; version=1.0"


@pytest.mark.parametrize(("body", "reason"), JUNK_STATS.values(), ids=JUNK_STATS.keys())
def test_the_blocking_client_tells_junk_as_httpx_does(
    blocking: BlockingClient, fake: JunkLookupd, body: bytes, reason: str
) -> None:
    fake.answer_with("/stats", Reply(200, body))
    with pytest.raises(HttpApiError) as caught:
        blocking.send(nsqd_api.stats(fake.address))
    assert str(caught.value) == f"nsqd {fake.address}: GET /stats: {reason}"


def test_the_blocking_client_quotes_a_server_error(
    blocking: BlockingClient, fake: JunkLookupd
) -> None:
    fake.answer_with("/info", Reply(502, b"<html>bad gateway</html>", "text/html"))
    with pytest.raises(HttpApiError) as caught:
        blocking.send(nsqd_api.info(fake.address))
    assert str(caught.value) == f"nsqd {fake.address}: GET /info: HTTP 502 Bad Gateway"


def test_the_blocking_client_tells_failures_as_httpx_does(nsqd: Nsqd) -> None:
    impatient = BlockingClient(connect_timeout=1.0, request_timeout=0.2)
    with nsqd.frozen(), pytest.raises(HttpApiError) as caught:
        impatient.send(nsqd_api.stats(nsqd.http_address), timeout_option="request-timeout")
    assert str(caught.value) == f"nsqd {nsqd.http_address}: GET /stats: timed out (request-timeout)"
    nsqd.stop()
    with pytest.raises(HttpApiError) as caught:
        impatient.send(nsqd_api.stats(nsqd.http_address))
    assert str(caught.value) == f"nsqd {nsqd.http_address}: GET /stats: connection refused"
    with pytest.raises(HttpApiError, match=r"^nsqd https://127.0.0.1:1: GET /stats: https: "):
        impatient.send(nsqd_api.stats("https://127.0.0.1:1"))


def test_a_server_that_closes_without_answering_is_one_line(blocking: BlockingClient) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = "{}:{}".format(*server.getsockname()[:2])

        def read_then_close() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(4096)

        closer = threading.Thread(target=read_then_close)
        closer.start()
        with pytest.raises(HttpApiError) as caught:
            blocking.send(nsqd_api.stats(address))
        closer.join()
    assert str(caught.value) == (
        f"nsqd {address}: GET /stats: server disconnected without sending a response"
    )


def answering(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A server that reads a request, writes `reply` and closes; and its thread."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer_once() -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(4096)
            connection.sendall(reply)

    thread = threading.Thread(target=answer_once)
    thread.start()
    return server, thread


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            "peer closed connection without sending complete message body "
            "(received 3 bytes, expected 10)",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "bad Content-Length"),
    ],
)
def test_an_answer_cut_short_or_bad_is_said_as_h11_says_it(
    blocking: BlockingClient, reply: bytes, said: str
) -> None:
    server, thread = answering(reply)
    with server:
        address = "{}:{}".format(*server.getsockname()[:2])
        with pytest.raises(HttpApiError) as caught:
            blocking.send(nsqd_api.stats(address))
        thread.join()
    assert str(caught.value) == f"nsqd {address}: GET /stats: {said}"


def test_a_plain_answer_is_read_without_h11(blocking: BlockingClient, nsqd: Nsqd) -> None:
    """nsq_stat and nsq topics start faster for it: nsqd's answers have a length."""
    code = (
        "import sys\n"
        "from nsqtools.httpapi import nsqd\n"
        "from nsqtools.httpapi.blocking import BlockingClient\n"
        f"BlockingClient(5.0, 5.0).send(nsqd.info({nsqd.http_address!r}))\n"
        "assert 'h11' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_clients_share_one_context_that_verifies_certificates(tls_nsqd: Nsqd) -> None:
    """nsqtools' httpx clients do not each load the CA certificates again (~50 ms of
    CPU a client), and still refuse a server whose certificate no CA vouches for."""
    with sync_client() as first, sync_client() as second:
        contexts = [client._transport._pool._ssl_context for client in (first, second)]  # type: ignore[attr-defined]
        assert contexts[0] is contexts[1]
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            first.get(f"https://{tls_nsqd.https_address}/ping")
