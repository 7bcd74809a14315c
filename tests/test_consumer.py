"""The consumer against real nsqd and nsqlookupd: draining, RDY, backoff, stops, limits.

nsqd's own /stats (depth, in_flight_count, ready_count) is the judge of what the
consumer did, not the consumer's counters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.consumer import Budget, Consumer, ConsumerOptions, ReceivedBatch, open_consumer
from nsqtools.errors import AuthError, ConnectError
from nsqtools.httpapi.nsqd import ChannelStats, ClientStats
from nsqtools.protocol import Message
from nsqtools.testing import LinkProxy, Nsqd
from nsqtools.testing.junklookupd import JUNK_LOOKUPS, JunkLookupd, lookup_answer, producer
from tests.conftest import Cluster, LocalNsq

TOPIC = "consumed"
CHANNEL = "tests"


def make_config(**settings: Any) -> ClientConfig:
    return dataclasses.replace(ClientConfig(), **settings)


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{index}".encode() for index in range(count)]


async def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Poll a condition (often nsqd's /stats) from a thread until it holds."""
    with trio.fail_after(timeout):
        while not await trio.to_thread.run_sync(condition):
            await trio.sleep(0.01)
    assert condition(), what


def channel(nsqd: Nsqd) -> ChannelStats:
    return nsqd.channel_stats(TOPIC, CHANNEL)


def drained(nsqd: Nsqd) -> bool:
    stats = channel(nsqd)
    return stats.depth == 0 and stats.in_flight_count == 0


async def consume(consumer: Consumer, count: int) -> list[tuple[str, bytes]]:
    """Take and FIN `count` messages; return (nsqd address, body) of each."""
    seen: list[tuple[str, bytes]] = []
    with trio.fail_after(20):
        async for batch in consumer:
            seen += [(batch.nsqd_address, message.body) for message in batch.messages]
            batch.finish()
            if len(seen) >= count:
                break
    return seen


async def test_two_nsqds_behind_a_lookupd_are_both_drained(cluster2: Cluster) -> None:
    cluster2.publish_many(TOPIC, lambda nsqd: bodies(nsqd.name, 50))
    config = make_config(max_in_flight=20)
    lookupds = [cluster2.lookupd.http_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
    ) as consumer:
        seen = await consume(consumer, 100)
    assert sorted(body for _, body in seen) == sorted(bodies("nsqd1", 50) + bodies("nsqd2", 50))
    assert {address for address, _ in seen} == {nsqd.tcp_address for nsqd in cluster2.nsqds}
    for nsqd in cluster2.nsqds:
        await wait_for(functools.partial(drained, nsqd), f"{nsqd.name} drained")


async def test_max_in_flight_one_drains_two_nsqds(cluster2: Cluster) -> None:
    cluster2.publish_many(TOPIC, lambda nsqd: bodies(nsqd.name, 5))
    config = make_config(max_in_flight=1, low_rdy_idle_timeout=1.0, rdy_redistribute_interval=0.05)
    lookupds = [cluster2.lookupd.http_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
    ) as consumer:
        seen = await consume(consumer, 10)
    assert {address for address, _ in seen} == {nsqd.tcp_address for nsqd in cluster2.nsqds}
    assert len(seen) == 10


async def test_low_rdy_timeout_moves_the_only_unit_from_a_busy_nsqd(cluster2: Cluster) -> None:
    """go-nsq's low_rdy_timeout: with max_in_flight 1 and two nsqds, the one holding RDY
    gives it up after that long even though it is never idle, so both are served long
    before the first is drained."""
    backlog = 100_000  # some seconds of work: far more than low_rdy_timeout
    for nsqd in cluster2.nsqds:
        nsqd.publish_many(TOPIC, bodies(nsqd.name, backlog))
    config = make_config(
        max_in_flight=1,
        low_rdy_idle_timeout=300.0,
        low_rdy_timeout=1.0,
        rdy_redistribute_interval=0.05,
    )
    lookupds = [cluster2.lookupd.http_address]
    served: dict[str, int] = {}
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
    ) as consumer:
        with trio.fail_after(30):
            async for batch in consumer:
                served[batch.nsqd_address] = served.get(batch.nsqd_address, 0) + len(batch)
                batch.finish()
                if len(served) == 2 or max(served.values()) == backlog:
                    break
    assert len(served) == 2, f"one nsqd drained before the other was served: {served}"


