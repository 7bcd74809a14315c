"""The scripted Youzan fork's leader move, as observed on a running fork (spec page,
"Observed on a running fork", Publishing and leadership): for a while the partition has
no writable leader, lookups for writing leave it out, and the old leader answers PUB
with not-writable, then not-leader, without closing the connection.

Raw sockets and http.client only, as in test_youzan_server.py: these check the stand-in
our client's tests rely on.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from nsqtools.testing.cluster import wait_until
from nsqtools.testing.youzan import ForkTopic, YouzanCluster

V1 = {"Accept": "application/vnd.nsq; version=1.0"}
TIMEOUT = 5.0
RESPONSE, ERROR = 0, 1
# Long enough that a test's few commands all fall in the window's first half.
LONG_WINDOW = 600.0


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    topics = [
        ForkTopic("solo", partitions=1, channels=("ch",)),
        ForkTopic("pair", partitions=2, channels=("ch",)),
    ]
    with YouzanCluster(topics) as cluster:
        yield cluster


class Publisher:
    """A raw connection to one nsqd that publishes and reads the answer frame."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.sock.sendall(b"  V2")
        self.file = self.sock.makefile("rb")

    def pub(self, topic: str, partition: int, body: bytes) -> tuple[int, bytes]:
        line = f"PUB {topic} {partition}\n".encode()
        self.sock.sendall(line + struct.pack(">i", len(body)) + body)
        size, frame_type = struct.unpack(">ii", self.file.read(8))
        return frame_type, self.file.read(size - 4)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@pytest.fixture
def publisher(fork: YouzanCluster) -> Iterator[list[Publisher]]:
    """One publisher on each nsqd."""
    publishers = [Publisher(address) for address in fork.nsqd_tcp_addresses]
    yield publishers
    for one in publishers:
        one.close()


def lookup(fork: YouzanCluster, query: str) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection(fork.lookupd_http_address, timeout=TIMEOUT)
    try:
        connection.request("GET", f"/lookup?{query}", headers=V1)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def leaders(document: dict[str, Any]) -> dict[str, int]:
    """The tcp port of each partition's leader, by partition id."""
    return {key: peer["tcp_port"] for key, peer in document["partitions"].items()}


def port(fork: YouzanCluster, nsqd: int) -> int:
    return int(fork.nsqd_tcp_addresses[nsqd].rpartition(":")[2])


NOT_WRITABLE = (ERROR, b"E_FAILED_ON_NOT_WRITABLE ")
NOT_LEADER = (ERROR, b"E_FAILED_ON_NOT_LEADER ")


def test_during_a_move_lookups_for_writing_list_nothing(fork: YouzanCluster) -> None:
    fork.move_partition("solo", 0, 1, window=LONG_WINDOW)
    status, document = lookup(fork, "topic=solo&access=w")
    assert (status, document["partitions"], document["producers"]) == (200, {}, [])
    status, document = lookup(fork, "topic=solo")  # reading: the old leader still serves
    assert (status, leaders(document)) == (200, {"0": port(fork, 0)})
    assert fork.moving("solo", 0)


def test_a_moving_partition_alone_is_left_out(fork: YouzanCluster) -> None:
    fork.move_partition("pair", 1, 0, window=LONG_WINDOW)
    _, document = lookup(fork, "topic=pair&access=w")
    assert leaders(document) == {"0": port(fork, 0)}
    assert [peer["tcp_port"] for peer in document["producers"]] == [port(fork, 0)]


def test_the_old_leader_answers_not_writable_and_keeps_the_connection(
    fork: YouzanCluster, publisher: list[Publisher]
) -> None:
    fork.move_partition("solo", 0, 1, window=LONG_WINDOW)
    assert publisher[0].pub("solo", 0, b"a") == NOT_WRITABLE
    assert publisher[0].pub("solo", 0, b"b") == NOT_WRITABLE  # the same connection
    assert publisher[1].pub("solo", 0, b"c") == NOT_WRITABLE  # the new one is not ready
    assert fork.stored("solo") == []


def test_after_a_move_the_new_leader_serves_and_the_old_says_not_leader(
    fork: YouzanCluster, publisher: list[Publisher]
) -> None:
    fork.move_partition("solo", 0, 1)  # no window: over at once
    assert not fork.moving("solo", 0)
    _, document = lookup(fork, "topic=solo&access=w")
    assert leaders(document) == {"0": port(fork, 1)}
    assert publisher[1].pub("solo", 0, b"new") == (RESPONSE, b"OK")
    assert publisher[0].pub("solo", 0, b"old") == NOT_LEADER
    assert publisher[0].pub("solo", 0, b"old") == NOT_LEADER  # the connection stays
    assert [m.body for m in fork.stored("solo")] == [b"new"]


def test_a_move_answers_not_writable_then_not_leader_then_moves(
    fork: YouzanCluster, publisher: list[Publisher]
) -> None:
    """Published to the old leader until the move is over: the answers come in the
    observed order, whatever the timing."""
    answers: list[tuple[int, bytes]] = []
    fork.move_partition("solo", 0, 1, window=0.4)

    def over() -> bool:
        answers.append(publisher[0].pub("solo", 0, b"x"))
        return not fork.moving("solo", 0)

    wait_until(over, 10, "the move's end")
    order = [NOT_WRITABLE, NOT_LEADER]
    ranks = [order.index(answer) for answer in answers]
    assert ranks == sorted(ranks)
    assert publisher[0].pub("solo", 0, b"x") == NOT_LEADER
    assert publisher[1].pub("solo", 0, b"y") == (RESPONSE, b"OK")
    assert [m.body for m in fork.stored("solo")] == [b"y"]


def test_a_partition_moves_once_at_a_time(fork: YouzanCluster) -> None:
    fork.move_partition("pair", 0, 1, window=LONG_WINDOW)
    with pytest.raises(ValueError, match="moving already"):
        fork.move_partition("pair", 0, 1)
    with pytest.raises(ValueError, match="negative"):
        fork.move_partition("pair", 1, 0, window=-1)


def test_stopping_ends_a_move_under_way() -> None:
    with YouzanCluster([ForkTopic("solo", partitions=1, channels=("ch",))]) as fork:
        fork.move_partition("solo", 0, 1, window=LONG_WINDOW)
    assert fork.moving("solo", 0)  # stop() returned without waiting for the window
