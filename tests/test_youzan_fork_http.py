"""The scripted Youzan fork's HTTP APIs against the spec page's "Observed on a running
fork": nsqd's /stats in the fork's shape, /pub, /pubtrace and /info; nsqlookupd's /nodes,
/listlookup and its 404.

http.client and raw sockets only, never our client: these check the stand-in our
client's tests rely on.
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

# Field names from the spec page (and the fork's nsqd/stats.go, for the ones the page
# leaves out).
TOPIC_FIELDS = {
    "topic_name",
    "topic_full_name",
    "topic_partition",
    "channels",
    "channel_num",
    "depth",
    "backend_depth",
    "backend_start",
    "message_count",
    "is_leader",
    "hourly_pubsize",
    "client_pub_stats",
    "client_num",
    "is_multi_ordered",
    "is_multi_part",
    "is_ext",
    "is_channel_auto_create_disabled",
    "pub_failed_cnt",
    "e2e_processing_latency",
}
CHANNEL_FIELDS = {
    "channel_name",
    "backlogs",
    "depth",
    "depth_size",
    "depth_ts",
    "backend_depth",
    "hourly_subsize",
    "in_flight_count",
    "deferred_count",
    "deferred_from_delay_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "clients",
    "client_num",
    "paused",
    "skipped",
    "delayed_queue_count",
    "e2e_processing_latency",
}
UPSTREAM_CLIENT_FIELDS = {
    "client_id",
    "hostname",
    "version",
    "remote_address",
    "state",
    "ready_count",
    "in_flight_count",
    "message_count",
    "finish_count",
    "requeue_count",
    "connect_ts",
    "sample_rate",
    "deflate",
    "snappy",
    "user_agent",
    "tls",
}


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    topics = [
        ForkTopic("t", partitions=3, channels=("ch", "other")),
        ForkTopic("ordered", ordered=True, channels=("ch",)),
    ]
    with YouzanCluster(topics) as cluster:
        yield cluster


def request(
    address: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(address, timeout=TIMEOUT)
    try:
        method = "GET" if body is None else "POST"
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def stats(fork: YouzanCluster, nsqd: int, query: str = "") -> dict[str, Any]:
    status, body = request(fork.nsqd_http_addresses[nsqd], f"/stats?format=json{query}", None, V1)
    assert status == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


class Consumer:
    """A raw SUB on one partition: IDENTIFY, SUB, RDY, and the frames after."""

    def __init__(self, address: str, topic: str, channel: str, partition: int) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        identify = json.dumps({"client_id": "reader", "desired_tag": "", "user_agent": "raw/1"})
        self.sock.sendall(b"  V2" + b"IDENTIFY\n" + struct.pack(">i", len(identify)))
        self.sock.sendall(identify.encode())
        assert self.frame() == (0, b"OK")
        self.sock.sendall(f"SUB {topic} {channel} {partition}\n".encode())
        assert self.frame() == (0, b"OK")

    def frame(self) -> tuple[int, bytes]:
        size, frame_type = struct.unpack(">ii", self._read(8))
        return frame_type, self._read(size - 4)

    def message_id(self) -> bytes:
        """The next message's 16-byte id (heartbeats skipped)."""
        frame_type, data = self.frame()
        while frame_type != 2:
            frame_type, data = self.frame()
        return data[10:26]

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the nsqd closed the connection"
            data += chunk
        return data


def test_stats_has_one_entry_per_partition_in_the_forks_shape(fork: YouzanCluster) -> None:
    # nsqd 0 leads partitions 0 and 2 of t, and the ordered topic's partition 0.
    document = stats(fork, 0)
    assert list(document) == ["version", "health", "start_time", "topics"]
    assert document["version"] == "0.3.7-HA.1.12.7"
    names = [(t["topic_name"], t["topic_partition"]) for t in document["topics"]]
    assert names == [("ordered", "0"), ("t", "0"), ("t", "2")]
    topic = document["topics"][1]
    assert set(topic) >= TOPIC_FIELDS
    assert "message_bytes" not in topic
    assert "paused" not in topic
    assert topic["topic_full_name"] == "t-0"
    channel = topic["channels"][0]
    assert set(channel) >= CHANNEL_FIELDS
    assert "client_count" not in channel
    assert [c["channel_name"] for c in topic["channels"]] == ["ch", "other"]
    assert topic["channel_num"] == 2
    # Without a topic the fork leaves the clients out (their number stays).
    assert channel["clients"] is None
    assert channel["client_num"] == 0


def test_stats_counts_come_from_the_shared_state(fork: YouzanCluster) -> None:
    for body in (b"one", b"two", b"three"):
        fork.inject("t", 2, body)
    consumer = Consumer(fork.nsqd_tcp_addresses[0], "t", "ch", 2)
    consumer.sock.sendall(b"RDY 1\n")
    first = consumer.message_id()

    def channel() -> dict[str, Any]:
        topic = stats(fork, 0, "&topic=t&partition=2&channel=ch")["topics"][0]
        found: dict[str, Any] = topic["channels"][0]
        return found

    wait_until(lambda: channel()["in_flight_count"] == 1, TIMEOUT, "one message in flight")
    counted = channel()
    assert counted["depth"] == 3  # nothing finished yet
    assert counted["message_count"] == 3
    assert counted["client_num"] == 1
    (client,) = counted["clients"]
    assert set(client) >= UPSTREAM_CLIENT_FIELDS
    assert client["client_id"] == "reader"
    assert client["user_agent"] == "raw/1"
    assert client["desired_tag"] == ""
    assert client["connect_ts"] > 0
    assert client["in_flight_count"] == 1

    consumer.sock.sendall(b"REQ " + first + b" 0\n")
    wait_until(lambda: channel()["requeue_count"] == 1, TIMEOUT, "the requeue counted")
    again = consumer.message_id()
    consumer.sock.sendall(b"FIN " + again + b"\n")
    wait_until(lambda: channel()["depth"] == 2, TIMEOUT, "one message finished")
    consumer.sock.close()


