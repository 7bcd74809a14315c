"""The scripted Youzan fork's start positions and channel routes, as a running fork did
them (/work/shared/spec/youzan.md, "Observed on a running fork"): SUB_ADVANCED with a
start position ignores its partition; msgcount is 1-based and fails on an empty
partition; the position errors' texts; nsqd's POST /channel/create and
/channel/setoffset (answers from the fork's nsqdserver/http.go); the first SUB_ORDERED
on a channel created over HTTP delivers its first message twice.

Raw sockets and http.client, never our client, as tests/test_youzan_server.py does.
Channels are created before the messages they are to get, so these hold whether a new
channel starts at the beginning of its partition or at its end.
"""

from __future__ import annotations

import http.client
import struct
from collections.abc import Iterator

import pytest

from nsqtools.testing import wait_until
from nsqtools.testing.youzan import ForkTopic, StoredMessage, YouzanCluster
from tests.test_youzan_server import TIMEOUT, Client, message_frame

PARTITION_SHIFT = 50
TOPICS = (
    # Four partitions on two nsqds: nsqd 0 leads partitions 0 and 2.
    ForkTopic("multi", partitions=4, channels=("ch",)),
    ForkTopic("plain", channels=("ch",)),
    ForkTopic("ordered", ordered=True),
    ForkTopic("locked", disable_channel_auto_create=True, channels=("known",)),
)


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    with YouzanCluster(TOPICS) as cluster:
        yield cluster


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    opened: list[Client] = []
    yield opened
    for client in opened:
        client.close()


def connect(fork: YouzanCluster, clients: list[Client], nsqd: int = 0) -> Client:
    client = Client(fork.nsqd_tcp_addresses[nsqd])
    clients.append(client)
    return client


def subscribe(client: Client, command: bytes, ready: int = 1) -> None:
    client.command(command)
    assert client.response() == b"OK"
    client.command(b"RDY %d" % ready)


def body_of(frame: bytes) -> bytes:
    """The body of a MESSAGE frame with the detail block (after SUB_ADVANCED)."""
    return frame[26 + 12 :]


def partition_of(frame: bytes) -> int:
    (internal_id,) = struct.unpack(">Q", frame[10:18])
    return int(internal_id >> PARTITION_SHIFT)