async def test_ready_never_exceeds_max_in_flight_in_total(cluster2: Cluster) -> None:
    cluster2.publish_many(TOPIC, lambda nsqd: [b"x"])
    config = make_config(max_in_flight=7)
    lookupds = [cluster2.lookupd.http_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
    ) as consumer:
        await consume(consumer, 2)  # after a message each, both connections have full shares

        def ready_counts() -> list[int]:
            return [channel(nsqd).clients[0].ready_count for nsqd in cluster2.nsqds]

        await wait_for(lambda: sorted(ready_counts()) == [3, 4], "RDY spread as 3 + 4")


async def test_restart_of_a_direct_nsqd_resumes_consumption(nsqd: Nsqd) -> None:
    published = bodies("restart", 40)
    nsqd.publish_many(TOPIC, published)
    config = make_config(max_in_flight=5)
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address])
    ) as consumer:
        first = await consume(consumer, 10)
        await trio.to_thread.run_sync(nsqd.restart)
        rest = await consume(consumer, 40 - len(first))
    assert {body for _, body in first + rest} == set(published)


async def test_restart_behind_a_lookupd_resumes_consumption(cluster: Cluster) -> None:
    published = bodies("lookup-restart", 40)
    cluster.nsqd.publish_many(TOPIC, published)
    config = make_config(max_in_flight=5, lookupd_poll_interval=0.1)
    lookupds = [cluster.lookupd.http_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
    ) as consumer:
        first = await consume(consumer, 10)
        await trio.to_thread.run_sync(cluster.nsqd.restart)
        rest = await consume(consumer, 40 - len(first))
    assert {body for _, body in first + rest} == set(published)