def test_stats_filters_by_topic_partition_and_channel(fork: YouzanCluster) -> None:
    topics = stats(fork, 0, "&topic=t")["topics"]
    assert [t["topic_partition"] for t in topics] == ["0", "2"]
    assert topics[0]["channels"][0]["clients"] == []  # asked for a topic: clients listed
    (only,) = stats(fork, 0, "&topic=t&partition=2&channel=other")["topics"]
    assert only["topic_partition"] == "2"
    assert [c["channel_name"] for c in only["channels"]] == ["other"]
    assert stats(fork, 1, "&topic=t")["topics"][0]["topic_partition"] == "1"


def test_stats_is_wrapped_for_an_old_client(fork: YouzanCluster) -> None:
    status, body = request(fork.nsqd_http_addresses[1], "/stats?format=json")
    document = json.loads(body)
    assert status == 200
    assert (document["status_code"], document["status_txt"]) == (200, "OK")
    assert document["data"]["topics"][0]["topic_partition"] == "1"


def test_pub_answers_ok_and_stores_in_the_partition_asked_for(fork: YouzanCluster) -> None:
    address = fork.nsqd_http_addresses[0]
    assert request(address, "/pub?topic=t&partition=2", b"hello") == (200, b"OK")
    assert [m.body for m in fork.stored("t", 2)] == [b"hello"]
    assert request(address, "/pub?topic=t", b"led") == (200, b"OK")
    assert [m.body for m in fork.stored("t", 0)] == [b"led"]


def test_pub_on_an_ordered_topic_without_a_partition_is_accepted(fork: YouzanCluster) -> None:
    assert request(fork.nsqd_http_addresses[0], "/pub?topic=ordered", b"x") == (200, b"OK")
    assert [m.body for m in fork.stored("ordered", 0)] == [b"x"]


def test_pub_refusals(fork: YouzanCluster) -> None:
    address = fork.nsqd_http_addresses[0]
    refused = (404, b'{"message":"E_TOPIC_NOT_EXIST"}')
    assert request(address, "/pub?topic=nope", b"x", V1) == refused
    status, body = request(address, "/pub?topic=nope", b"x")
    assert (status, json.loads(body)["status_txt"]) == (500, "E_TOPIC_NOT_EXIST")
    # Partition 1 is led by nsqd 1: this one does not hold it.
    assert request(address, "/pub?topic=t&partition=1", b"x", V1)[0] == 404
    assert request(address, "/pub?topic=t", b"", V1) == (406, b'{"message":"MSG_EMPTY"}')


def test_pubtrace_answers_the_trace_record(fork: YouzanCluster) -> None:
    fork.inject("t", 2, b"before")
    status, body = request(
        fork.nsqd_http_addresses[0], "/pubtrace?topic=t&partition=2&trace_id=42", b"x" * 11
    )
    stored = fork.stored("t", 2)[-1]
    assert status == 200
    assert stored.trace_id == 42
    assert body == (
        b'{"status":"OK","id":%d,"trace_id":"42","queue_offset":%d,"rawsize":41}'
        % (stored.internal_id, stored.offset)
    )
    assert stored.offset == fork.stored("t", 2)[0].raw_size


def test_pubtrace_without_a_trace_id_is_refused_in_v1_form(fork: YouzanCluster) -> None:
    answer = request(fork.nsqd_http_addresses[0], "/pubtrace?topic=t&partition=0", b"x")
    assert answer == (400, b'{"message":"INVALID_TRACE_ID"}')


def test_info_has_start_time(fork: YouzanCluster) -> None:
    status, body = request(fork.nsqd_http_addresses[0], "/info", None, V1)
    info = json.loads(body)
    assert status == 200
    assert info["ha_support"] is True
    assert isinstance(info["start_time"], int)
    assert info["start_time"] == stats(fork, 0)["start_time"]


def test_nodes_list_partitions_without_ids(fork: YouzanCluster) -> None:
    status, body = request(fork.lookupd_http_address, "/nodes", None, V1)
    assert status == 200
    first, second = json.loads(body)["producers"]
    assert "id" not in first
    assert "distributed_id" not in first
    assert first["partitions"] == {"t": ["0", "2"], "ordered": ["0"]}
    assert second["partitions"] == {"t": ["1"], "ordered": ["1"]}
    assert first["topics"] == ["t", "ordered"]
    assert first["tombstones"] == [False, False]


def test_listlookup_names_real_ports_and_epoch_zero(fork: YouzanCluster) -> None:
    status, body = request(fork.lookupd_http_address, "/listlookup", None, V1)
    leader = json.loads(body)["lookupdleader"]
    assert status == 200
    assert leader["ID"] == f"127.0.0.1:{leader['RpcPort']}:{leader['TcpPort']}:nsqlookup"
    assert leader["Epoch"] == 0
    assert leader["HttpPort"] == fork.lookupd_http_address.rpartition(":")[2]
    for key in ("TcpPort", "RpcPort"):
        # Real ports: something listens there.
        socket.create_connection(("127.0.0.1", int(leader[key])), timeout=TIMEOUT).close()


@pytest.mark.parametrize("headers", [None, V1], ids=["wrapped", "v1"])
def test_unknown_paths_are_v1_404s(fork: YouzanCluster, headers: dict[str, str] | None) -> None:
    expected = (404, b'{"message":"NOT_FOUND"}')
    assert request(fork.lookupd_http_address, "/nope", None, headers) == expected
    assert request(fork.nsqd_http_addresses[0], "/nope", None, headers) == expected