def post(address: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(address, timeout=TIMEOUT)
    try:
        connection.request("POST", path, body=body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def inject(fork: YouzanCluster, topic: str, partition: int, *bodies: bytes) -> list[StoredMessage]:
    return [fork.inject(topic, partition, body) for body in bodies]


# SUB_ADVANCED's start position


def test_sub_advanced_with_a_position_ignores_its_partition(
    fork: YouzanCluster, clients: list[Client]
) -> None:
    """Asked for partition 2 with msgcount:1, nsqd 0 serves partition 0 (the lowest it
    leads); the message's internal id says so. Without a position, partition 2."""
    inject(fork, "multi", 0, b"zero")
    inject(fork, "multi", 2, b"two")
    positioned = connect(fork, clients)
    subscribe(positioned, b"SUB_ADVANCED multi ch 2 msgcount:1")
    frame = positioned.message()
    assert (body_of(frame), partition_of(frame)) == (b"zero", 0)
    plain = connect(fork, clients)
    subscribe(plain, b"SUB_ADVANCED multi ch 2")
    frame = plain.message()
    assert (body_of(frame), partition_of(frame)) == (b"two", 2)


@pytest.mark.parametrize(("count", "first"), [(0, b"m1"), (1, b"m1"), (3, b"m3"), (9, None)])
def test_msgcount_is_one_based(
    fork: YouzanCluster, clients: list[Client], count: int, first: bytes | None
) -> None:
    inject(fork, "plain", 0, b"m1", b"m2", b"m3")
    client = connect(fork, clients)
    subscribe(client, b"SUB_ADVANCED plain ch 0 msgcount:%d" % count)
    if first is None:  # past the end: the end
        assert client.quiet()
        first = fork.inject("plain", 0, b"later").body
    assert body_of(client.message()) == first


@pytest.mark.parametrize(
    ("position", "error"),
    [
        (b"msgcount:1", b"E_INVALID commit log end of file"),  # the partition is empty
        (b"bogus:1", b"E_INVALID invalid consume offset:bogus:1"),
        (b"msgcount", b"E_INVALID invalid consume offset:msgcount"),
        (b"special:5", b"E_INVALID not supported offset type"),
        (b"msgcount:x", b'E_INVALID strconv.ParseInt: parsing "x": invalid syntax'),
        (b"timestamp:", b'E_INVALID strconv.ParseInt: parsing "": invalid syntax'),
    ],
)
def test_position_errors_are_fatal_with_the_forks_texts(
    fork: YouzanCluster, clients: list[Client], position: bytes, error: bytes
) -> None:
    client = connect(fork, clients)
    client.command(b"SUB_ADVANCED plain ch 0 " + position)
    assert client.error() == error
    assert client.is_closed()


# nsqd's channel routes


def test_channel_create_makes_the_channel_of_a_partition(
    fork: YouzanCluster, clients: list[Client]
) -> None:
    nsqd = fork.nsqd_http_addresses[1]
    assert post(nsqd, "/channel/create?topic=plain&partition=1&channel=made") == (200, b"")
    assert post(nsqd, "/channel/create?topic=plain&partition=1&channel=made") == (200, b"")
    client = connect(fork, clients, 1)
    subscribe(client, b"SUB plain made 1")
    stored = fork.inject("plain", 1, b"after")
    assert client.message() == message_frame(stored, 1)


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/channel/create?topic=nope&channel=c", 404, b"E_TOPIC_NOT_EXIST"),
        ("/channel/create?topic=plain&partition=1&channel=c", 404, b"E_TOPIC_NOT_EXIST"),
        ("/channel/create?channel=c", 400, b"MISSING_ARG_TOPIC"),
        ("/channel/create?topic=plain&partition=0", 400, b"MISSING_ARG_CHANNEL"),
        ("/channel/create?topic=plain&channel=c%20d", 400, b"INVALID_ARG_CHANNEL"),
        (
            "/channel/create?topic=plain&partition=x&channel=c",
            400,
            b'strconv.Atoi: parsing "x": invalid syntax',
        ),
        (
            "/channel/create?topic=locked&partition=0&channel=known",
            403,
            b"channel known not registered. channel should be initialized before use.",
        ),
    ],
)
def test_channel_create_errors(fork: YouzanCluster, path: str, status: int, message: bytes) -> None:
    """Always in v1's form, as the fork decorates the route; the text as it is, between
    quotes (nsqd 0 leads partition 0 only)."""
    answer = post(fork.nsqd_http_addresses[0], path)
    assert answer == (status, b'{"message":"' + message + b'"}')


@pytest.mark.parametrize(
    ("offset", "first"),
    [("msgcount:2", b"m2"), ("virtual_queue:{second}", b"m2"), ("timestamp:1700000003", b"m3")],
)
def test_channel_setoffset_then_sub_starts_the_partition_there(
    fork: YouzanCluster, clients: list[Client], offset: str, first: bytes
) -> None:
    nsqd = fork.nsqd_http_addresses[0]
    assert post(nsqd, "/channel/create?topic=multi&partition=2&channel=c")[0] == 200
    stored = [
        fork.inject("multi", 2, b"m%d" % n, timestamp=(1_700_000_000 + n) * 10**9)
        for n in (1, 2, 3)
    ]
    body = offset.format(second=stored[1].offset).encode()
    assert post(nsqd, "/channel/setoffset?topic=multi&partition=2&channel=c", body) == (200, b"")
    client = connect(fork, clients)
    subscribe(client, b"SUB multi c 2")
    frame = client.message()
    assert (frame[26:], partition_of(frame)) == (first, 2)