@pytest.mark.parametrize("junk", JUNK_LOOKUPS)
async def test_a_lookupd_turned_to_junk_costs_a_warning_per_poll_and_nothing_else(
    nsqd: Nsqd, junk: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The junk lookupd (a real one never answers junk): the nsqd it listed before keeps
    serving while every poll gets junk."""
    caplog.set_level(logging.WARNING, "nsqtools")
    config = make_config(max_in_flight=5, lookupd_poll_interval=0.01)
    with JunkLookupd() as lookupd:
        lookupd.answer_with("/lookup", lookup_answer(producer(nsqd.tcp_address)))
        nsqd.publish_many(TOPIC, bodies("before", 5))
        async with open_consumer(
            TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=[lookupd.address])
        ) as consumer:
            before = await consume(consumer, 5)
            lookupd.answer_with("/lookup", JUNK_LOOKUPS[junk])
            polls = len(lookupd.request_headers)
            await wait_for(lambda: len(lookupd.request_headers) > polls + 3, "three junk polls")
            nsqd.publish_many(TOPIC, bodies("after", 5))
            after = await consume(consumer, 5)
    assert sorted(body for _, body in before + after) == sorted(
        bodies("before", 5) + bodies("after", 5)
    )
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) >= 3
    assert all(message.startswith(f"nsqlookupd {lookupd.address}: ") for message in warnings)
    assert all("\n" not in message for message in warnings)


async def test_an_nsqd_given_twice_is_connected_once(
    nsqd: Nsqd, caplog: pytest.LogCaptureFixture
) -> None:
    published = bodies("twice", 300)
    nsqd.publish_many(TOPIC, published)
    config = make_config(max_in_flight=200)
    addresses = [nsqd.tcp_address, nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=addresses)
    ) as consumer:
        seen = await consume(consumer, 300)
        await wait_for(functools.partial(drained, nsqd), "every message FIN'd")
        assert len(channel(nsqd).clients) == 1
    assert sorted(body for _, body in seen) == sorted(published)
    assert "E_FIN_FAILED" not in caplog.text


def ready(nsqd: Nsqd) -> int:
    """The RDY count of the channel's only client (-1 while it has none)."""
    clients = channel(nsqd).clients
    return clients[0].ready_count if clients else -1


async def test_backoff_lowers_ready_and_recovers(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies("backoff", 3))
    config = make_config(max_in_flight=10, backoff_multiplier=0.5)

    address = [nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        batches = aiter(consumer)
        batch = await anext(batches)
        await wait_for(lambda: ready(nsqd) == 10, "full RDY before the failure")
        batch.requeue(delay=0)  # a failure: back off
        await wait_for(lambda: ready(nsqd) == 0, "RDY 0 during the backoff pause")
        await wait_for(lambda: ready(nsqd) == 1, "RDY 1 to test the water after the pause")
        with trio.fail_after(10):
            batch = await anext(batches)
        batch.finish()  # a success: back to full speed
        await wait_for(lambda: ready(nsqd) == 10, "full RDY again after a success")


async def test_a_requeue_without_backoff_keeps_backing_off(nsqd: Nsqd) -> None:
    """go-nsq's continue: while testing the water, a requeue without backoff is neither a
    success (full RDY) nor a failure: another pause (RDY 0), then RDY 1 again."""
    nsqd.publish_many(TOPIC, bodies("continue", 3))
    config = make_config(max_in_flight=10, backoff_multiplier=0.5)

    address = [nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        batches = aiter(consumer)
        (await anext(batches)).requeue(delay=0)  # a failure: back off
        await wait_for(lambda: ready(nsqd) == 1, "RDY 1 to test the water after the pause")
        with trio.fail_after(10):
            batch = await anext(batches)
        batch.requeue(delay=0, backoff=False)
        with trio.fail_after(10):
            while (after := await trio.to_thread.run_sync(ready, nsqd)) == 1:
                await trio.sleep(0.01)
        assert after == 0, "another pause, not full speed"
        await wait_for(lambda: ready(nsqd) == 1, "RDY 1 again after the pause")


async def test_max_attempts_hands_the_message_to_the_hook_which_answers_it(nsqd: Nsqd) -> None:
    """Past max_attempts a message is not handed out: the hook gets it in a batch of its
    own, and nothing FINs it until the hook does."""
    nsqd.publish(TOPIC, b"poison")
    given_up: list[ReceivedBatch] = []
    config = make_config(max_attempts=2)
    async with open_consumer(
        TOPIC,
        CHANNEL,
        config,
        ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address], give_up=given_up.append),
    ) as consumer:
        with trio.fail_after(10):
            async for batch in consumer:
                batch.requeue(delay=0, backoff=False)
                if batch.messages[0].attempts == 2:
                    break
        await wait_for(lambda: bool(given_up), "the give-up hook to be called")
        [exhausted] = given_up
        assert [(m.body, m.attempts) for m in exhausted.messages] == [(b"poison", 3)]
        assert channel(nsqd).in_flight_count == 1, "not FIN'd by the consumer"
        exhausted.finish()
        await wait_for(lambda: drained(nsqd), "the given-up message finished by the hook")


async def test_without_a_hook_a_message_given_up_is_logged_in_full(
    nsqd: Nsqd, caplog: pytest.LogCaptureFixture
) -> None:
    nsqd.publish(TOPIC, "poisön".encode())
    config = make_config(max_attempts=1)
    address = [nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        with trio.fail_after(10):
            (await anext(aiter(consumer))).requeue(delay=0, backoff=False)
        await wait_for(lambda: drained(nsqd), "the given-up message FIN'd")
    [line] = [r.getMessage() for r in caplog.records if "giving up" in r.getMessage()]
    envelope = json.loads(line[line.index("{") :])
    assert (envelope["body"], envelope["attempts"], envelope["topic"]) == ("poisön", 2, TOPIC)


async def test_stop_requeues_at_once_what_was_not_answered(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies("stop", 100))
    config = make_config(max_in_flight=50)
    address = [nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        batch = await anext(aiter(consumer))  # taken, never answered
        assert batch.messages
        await wait_for(lambda: channel(nsqd).in_flight_count > 0, "messages in flight")
    # nsqd's msg_timeout is 60s: a depth back at 100 within seconds means REQ 0 was sent.
    await wait_for(lambda: channel(nsqd).depth == 100, "depth back to 100", timeout=5)
    assert channel(nsqd).in_flight_count == 0


async def test_a_start_cancelled_while_a_dial_hangs_closes_what_it_connected(nsqd: Nsqd) -> None:
    """The second nsqd never answers its IDENTIFY; cancelling `starting` once the first
    has sent messages ends that dial at once, and the first closes cleanly: its messages
    back by REQ, not by nsqd's 60 s msg_timeout."""
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies("start", 20))
    starting = trio.CancelScope()

    async def cancel_once_sent() -> None:
        await wait_for(lambda: channel(nsqd).in_flight_count > 0, "messages sent")
        starting.cancel()

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        addresses = [nsqd.tcp_address, f"127.0.0.1:{silent.getsockname()[1]}"]
        options = ConsumerOptions(nsqd_tcp_addresses=addresses)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_once_sent)
                async with open_consumer(
                    TOPIC, CHANNEL, make_config(max_in_flight=10), options, starting
                ) as consumer:
                    consumer.stop()
    await wait_for(lambda: channel(nsqd).depth == 20, "all 20 back", timeout=5)
    assert (channel(nsqd).in_flight_count, channel(nsqd).timeout_count) == (0, 0)


async def test_limit_delivers_exactly_n_and_requeues_the_rest(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies("limit", 100))
    config = make_config(max_in_flight=50)
    address = [nsqd.tcp_address]
    delivered: list[bytes] = []
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address, budget=Budget(5))
    ) as consumer:
        with trio.fail_after(10):
            async for batch in consumer:
                delivered += [message.body for message in batch.messages]
                batch.finish()
    assert len(delivered) == 5
    await wait_for(lambda: channel(nsqd).depth == 95, "the other 95 back", timeout=5)
    assert channel(nsqd).in_flight_count == 0


