"""The Producer against real nsqd: every publish path, order, limits, modes and failures.

The evidence is what nsqd reports (topic depth, a channel's deferred count) and what a
real consumer (the Go nsq_tail) receives, not only our own counters. The encoders and
the host-selection policies are pure, tested without sockets, with the time passed in.
"""

from __future__ import annotations

import itertools
import random

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.errors import ConnectError, NsqErrorResponse
from nsqtools.hostpolicy import MODES, EpsilonGreedy, HostPool, RoundRobin
from nsqtools.httpapi.nsqd import ChannelStats
from nsqtools.producer import Producer, PublishOutcome, cut_points, open_producer
from nsqtools.producer.encoding import NamedLimits
from nsqtools.protocol import LocalProtocolError
from nsqtools.testing import Nsqd, run_go_tool
from tests.conftest import Cluster, LocalNsq

TOPIC = "producer"


def tail(nsqd: Nsqd, count: int, topic: str = TOPIC) -> list[bytes]:
    """The first `count` bodies a real consumer (Go's nsq_tail) receives, in order."""
    args = [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={topic}", f"-n={count}"]
    result = run_go_tool("nsq_tail", args, timeout=30)
    assert result.returncode == 0, result.stderr.decode()
    lines: list[bytes] = result.stdout.splitlines()
    return lines


def numbered(count: int) -> list[bytes]:
    return [b"%06d" % index for index in range(count)]


def outcomes(producer: Producer) -> tuple[int, int, dict[str, int]]:
    return producer.acknowledged, producer.failed, dict(producer.failure_reasons)


def channel_stats(nsqd: Nsqd, topic: str, channel: str) -> ChannelStats:
    (topic_stats,) = nsqd.stats(topic=topic, channel=channel).topics
    (stats,) = topic_stats.channels
    return stats


# -- the awaited calls ------------------------------------------------------------------


async def test_publish_arrives(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.publish(TOPIC, b"hello")
    assert nsqd.topic_depth(TOPIC) == 1
    assert tail(nsqd, 1) == [b"hello"]
    assert outcomes(producer) == (1, 0, {})


async def test_publish_many_arrives_in_order(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.publish_many(TOPIC, numbered(1000))
    assert tail(nsqd, 1000) == numbered(1000)
    assert outcomes(producer) == (1000, 0, {})


async def test_publish_many_of_nothing_sends_nothing(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.publish_many(TOPIC, [])
    assert nsqd.stats().topics == ()
    assert outcomes(producer) == (0, 0, {})


async def test_publish_deferred_is_held_back_by_nsqd(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "held")
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.publish_deferred(TOPIC, b"later", 3600)
    stats = channel_stats(nsqd, TOPIC, "held")
    assert (stats.deferred_count, stats.depth) == (1, 0)


async def test_a_deferral_over_nsqds_limit_is_its_error_answer(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        with pytest.raises(NsqErrorResponse) as raised:
            await producer.publish_deferred(TOPIC, b"too late", 2 * 3600)
    assert raised.value.code == "E_INVALID"
    assert str(raised.value).startswith(f"{nsqd.tcp_address}: E_INVALID")


async def test_many_publishes_in_flight_keep_their_order(nsqd: Nsqd) -> None:
    """2000 tasks publish at once; each body is numbered when its call is made."""
    sequence = itertools.count()
    pending_seen: list[int] = []
    async with open_producer(nsqd.tcp_address) as producer:

        async def publish_next() -> None:
            pending_seen.append(producer.pending)
            await producer.publish(TOPIC, b"%06d" % next(sequence))

        async with trio.open_nursery() as nursery:
            for _ in range(2000):
                nursery.start_soon(publish_next)
    assert max(pending_seen) > 1000  # many PUBs were waiting for answers at once
    assert tail(nsqd, 2000) == numbered(2000)
    assert outcomes(producer) == (2000, 0, {})


async def test_an_error_answer_is_raised_and_the_next_publish_dials_again(
    local_nsq: LocalNsq,
) -> None:
    nsqd = local_nsq.nsqd("small", extra_args=["--max-msg-size=1024"])
    async with open_producer(nsqd.tcp_address) as producer:
        with pytest.raises(NsqErrorResponse, match=r"E_BAD_MESSAGE PUB message too big 2000"):
            await producer.publish(TOPIC, b"x" * 2000)
        await producer.publish(TOPIC, b"fits")  # nsqd closed the first connection
    assert nsqd.topic_depth(TOPIC) == 1
    assert producer.failed == 1


async def test_a_bad_topic_name_is_refused_before_sending(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        with pytest.raises(LocalProtocolError, match="topic"):
            await producer.publish("bad!topic", b"x")
        with pytest.raises(LocalProtocolError, match="topic"):
            await producer.put("bad!topic", b"x")
    assert nsqd.stats().topics == ()


# -- limits -----------------------------------------------------------------------------


async def test_mpubs_over_nsqds_body_limit_are_split(local_nsq: LocalNsq) -> None:
    nsqd = local_nsq.nsqd("small-bodies", extra_args=["--max-body-size=4096"])
    alone = b"y" * 4090  # fits nsqd's message limit, but no MPUB body: sent as PUB
    bodies = [*numbered(500), alone, *numbered(500)]
    async with open_producer(nsqd.tcp_address, max_body_size=4096) as producer:
        await producer.publish_many(TOPIC, bodies)
        for body in bodies:
            await producer.put(TOPIC, body)
    assert tail(nsqd, 2 * len(bodies)) == bodies + bodies
    assert outcomes(producer) == (2 * len(bodies), 0, {})


async def test_a_smaller_body_limit_is_learned_from_nsqds_refusal(local_nsq: LocalNsq) -> None:
    """Told nothing, the producer cuts for nsqd's default 5 MiB; nsqd refuses with
    E_BAD_BODY naming its limit, and everything goes again in MPUBs under it."""
    nsqd = local_nsq.nsqd("small-bodies", extra_args=["--max-body-size=100000"])
    bodies = [b"%0100d" % index for index in range(5000)]
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.put_many(TOPIC, bodies)
        await producer.flush()
        assert outcomes(producer) == (5000, 0, {})
        assert producer.max_body_size == 100000  # later batches are cut under it at once
        await producer.publish_many(TOPIC, bodies)
    assert tail(nsqd, 10000) == bodies + bodies


async def test_only_the_records_over_nsqds_message_limit_fail(local_nsq: LocalNsq) -> None:
    nsqd = local_nsq.nsqd("small-messages", extra_args=["--max-msg-size=1000"])
    big = b"b" * 1507
    bodies = numbered(5000)
    bodies[2500] = big
    seen: list[PublishOutcome] = []
    async with open_producer(nsqd.tcp_address, on_outcome=seen.append) as producer:
        await producer.put_many(TOPIC, bodies)
    acknowledged, failed, reasons = outcomes(producer)
    assert (acknowledged, failed) == (4999, 1)
    (reason,) = reasons
    assert reason.startswith(f"{nsqd.tcp_address}: E_BAD_MESSAGE")
    assert "message too big 1507 > 1000" in reason
    assert [list(outcome.bodies) for outcome in seen if outcome.error] == [[big]]
    assert sum(len(outcome.bodies) for outcome in seen if not outcome.error) == 4999
    assert tail(nsqd, 4999) == bodies[:2500] + bodies[2501:]


async def test_a_known_oversize_message_fails_without_closing_the_connection_again(
    local_nsq: LocalNsq,
) -> None:
    nsqd = local_nsq.nsqd("small-messages", extra_args=["--max-msg-size=1000"])
    async with open_producer(nsqd.tcp_address) as producer:
        with pytest.raises(NsqErrorResponse, match="PUB message too big 1001 > 1000"):
            await producer.publish(TOPIC, b"x" * 1001)
        await producer.publish(TOPIC, b"first")
        connected_from = publishers(nsqd)
        with pytest.raises(NsqErrorResponse, match=r"PUB message too big 2000 > 1000"):
            await producer.publish(TOPIC, b"x" * 2000)  # refused as nsqd would, unsent
        await producer.publish(TOPIC, b"second")
        assert publishers(nsqd) == connected_from  # the same connection: nothing refused it
    assert tail(nsqd, 2) == [b"first", b"second"]
    assert producer.failed == 2


async def test_a_batch_over_a_known_body_limit_is_cut_before_it_is_sent(
    local_nsq: LocalNsq,
) -> None:
    """Two batches made before nsqd named its limit: once it refused the first, the
    second is cut before it is sent, not sent to be refused again (each refusal resets
    the connection, which can take the answers to commands before it along: those
    would be sent twice)."""
    nsqd = local_nsq.nsqd("small-bodies", extra_args=["--max-body-size=10000"])
    bodies = [b"%099d" % index for index in range(1000)]
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.put_many(TOPIC, bodies[:500])
        await producer.put_many(f"{TOPIC}-2", bodies[500:])  # another topic: another batch
    assert outcomes(producer) == (1000, 0, {})
    assert tail(nsqd, 500) == bodies[:500]
    assert nsqd.log_path.read_text().count("] - E_BAD_BODY") == 1  # refused once


def publishers(nsqd: Nsqd) -> list[str]:
    """Where nsqd's publishing clients connect from: a new connection, a new port."""
    return sorted(client.remote_address for client in nsqd.stats().producers)


async def test_an_nsqd_with_larger_limits_takes_what_the_defaults_would_cut(
    local_nsq: LocalNsq,
) -> None:
    big = b"L" * (5 * 1024 * 1024)  # over the default message and body limits
    nsqd = local_nsq.nsqd(
        "large", extra_args=["--max-msg-size=6000000", "--max-body-size=12000000"]
    )
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.publish(TOPIC, big)
        await producer.put_many(TOPIC, [b"a", big, b"b"])
    assert outcomes(producer) == (4, 0, {})
    assert nsqd.topic_depth(TOPIC) == 4


async def test_an_empty_message_is_refused_and_never_sent(nsqd: Nsqd) -> None:
    seen: list[PublishOutcome] = []
    async with open_producer(nsqd.tcp_address, on_outcome=seen.append) as producer:
        with pytest.raises(LocalProtocolError, match="empty"):
            await producer.publish(TOPIC, b"")
        with pytest.raises(LocalProtocolError, match="message 1 of 3: message body is empty"):
            await producer.publish_many(TOPIC, [b"a", b"", b"b"])
        await producer.put_many(TOPIC, [b"ok", b"", b"fine"], tokens=[1, 2, 3])
    assert outcomes(producer) == (2, 1, {"message body is empty: nsqd rejects empty messages": 1})
    assert [(outcome.tokens, outcome.error is None) for outcome in seen] == [
        ([2], False),
        ([1, 3], True),
    ]
    assert tail(nsqd, 2) == [b"ok", b"fine"]


# -- streaming --------------------------------------------------------------------------


async def test_streaming_counts_every_outcome_exactly(local_nsq: LocalNsq) -> None:
    nsqd = local_nsq.nsqd("small-messages", extra_args=["--max-msg-size=200"])
    async with open_producer(nsqd.tcp_address) as producer:
        for index, body in enumerate(numbered(1000)):
            await producer.put(TOPIC, body)
            if index % 200 == 0:
                await producer.put(TOPIC, b"")
                await producer.put(TOPIC, b"z" * 201)
        await producer.flush()
        assert producer.pending == 0
        acknowledged, failed, reasons = outcomes(producer)
    assert (acknowledged, failed) == (1000, 10)
    assert reasons["message body is empty: nsqd rejects empty messages"] == 5
    assert sum(count for reason, count in reasons.items() if "too big 201 > 200" in reason) == 5
    assert tail(nsqd, 1000) == numbered(1000)


async def test_outcomes_come_back_with_their_tokens_in_order(nsqd: Nsqd) -> None:
    seen: list[PublishOutcome] = []
    bodies = numbered(3000)
    async with open_producer(
        nsqd.tcp_address, max_body_size=4096, on_outcome=seen.append
    ) as producer:
        await producer.put_many(TOPIC, bodies[:1000], tokens=range(1000))
        await producer.put_many(TOPIC, bodies[1000:2000])
        for index in range(2000, 3000):
            await producer.put(TOPIC, bodies[index], token=index)
    assert all(outcome.error is None and outcome.topic == TOPIC for outcome in seen)
    assert [body for outcome in seen for body in outcome.bodies] == bodies
    tokens = [token for outcome in seen for token in outcome.tokens or [None] * len(outcome.bodies)]
    assert tokens == [*range(1000), *[None] * 1000, *range(2000, 3000)]


async def test_streamed_mpubs_in_flight_keep_their_order(nsqd: Nsqd) -> None:
    """Small MPUBs, so that many are pipelined on the one connection."""
    async with open_producer(nsqd.tcp_address, max_body_size=1024) as producer:
        for body in numbered(5000):
            await producer.put(TOPIC, body)
    assert tail(nsqd, 5000) == numbered(5000)
    assert outcomes(producer) == (5000, 0, {})


async def test_put_waits_while_too_many_messages_are_unacknowledged(nsqd: Nsqd) -> None:
    most_pending = 0
    async with open_producer(nsqd.tcp_address, max_unacknowledged=10) as producer:
        for body in numbered(1000):
            await producer.put(TOPIC, body)
            most_pending = max(most_pending, producer.pending)
    assert most_pending <= 10
    assert nsqd.topic_depth(TOPIC) == 1000


async def test_put_waits_while_too_many_bytes_are_unacknowledged(nsqd: Nsqd) -> None:
    most_pending = 0
    async with open_producer(nsqd.tcp_address, max_unacknowledged_bytes=1000) as producer:
        for _ in range(1000):
            await producer.put(TOPIC, b"b" * 100)
            most_pending = max(most_pending, producer.pending)
    assert most_pending <= 10  # messages of 100 bytes
    assert nsqd.topic_depth(TOPIC) == 1000


async def test_leaving_the_block_waits_for_every_answer(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        for body in numbered(500):
            await producer.put(TOPIC, body)
    assert producer.pending == 0
    assert nsqd.topic_depth(TOPIC) == 500


# -- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_publishing_to_a_dead_nsqd_fails_promptly_and_clearly(nsqd: Nsqd, mode: str) -> None:
    address = nsqd.tcp_address
    nsqd.stop()
    reason = f"cannot connect to {address}: connection refused"
    with trio.fail_after(10):  # a guard against hanging; the failure itself is immediate
        async with open_producer(address, mode=mode) as producer:
            with pytest.raises(ConnectError, match=reason):
                await producer.publish(TOPIC, b"lost")
            with pytest.raises(ConnectError, match=reason):
                await producer.publish_many(TOPIC, [b"lost", b"too"])
            for _ in range(100):
                await producer.put(TOPIC, b"lost")
            await producer.flush()
    assert outcomes(producer) == (0, 103, {reason: 103})


async def test_unknown_mode_is_a_one_line_value_error() -> None:
    expected = "unknown mode 'random': use one of all, round-robin, hostpool, epsilon-greedy"
    with pytest.raises(ValueError) as raised:
        Producer("127.0.0.1:4150", mode="random")
    assert str(raised.value) == expected


async def test_bad_addresses_and_limits_are_value_errors() -> None:
    with pytest.raises(ValueError, match="no nsqd address"):
        Producer([])
    with pytest.raises(ValueError, match="expected host:port"):
        Producer("localhost")
    with pytest.raises(ValueError, match="max_body_size must be at least 1, got 0"):
        Producer("127.0.0.1:4150", max_body_size=0)


async def test_the_block_s_own_error_propagates_as_itself_after_the_flush(nsqd: Nsqd) -> None:
    with pytest.raises(KeyError, match="the caller's"):
        async with open_producer(nsqd.tcp_address) as producer:
            await producer.put(TOPIC, b"kept")
            raise KeyError("the caller's")
    assert outcomes(producer) == (1, 0, {})
    assert nsqd.topic_depth(TOPIC) == 1


async def test_bad_arguments_fail_before_the_block() -> None:
    with pytest.raises(ValueError, match="no nsqd address"):
        async with open_producer([]):
            pytest.fail("the block ran")


async def test_publishing_outside_the_block_is_an_error() -> None:
    producer = Producer("127.0.0.1:4150")
    with pytest.raises(RuntimeError, match="async with"):
        await producer.publish(TOPIC, b"x")


# -- modes across nsqds -----------------------------------------------------------------


async def test_all_mode_puts_every_message_on_every_nsqd(cluster2: Cluster) -> None:
    addresses = [nsqd.tcp_address for nsqd in cluster2.nsqds]
    async with open_producer(addresses, mode="all") as producer:
        await producer.publish(TOPIC, b"one")
        await producer.publish_many(TOPIC, numbered(10))
        for body in numbered(100):
            await producer.put(TOPIC, body)
    assert [nsqd.topic_depth(TOPIC) for nsqd in cluster2.nsqds] == [111, 111]
    assert outcomes(producer) == (111, 0, {})


async def test_all_mode_fails_a_message_one_nsqd_did_not_take(cluster2: Cluster) -> None:
    live, dead = cluster2.nsqds
    dead.stop()
    reason = f"cannot connect to {dead.tcp_address}: connection refused"
    async with open_producer([live.tcp_address, dead.tcp_address], mode="all") as producer:
        with pytest.raises(ConnectError, match=reason):
            await producer.publish(TOPIC, b"half")
        for body in numbered(100):
            await producer.put(TOPIC, body)
    assert outcomes(producer) == (0, 101, {reason: 101})
    assert live.topic_depth(TOPIC) == 101  # published there, but not everywhere


async def test_round_robin_spreads_the_messages(cluster2: Cluster) -> None:
    addresses = [nsqd.tcp_address for nsqd in cluster2.nsqds]
    async with open_producer(addresses, mode="round-robin") as producer:
        for body in numbered(10):
            await producer.publish(TOPIC, body)
    assert [nsqd.topic_depth(TOPIC) for nsqd in cluster2.nsqds] == [5, 5]


@pytest.mark.parametrize("mode", ["round-robin", "all"])
async def test_an_outcome_names_the_nsqd_that_acknowledged_it(cluster2: Cluster, mode: str) -> None:
    addresses = [nsqd.tcp_address for nsqd in cluster2.nsqds]
    seen: list[PublishOutcome] = []
    async with open_producer(addresses, mode=mode, on_outcome=seen.append) as producer:
        for body in numbered(4):
            await producer.publish(TOPIC, body)
    # One nsqd picked per batch: it is named; in "all" mode every nsqd had it: none is.
    expected = addresses * 2 if mode == "round-robin" else [None] * 4
    assert [outcome.nsqd for outcome in seen] == expected


@pytest.mark.parametrize("mode", ["round-robin", "hostpool", "epsilon-greedy"])
async def test_a_batch_that_fails_is_retried_on_another_nsqd(cluster2: Cluster, mode: str) -> None:
    live, dead = cluster2.nsqds
    dead.stop()
    async with open_producer([live.tcp_address, dead.tcp_address], mode=mode) as producer:
        for body in numbered(10):
            await producer.publish(TOPIC, body)
        for body in numbered(100):
            await producer.put(TOPIC, body)
    assert outcomes(producer) == (110, 0, {})
    assert live.topic_depth(TOPIC) == 110


async def test_hostpool_skips_a_stopped_nsqd_until_its_retry_time(
    cluster2: Cluster, mock_clock: trio.testing.MockClock
) -> None:
    """Time stands still (mock_clock) until the test moves it past the retry delay."""
    first, second = cluster2.nsqds
    addresses = [first.tcp_address, second.tcp_address]
    async with open_producer(addresses, mode="hostpool", retry_delay=10) as producer:
        for _ in range(4):
            await producer.publish(TOPIC, b"both up")
        assert [nsqd.topic_depth(TOPIC) for nsqd in cluster2.nsqds] == [2, 2]

        second.stop()
        for _ in range(10):
            await producer.publish(TOPIC, b"second down")
        assert first.topic_depth(TOPIC) == 12

        second.start()  # same ports
        held = second.topic_depth(TOPIC)
        for _ in range(4):
            await producer.publish(TOPIC, b"second still skipped")
        assert (first.topic_depth(TOPIC), second.topic_depth(TOPIC)) == (16, held)

        mock_clock.jump(11)
        for _ in range(4):
            await producer.publish(TOPIC, b"second back")
        assert (first.topic_depth(TOPIC), second.topic_depth(TOPIC)) == (18, held + 2)
    assert outcomes(producer) == (22, 0, {})


async def test_epsilon_greedy_publishes_everything(cluster2: Cluster) -> None:
    addresses = [nsqd.tcp_address for nsqd in cluster2.nsqds]
    async with open_producer(addresses, mode="epsilon-greedy") as producer:
        for body in numbered(50):
            await producer.publish(TOPIC, body)
    assert sum(nsqd.topic_depth(TOPIC) for nsqd in cluster2.nsqds) == 50
    assert outcomes(producer) == (50, 0, {})


# -- encoding (pure) --------------------------------------------------------------------


@given(st.lists(st.integers(1, 100), max_size=100), st.integers(12, 300))
def test_cut_points_cover_everything_in_order_within_the_limit(
    sizes: list[int], max_body_size: int
) -> None:
    ranges = cut_points(sizes, max_body_size)
    assert all(start < end for start, end in ranges)
    assert [index for start, end in ranges for index in range(start, end)] == list(
        range(len(sizes))
    )
    for start, end in ranges:
        chunk = sizes[start:end]
        assert end - start == 1 or 4 + 4 * len(chunk) + sum(chunk) <= max_body_size
        if end < len(sizes):  # the next message would not have fitted
            assert 4 + 4 * (len(chunk) + 1) + sum(chunk) + sizes[end] > max_body_size


def test_the_limits_an_nsqd_names_refuse_what_breaks_them_in_advance() -> None:
    limits = NamedLimits()
    assert not limits.known
    limits.learn("E_BAD_BODY", "MPUB body too big 6024 > 4096", [1000] * 6)
    assert (limits.max_body_size, limits.max_message_size) == (4096, None)
    assert limits.refusal([1000] * 4) is None  # 4 + 4 * 4 + 4000 fits
    assert limits.refusal([1000] * 5) == ("E_BAD_BODY", "MPUB body too big 5024 > 4096")
    assert limits.refusal([5000]) is None  # alone, a message is a PUB: no MPUB body
    limits.learn("E_BAD_MESSAGE", "PUB message too big 5000 > 1024", [5000])
    assert limits.refusal([5000]) == ("E_BAD_MESSAGE", "PUB message too big 5000 > 1024")
    assert limits.refusal([10, 2000]) == ("E_BAD_MESSAGE", "MPUB message too big 2000 > 1024")


def test_a_limit_nsqd_does_not_name_is_guessed_from_what_it_refused() -> None:
    limits = NamedLimits()
    limits.learn("E_BAD_BODY", "", [100, 100])
    assert limits.max_body_size == 4 + 2 * 4 + 200 - 1
    limits.learn("E_BAD_MESSAGE", "", [300])
    assert limits.max_message_size == 299
    limits.learn("E_BAD_MESSAGE", "", [10, 400])  # which message broke it is unknown
    assert limits.max_message_size == 299


# -- host selection (pure, the time passed in) ------------------------------------------


def picks(policy: RoundRobin | HostPool, now: float, count: int) -> list[int]:
    return [policy.pick(now) for _ in range(count)]


def test_round_robin_takes_hosts_in_turn_whatever_failed() -> None:
    policy = RoundRobin(3)
    policy.mark_failed(1, now=0)
    assert picks(policy, 0, 6) == [0, 1, 2, 0, 1, 2]


def test_round_robin_retries_on_a_host_that_is_not_failing() -> None:
    policy = RoundRobin(3)
    policy.mark_failed(1, now=0)
    assert policy.pick(0) == 0
    assert policy.pick_another(0, tried=[0]) == 2
    assert policy.pick_another(0, tried=[0, 2]) is None
    policy.mark_success(1, now=0, response_time=0.01)
    assert policy.pick_another(0, tried=[0, 2]) == 1


def test_hostpool_skips_a_failed_host_until_its_retry_time() -> None:
    policy = HostPool(3, retry_delay=30, max_retry_delay=100)
    policy.mark_failed(1, now=0)
    assert picks(policy, 10, 4) == [0, 2, 0, 2]
    assert picks(policy, 31, 3) == [0, 1, 2]  # retried: the next delay doubles to 60
    assert picks(policy, 60, 3) == [0, 2, 0]
    assert picks(policy, 92, 3) == [1, 2, 0]  # retried: the next delay is capped at 100
    assert picks(policy, 191, 2) == [2, 0]
    assert picks(policy, 193, 1) == [1]
    policy.mark_success(1, now=193, response_time=0.01)
    assert picks(policy, 193, 3) == [2, 0, 1]


def test_hostpool_tries_every_host_again_when_all_are_down() -> None:
    policy = HostPool(2, retry_delay=30)
    policy.mark_failed(0, now=0)
    policy.mark_failed(1, now=0)
    assert policy.pick_another(1, tried=[]) is None
    assert picks(policy, 1, 3) == [0, 1, 0]
    assert policy.pick_another(1, tried=[0]) == 1  # all live again


def test_hostpool_retries_only_on_a_live_host() -> None:
    policy = HostPool(3)
    policy.mark_failed(2, now=0)
    assert policy.pick_another(1, tried=[0]) == 1
    assert policy.pick_another(1, tried=[0, 1]) is None


def test_epsilon_greedy_mostly_picks_the_fastest_host() -> None:
    policy = EpsilonGreedy(2, rng=random.Random(7))
    for now in range(10):
        policy.mark_success(0, now, response_time=0.001)
        policy.mark_success(1, now, response_time=0.1)
    chosen = picks(policy, 10, 1000)
    assert chosen.count(0) > 950
    assert chosen.count(1) > 0  # exploration, and the slower host's small weight
    assert policy.epsilon == EpsilonGreedy.MIN_EPSILON  # exploring decayed it


def test_epsilon_greedy_takes_turns_while_no_response_time_is_known() -> None:
    policy = EpsilonGreedy(3, rng=random.Random(1))
    assert picks(policy, 0, 6) == [0, 1, 2, 0, 1, 2]


def test_epsilon_greedy_weighs_recent_response_times_more_and_forgets_old_ones() -> None:
    policy = EpsilonGreedy(2, decay_duration=120, rng=random.Random(3))  # 1s buckets
    policy.mark_success(0, now=0, response_time=0.5)
    policy.mark_success(0, now=60, response_time=0.1)
    assert policy.average_response_time(0, now=60) == pytest.approx((60 * 0.5 + 120 * 0.1) / 180)
    assert policy.average_response_time(0, now=121) == pytest.approx(0.1)
    assert policy.average_response_time(0, now=181) == 0


def test_epsilon_greedy_skips_a_failed_host() -> None:
    policy = EpsilonGreedy(2, rng=random.Random(5))
    policy.mark_success(0, now=0, response_time=0.001)
    policy.mark_success(1, now=0, response_time=0.1)
    policy.mark_failed(0, now=0)
    assert set(picks(policy, 1, 100)) == {1}


# -- put_many and deferred puts ---------------------------------------------------------


async def test_put_many_keeps_order_and_counts(nsqd: Nsqd) -> None:
    bodies = numbered(5000)
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.put_many(TOPIC, bodies[:2500])
        await producer.put_many(TOPIC, bodies[2500:])
        await producer.flush()
        assert outcomes(producer) == (5000, 0, {})
    assert tail(nsqd, 5000) == bodies


async def test_deferred_puts_are_held_back_by_nsqd(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, "held")
    async with open_producer(nsqd.tcp_address) as producer:
        await producer.put_many(TOPIC, [b"a", b"b", b"c"], delay=3600)
        await producer.put(TOPIC, b"d", delay=3600)
        await producer.flush()
        assert outcomes(producer) == (4, 0, {})
    stats = channel_stats(nsqd, TOPIC, "held")
    assert (stats.deferred_count, stats.depth) == (4, 0)


async def test_a_negative_delay_is_refused_before_queueing(nsqd: Nsqd) -> None:
    async with open_producer(nsqd.tcp_address) as producer:
        with pytest.raises(LocalProtocolError, match="must not be negative"):
            await producer.put(TOPIC, b"x", delay=-1)
        with pytest.raises(LocalProtocolError, match="must not be negative"):
            await producer.put_many(TOPIC, [b"x"], delay=-1)