def test_channel_setoffset_moves_a_channel_with_clients(
    fork: YouzanCluster, clients: list[Client]
) -> None:
    """Unlike SUB_ADVANCED's position, the HTTP API's is forced."""
    client = connect(fork, clients)
    subscribe(client, b"SUB plain ch 0", ready=0)
    inject(fork, "plain", 0, b"m1", b"m2", b"m3")
    path = "/channel/setoffset?topic=plain&partition=0&channel=ch"
    assert post(fork.nsqd_http_addresses[0], path, b"msgcount:3")[0] == 200
    client.command(b"RDY 1")
    assert client.message()[26:] == b"m3"


@pytest.mark.parametrize(
    ("channel", "body", "status", "message"),
    [
        ("missing", b"msgcount:1", 404, b"CHANNEL_NOT_FOUND"),
        ("ch", b"", 406, b"MSG_EMPTY"),
        ("ch", b"bogus:1", 400, b"invalid consume offset:bogus:1"),
        ("ch", b"special:5", 500, b"not supported offset type"),
        ("ch", b"msgcount:1", 500, b"commit log end of file"),  # the partition is empty
        # The text as the fork puts it: a quote in it makes the body no valid JSON.
        ("ch", b"msgcount:x", 400, b'strconv.ParseInt: parsing "x": invalid syntax'),
    ],
)
def test_channel_setoffset_errors(
    fork: YouzanCluster, channel: str, body: bytes, status: int, message: bytes
) -> None:
    path = f"/channel/setoffset?topic=plain&partition=0&channel={channel}"
    answer = post(fork.nsqd_http_addresses[0], path, body)
    assert answer == (status, b'{"message":"' + message + b'"}')


# The duplicate first delivery


def test_the_first_sub_ordered_on_a_channel_created_over_http_sends_its_first_twice(
    fork: YouzanCluster, clients: list[Client]
) -> None:
    path = "/channel/create?topic=ordered&partition=1&channel=made"
    assert post(fork.nsqd_http_addresses[1], path) == (200, b"")
    client = connect(fork, clients, 1)
    subscribe(client, b"SUB_ORDERED ordered made 1", ready=10)
    first, second = inject(fork, "ordered", 1, b"first", b"second")
    frame = message_frame(first, 1, detail=True)
    assert (client.message(), client.message()) == (frame, frame)  # same id, attempts 1
    client.send(b"FIN " + first.id + b"\n")
    assert client.message() == message_frame(second, 1, detail=True)
    client.send(b"FIN " + first.id + b"\n")  # the copy's: not in flight
    assert client.error().startswith(b"E_FIN_FAILED ")
    client.send(b"FIN " + second.id + b"\n")
    client.command(b"NOP")
    assert client.quiet()  # not fatal, and nothing else came twice
    assert fork.finished("ordered", "made") == [first.id, second.id]


def test_only_the_first_sub_ordered_on_a_channel_created_over_http_sends_twice(
    fork: YouzanCluster, clients: list[Client]
) -> None:
    path = "/channel/create?topic=ordered&partition=1&channel=made"
    assert post(fork.nsqd_http_addresses[1], path)[0] == 200
    first = connect(fork, clients, 1)
    subscribe(first, b"SUB_ORDERED ordered made 1")
    (one,) = inject(fork, "ordered", 1, b"one")
    assert first.message() == first.message()
    first.send(b"FIN " + one.id + b"\n")
    wait_until(lambda: fork.finished("ordered", "made") == [one.id], TIMEOUT, "the FIN")
    open_before = fork.connections()
    first.close()
    # Gone for the fork too: else "two" may go to it first, and come again with 2 attempts.
    wait_until(lambda: fork.connections() < open_before, TIMEOUT, "the fork to see it closed")
    again = connect(fork, clients, 1)
    subscribe(again, b"SUB_ORDERED ordered made 1")
    (two,) = inject(fork, "ordered", 1, b"two")
    assert again.message() == message_frame(two, 1, detail=True)
    assert again.quiet()


def test_a_channel_made_by_sub_ordered_sends_each_message_once(
    fork: YouzanCluster, clients: list[Client]
) -> None:
    client = connect(fork, clients, 1)
    subscribe(client, b"SUB_ORDERED ordered fresh 1")
    (stored,) = inject(fork, "ordered", 1, b"once")
    assert client.message() == message_frame(stored, 1, detail=True)
    assert client.quiet()