async def test_is_starved_when_in_flight_fills_ready(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies("starve", 10))
    config = make_config(max_in_flight=10)
    address = [nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        assert not consumer.is_starved()
        batches = aiter(consumer)
        taken = [await anext(batches)]
        while sum(len(batch.messages) for batch in taken) < 10:
            taken.append(await anext(batches))
        # Starved: the whole window (RDY 10) in flight, every message handed out.
        assert consumer.is_starved()
        assert channel(nsqd).in_flight_count == 10
        for batch in taken:
            batch.finish()
        assert not consumer.is_starved()


async def test_not_starved_while_received_messages_wait_to_be_handed_out(nsqd: Nsqd) -> None:
    """A flush then would answer only part of the window: the rest is handed out first."""
    nsqd.publish_many(TOPIC, bodies("queued", 10))
    config = make_config(max_in_flight=10)
    address = [nsqd.tcp_address]
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        with trio.fail_after(10):
            while consumer.received < 10:  # all in flight, none taken
                await trio.sleep(0.01)
        assert not consumer.is_starved()


@pytest.mark.parametrize("answer", ["finish", "requeue"])
async def test_a_list_as_long_as_the_batch_answers_only_the_messages_in_it(
    nsqd: Nsqd, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """[m0, m0] on a batch of two answers m0 once; m1 stays in flight until answered."""
    address = [nsqd.tcp_address]

    def client() -> ClientStats:
        return channel(nsqd).clients[0]

    # One batch is what one read gives. nsqd flushes as it runs out of RDY (m0 and m1
    # in one write), or at its output buffer timeout, which at the default 250 ms could
    # fall between the two on a busy machine; this one falls after the test's end.
    config = make_config(max_in_flight=2, output_buffer_timeout=20.0)
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
    ) as consumer:
        batches = aiter(consumer)
        nsqd.publish(TOPIC, b"warm-up")
        (await anext(batches)).finish()  # a connection's RDY is 1 until its first message
        await wait_for(lambda: client().ready_count == 2, "RDY 2")
        await trio.to_thread.run_sync(nsqd.publish_many, TOPIC, [b"m0", b"m1"])
        with trio.fail_after(10):
            batch = await anext(batches)
        assert [message.body for message in batch.messages] == [b"m0", b"m1"]
        m0 = batch.messages[0]
        getattr(batch, answer)([m0, m0])
        await wait_for(lambda: client().in_flight_count < 2, "m0 answered")
        assert client().in_flight_count == 1, "m1 still in flight"
        with pytest.raises(ValueError, match="only its own"):
            batch.finish([Message(b"0" * 16, 0, 1, b"from elsewhere")])
        batch.finish()  # the rest: m1 alone
        await wait_for(lambda: client().in_flight_count == 0, "m1 finished")
        assert client().finish_count == (3 if answer == "finish" else 2)
    assert "FAILED" not in caplog.text


async def test_a_refused_direct_address_fails_at_start(nsqd: Nsqd) -> None:
    address = nsqd.tcp_address
    nsqd.stop()
    with pytest.raises(ConnectError, match=f"cannot connect to {address}"):
        async with open_consumer(
            TOPIC, CHANNEL, make_config(), ConsumerOptions(nsqd_tcp_addresses=[address])
        ):
            pass


async def test_auth_denied_fails_at_start(auth_nsqd: Nsqd) -> None:
    config = make_config(auth_secret="wrong")
    with pytest.raises(AuthError, match="denied AUTH"):
        async with open_consumer(
            TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=[auth_nsqd.tcp_address])
        ):
            pass


async def test_auth_denied_behind_a_lookupd_ends_iteration_with_the_error(
    local_nsq: LocalNsq,
) -> None:
    from nsqtools.testing.authd import AuthService

    with AuthService({"good": "alice"}) as service:
        lookupd = local_nsq.lookupd()
        nsqd = local_nsq.nsqd("authed", lookupds=[lookupd], auth_http_address=service.address)
        nsqd.publish(TOPIC, b"x")  # over HTTP, which AUTH does not guard
        config = make_config(auth_secret="wrong", lookupd_poll_interval=0.1)
        lookupds = [lookupd.http_address]
        with pytest.raises(AuthError, match="denied AUTH"):
            async with open_consumer(
                TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
            ) as consumer:
                with trio.fail_after(10):
                    async for _ in consumer:
                        pass


@pytest.mark.parametrize(
    ("skip_lookupd_authorization", "sent"), [(True, ["Bearer s3cret"]), (False, [])]
)
async def test_auth_secret_reaches_lookupd_as_go_nsq_sends_it(
    cluster: Cluster, skip_lookupd_authorization: bool, sent: list[str]
) -> None:
    """go-nsq v1.1.0: skip_lookupd_authorization true (the default), despite its name,
    sends auth_secret to nsqlookupd as a bearer token; false keeps it from nsqlookupd."""
    import httpx

    from nsqtools.testing.httpserver import LocalHttpServer, Reply

    authorizations: list[str] = []

    def forward(path: str, query: dict[str, str], headers: Mapping[str, str]) -> Reply:
        authorizations.extend(v for k, v in headers.items() if k.lower() == "authorization")
        answer = httpx.get(f"http://{cluster.lookupd.http_address}{path}", params=query)
        return Reply(answer.status_code, answer.content)

    cluster.nsqd.publish(TOPIC, b"found")
    config = make_config(
        auth_secret="s3cret", skip_lookupd_authorization=skip_lookupd_authorization
    )
    with LocalHttpServer(forward) as front:  # a recording front for the real nsqlookupd
        lookupds = [front.address]
        async with open_consumer(
            TOPIC, CHANNEL, config, ConsumerOptions(lookupd_http_addresses=lookupds)
        ) as consumer:
            assert [body for _, body in await consume(consumer, 1)] == [b"found"]
    assert set(authorizations) == set(sent)


def test_both_kinds_of_address_is_an_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        Consumer(
            TOPIC,
            CHANNEL,
            make_config(),
            ConsumerOptions(nsqd_tcp_addresses=["a:1"], lookupd_http_addresses=["b:2"]),
        )


async def test_touch_keeps_a_slow_message_from_timing_out(nsqd: Nsqd) -> None:
    nsqd.publish(TOPIC, b"slow work")
    config = make_config(msg_timeout=1.0)
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address])
    ) as consumer:
        batch = await anext(aiter(consumer))
        for _ in range(6):  # 2.4s of work on a message nsqd times out after 1s
            await trio.sleep(0.4)  # the slow handler being simulated
            batch.touch()
        batch.finish()
    await wait_for(lambda: drained(nsqd), "finished")
    assert channel(nsqd).timeout_count == 0


async def test_sample_rate_reaches_nsqd(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    config = make_config(sample_rate=37)
    async with open_consumer(
        TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address])
    ):
        await wait_for(lambda: bool(channel(nsqd).clients), "subscribed")
        assert channel(nsqd).clients[0].sample_rate == 37


async def test_a_batch_answered_after_a_reconnect_is_not_answered_on_the_new_connection(
    nsqd: Nsqd, caplog: pytest.LogCaptureFixture
) -> None:
    """A message belongs to the connection that delivered it. Messages held across a cut
    link are answered after the consumer reconnected: the answer is dropped (nsqd takes
    them back itself), never written on the new connection (E_FIN_FAILED there), and the
    new connection's in-flight count, so is_starved(), stays right."""
    nsqd.publish_many(TOPIC, bodies("cut", 30))
    config = make_config(max_in_flight=10)
    with LinkProxy(nsqd.tcp_address) as proxy:
        async with open_consumer(
            TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=[proxy.address])
        ) as consumer:
            batches = aiter(consumer)
            old = await take(batches, 10)
            assert consumer.is_starved()
            proxy.cut()
            new = await take(batches, 10)  # from the new connection, once it is starved
            await wait_for(lambda: channel(nsqd).client_count == 1, "the old client gone")
            assert consumer.is_starved()
            for batch in old:
                batch.finish()
            assert consumer.is_starved(), "the old answers counted against the new connection"
            assert channel(nsqd).clients[0].in_flight_count == 10
            for batch in new:
                batch.finish()
            await wait_for(lambda: channel(nsqd).clients[0].finish_count == 10, "10 FIN'd")
    assert "E_FIN_FAILED" not in caplog.text


async def take(batches: AsyncIterator[ReceivedBatch], count: int) -> list[ReceivedBatch]:
    """Batches holding `count` messages in all, left unanswered."""
    taken: list[ReceivedBatch] = []
    with trio.fail_after(20):
        while sum(map(len, taken)) < count:
            taken.append(await anext(batches))
    assert sum(map(len, taken)) == count
    return taken


OK_FRAME = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
JUNK_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x07"  # a frame type no nsqd sends


async def answer_then_send_junk(stream: trio.SocketStream) -> None:
    """Answer IDENTIFY and SUB as nsqd does; once RDY comes, send a frame of an unknown
    type."""
    received = bytearray()

    async def receive_more() -> None:
        data = await stream.receive_some()
        if not data:
            raise EOFError
        received.extend(data)

    async def take(count: int) -> bytes:
        while len(received) < count:
            await receive_more()
        taken = bytes(received[:count])
        del received[:count]
        return taken

    async def skip_line() -> None:
        while b"\n" not in received:
            await receive_more()
        del received[: received.index(b"\n") + 1]

    with contextlib.suppress(EOFError, trio.BrokenResourceError):
        await take(4)  # the magic
        await skip_line()  # IDENTIFY
        await take(int.from_bytes(await take(4), "big"))
        await stream.send_all(OK_FRAME)
        await skip_line()  # SUB
        await stream.send_all(OK_FRAME)
        await skip_line()  # RDY: subscribed
        await stream.send_all(JUNK_FRAME)
        while True:
            await receive_more()


async def test_an_nsqd_that_sends_junk_once_subscribed_is_redialled_ever_more_slowly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A scripted server (no real nsqd can be made to send junk) accepts every connection
    and SUB, then breaks the protocol: the consumer redials it after delays that grow, as
    after a failed dial, not every 0.5 s forever."""
    caplog.set_level(logging.INFO, "nsqtools.consumer")

    def delays() -> list[float]:
        found = (re.search(r"reconnecting in ([\d.]+)s", r.getMessage()) for r in caplog.records)
        return [float(match[1]) for match in found if match]

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, answer_then_send_junk, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        address = [f"127.0.0.1:{port}"]
        async with open_consumer(
            TOPIC, CHANNEL, make_config(), ConsumerOptions(nsqd_tcp_addresses=address)
        ):
            with trio.fail_after(20):
                while len(delays()) < 3:
                    await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    first, second, third = delays()[:3]
    assert second >= 1.5 * first and third >= 1.5 * second, delays()
