"""The scripted Youzan fork (nsqtools.testing.youzan) against its spec page, byte for byte.

Raw sockets and http.client only, never our client: these tests check the stand-in that
our client's tests rely on, so they must not share that client's mistakes. Every
expected byte is written out from /work/shared/spec/youzan.md.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nsqtools.testing.cluster import wait_until
from nsqtools.testing.youzan import ForkTopic, StoredMessage, YouzanCluster

VERSION = "0.3.7-HA.1.12.7"
V1 = {"Accept": "application/vnd.nsq; version=1.0"}
TIMEOUT = 5.0
RESPONSE, ERROR, MESSAGE = 0, 1, 2

TOPICS = (
    ForkTopic("plain", channels=("ch1",)),
    ForkTopic("ordered", ordered=True),
    ForkTopic("ext", extend=True),
    ForkTopic("locked", disable_channel_auto_create=True, channels=("known",)),
    ForkTopic("fresh"),
)


class Client:
    """A raw connection to one nsqd: commands out, frames in."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.sock.sendall(b"  V2")
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, line: bytes, body: bytes | None = None) -> None:
        sized = b"" if body is None else struct.pack(">i", len(body)) + body
        self.send(line + b"\n" + sized)

    def identify(self, **fields: Any) -> dict[str, Any]:
        self.command(b"IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode())
        answer = self.response()
        while answer == b"_heartbeat_":  # a fast heartbeat may come first
            answer = self.response()
        document: dict[str, Any] = json.loads(answer)
        return document

    def frame(self) -> tuple[int, bytes]:
        while True:
            if len(self.buffer) >= 8:
                size, frame_type = struct.unpack(">ii", self.buffer[:8])
                if len(self.buffer) >= 4 + size:
                    data, self.buffer = self.buffer[8 : 4 + size], self.buffer[4 + size :]
                    return frame_type, data
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the server")
            self.buffer += chunk

    def expect(self, frame_type: int) -> bytes:
        got, data = self.frame()
        assert got == frame_type, (got, data)
        return data

    def response(self) -> bytes:
        return self.expect(RESPONSE)

    def error(self) -> bytes:
        return self.expect(ERROR)

    def message(self) -> bytes:
        return self.expect(MESSAGE)

    def is_closed(self) -> bool:
        """True once the server closed the connection (within TIMEOUT), with no frame left."""
        try:
            return not self.buffer and self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def quiet(self, seconds: float = 0.2) -> bool:
        """Nothing arrives for `seconds`: a bounded check that a frame is NOT sent."""
        readable, _, _ = select.select([self.sock], [], [], seconds)
        return not self.buffer and not readable

    def close(self) -> None:
        self.sock.close()


Connect = Callable[..., Client]


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    with YouzanCluster(TOPICS) as cluster:
        yield cluster


@pytest.fixture
def connect(fork: YouzanCluster) -> Iterator[Connect]:
    clients: list[Client] = []

    def open_client(nsqd: int = 0, cluster: YouzanCluster = fork) -> Client:
        client = Client(cluster.nsqd_tcp_addresses[nsqd])
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        client.close()


def get(address: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(address, timeout=TIMEOUT)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def compact(document: Any) -> bytes:
    """JSON as Go's encoder writes it: no spaces, keys in the order given."""
    return json.dumps(document, separators=(",", ":")).encode()


def wrapped(data: Any) -> bytes:
    return compact({"status_code": 200, "status_txt": "OK", "data": data})


def wrapped_error(text: str) -> bytes:
    return compact({"status_code": 500, "status_txt": text, "data": None})


def port(address: str) -> int:
    return int(address.rpartition(":")[2])


def peer(fork: YouzanCluster, index: int) -> dict[str, Any]:
    """The page's peer record for nsqd `index`."""
    tcp = port(fork.nsqd_tcp_addresses[index])
    rpc = tcp + 100 if tcp <= 65435 else tcp - 100
    remote = f"127.0.0.1:{50000 + index}"
    return {
        "id": remote,
        "remote_address": remote,
        "hostname": "host",
        "broadcast_address": "127.0.0.1",
        "tcp_port": tcp,
        "http_port": port(fork.nsqd_http_addresses[index]),
        "version": VERSION,
        "distributed_id": f"127.0.0.1:{rpc}:{tcp}:{index + 1}",
    }


def meta(partition_num: int = 2, **flags: bool) -> dict[str, Any]:
    document: dict[str, Any] = {
        "disable_channel_auto_create": False,
        "extend_support": False,
        "multi_part": False,
        "ordered": False,
        "partition_num": partition_num,
        "replica": 1,
    }
    return {**document, **flags}


def trace_answer(message: StoredMessage, trace_id: int, raw_size: int) -> bytes:
    return b"OK" + struct.pack(">QQQI", message.internal_id, trace_id, message.offset, raw_size)


def message_frame(
    message: StoredMessage, attempts: int, ext: bytes | None = None, detail: bool = False
) -> bytes:
    """The page's MESSAGE layout; ext None: no ext part at all."""
    frame = struct.pack(">QH", message.timestamp, attempts)
    frame += struct.pack(">QQ", message.internal_id, message.trace_id)
    if ext is not None:
        frame += struct.pack(">BH", 4, len(ext)) + ext if ext else b"\x00"
    if detail:
        frame += struct.pack(">QI", message.offset, message.raw_size)
    return frame + message.body


def mpub(*bodies: bytes) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(body)) + body for body in bodies
    )


def ext_body(header: bytes, payload: bytes) -> bytes:
    return struct.pack(">H", len(header)) + header + payload


# nsqlookupd


def test_lookup_wrapped_with_metainfo_and_access_w_as_the_page_example(
    fork: YouzanCluster,
) -> None:
    status, body = get(fork.lookupd_http_address, "/lookup?topic=plain&access=w&metainfo=true")
    assert status == 200
    partitions = {"0": peer(fork, 0), "1": peer(fork, 1)}
    data = {
        "channels": ["ch1"],
        "meta": meta(),
        "partitions": partitions,
        "producers": [peer(fork, 0), peer(fork, 1)],
    }
    assert body == wrapped(data)


def test_lookup_v1_is_bare_and_meta_only_with_metainfo(fork: YouzanCluster) -> None:
    status, body = get(fork.lookupd_http_address, "/lookup?topic=ordered&metainfo=true", V1)
    assert status == 200
    assert body == compact(
        {
            "channels": [],
            "meta": meta(ordered=True),
            "partitions": {"0": peer(fork, 0), "1": peer(fork, 1)},
            "producers": [peer(fork, 0), peer(fork, 1)],
        }
    )
    # The old client's view: no access, no metainfo; producers plus partitions, no meta.
    status, body = get(fork.lookupd_http_address, "/lookup?topic=ordered")
    assert status == 200
    assert body == wrapped(
        {
            "channels": [],
            "partitions": {"0": peer(fork, 0), "1": peer(fork, 1)},
            "producers": [peer(fork, 0), peer(fork, 1)],
        }
    )


def test_lookup_of_one_partition(fork: YouzanCluster) -> None:
    _, body = get(fork.lookupd_http_address, "/lookup?topic=plain&access=r&partition=1", V1)
    assert body == compact(
        {"channels": ["ch1"], "partitions": {"1": peer(fork, 1)}, "producers": [peer(fork, 1)]}
    )


def test_lookup_refuses_an_invalid_access_mode(fork: YouzanCluster) -> None:
    path = "/lookup?topic=plain&access=rw"
    assert get(fork.lookupd_http_address, path, V1) == (
        400,
        b'{"message":"INVALID_ACCESS_MODE"}',
    )
    assert get(fork.lookupd_http_address, path) == (500, wrapped_error("INVALID_ACCESS_MODE"))


def test_lookup_of_an_unknown_topic(fork: YouzanCluster) -> None:
    empty: dict[str, Any] = {"channels": [], "partitions": {}, "producers": []}
    address = fork.lookupd_http_address
    assert get(address, "/lookup?topic=nope", V1) == (200, compact(empty))
    assert get(address, "/lookup?topic=nope&access=r") == (200, wrapped(empty))
    assert get(address, "/lookup?topic=nope&access=w", V1) == (404, b'{"message":"Key not found"}')
    assert get(address, "/lookup?topic=nope&access=w") == (500, wrapped_error("Key not found"))


def test_lookup_for_writing_drops_partitions_without_a_channel(
    fork: YouzanCluster, connect: Connect
) -> None:
    text = "Topic has no channel, should init at least one for the new topic"
    address = fork.lookupd_http_address
    assert get(address, "/lookup?topic=fresh&access=w", V1) == (404, compact({"message": text}))
    assert get(address, "/lookup?topic=fresh&access=w") == (500, wrapped_error(text))
    consumer = connect(1)
    consumer.command(b"SUB fresh c 1")
    assert consumer.response() == b"OK"
    assert get(address, "/lookup?topic=fresh&access=w", V1) == (
        200,
        compact(
            {"channels": ["c"], "partitions": {"1": peer(fork, 1)}, "producers": [peer(fork, 1)]}
        ),
    )


def test_lookup_for_writing_lists_nothing_until_writes_are_enabled(fork: YouzanCluster) -> None:
    fork.set_writable("plain", False)
    address = fork.lookupd_http_address
    empty = {"channels": ["ch1"], "partitions": {}, "producers": []}
    assert get(address, "/lookup?topic=plain&access=w", V1) == (200, compact(empty))
    _, readable = get(address, "/lookup?topic=plain&access=r", V1)
    assert json.loads(readable)["partitions"] == {"0": peer(fork, 0), "1": peer(fork, 1)}
    fork.set_writable("plain", True)
    _, writable = get(address, "/lookup?topic=plain&access=w", V1)
    assert json.loads(writable)["producers"] == [peer(fork, 0), peer(fork, 1)]


def test_lookupd_info_topics_channels(fork: YouzanCluster) -> None:
    """/listlookup, /nodes and the 404: tests/test_youzan_fork_http.py."""
    address = fork.lookupd_http_address
    assert get(address, "/info") == (200, wrapped({"version": VERSION, "ha_support": True}))
    assert get(address, "/info", V1) == (200, b'{"version":"0.3.7-HA.1.12.7","ha_support":true}')
    names = [topic.name for topic in TOPICS]
    assert get(address, "/topics", V1) == (200, compact({"topics": names}))
    assert get(address, "/channels?topic=locked", V1) == (200, b'{"channels":["known"]}')
    assert get(address, "/channels", V1) == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert get(fork.nsqd_http_addresses[1], "/ping") == (200, b"OK")


# nsqd: negotiation


def test_identify_answer(connect: Connect) -> None:
    client = connect()
    client.command(
        b"IDENTIFY",
        b'{"feature_negotiation":true,"msg_timeout":5000,"snappy":true,"tls_v1":true,'
        b'"desired_tag":"blue","extend_support":true}',
    )
    assert client.response() == (
        b'{"max_rdy_count":2500,"version":"0.3.7-HA.1.12.7","max_msg_timeout":900000,'
        b'"msg_timeout":5000,"tls_v1":false,"deflate":false,"deflate_level":0,'
        b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
        b'"output_buffer_size":100,"output_buffer_timeout":50,"desired_tag":"blue"}'
    )
    old = connect()
    old.command(b"IDENTIFY", b'{"client_id":"old"}')
    assert old.response() == b"OK"


@pytest.mark.parametrize(
    ("asked", "answered"),
    [({"deflate": True, "deflate_level": 3}, (0, 50)), ({"output_buffer_timeout": -1}, (0, 0))]
    + [({"output_buffer_timeout": asked}, (0, given)) for asked, given in ((5, 10), (300, 300))],
)
def test_identify_answers_deflate_level_0_and_the_output_buffer_timeout(
    connect: Connect, asked: dict[str, Any], answered: tuple[int, int]
) -> None:
    answer = connect().identify(**asked)
    assert (answer["deflate_level"], answer["output_buffer_timeout"]) == answered


def test_heartbeats_nop_and_cls(connect: Connect) -> None:
    client = connect()
    assert client.identify(heartbeat_interval=50)["msg_timeout"] == 60000
    assert client.response() == b"_heartbeat_"
    client.command(b"NOP")  # no answer to NOP: the next frame is the next heartbeat
    assert client.response() == b"_heartbeat_"
    consumer = connect()
    consumer.command(b"SUB plain ch1 0")
    assert consumer.response() == b"OK"
    consumer.command(b"CLS")
    assert consumer.response() == b"CLOSE_WAIT"


# nsqd: publishing


def test_pub_trace_answer_reproduces_the_page_example(
    fork: YouzanCluster, connect: Connect
) -> None:
    # Two messages of 50 raw bytes (4 + 26 + 20-byte body) put the next at offset 100;
    # sequences start at 2, so the third message has sequence 4.
    for body in (b"one", b"two"):
        fork.inject("plain", 1, body.ljust(20))
    client = connect(1)
    client.command(b"PUB_TRACE plain 1", bytes.fromhex("1122334455667788") + b"twelve bytes")
    answer = client.response()
    assert answer == bytes.fromhex(
        "4f4b 0004000000000004 1122334455667788 0000000000000064 0000002a"
    )
    stored = fork.stored("plain", 1)[-1]
    assert (stored.internal_id, stored.trace_id, stored.offset, stored.raw_size) == (
        2**50 + 4,
        0x1122334455667788,
        100,
        42,
    )
    assert stored.body == b"twelve bytes"


def test_a_partitions_first_message_has_sequence_2(connect: Connect) -> None:
    for partition in (0, 1):
        client = connect(partition)
        for sequence in (2, 3):
            client.command(b"PUB_TRACE plain %d" % partition, b"\0" * 8 + b"x")
            (internal_id,) = struct.unpack(">Q", client.response()[2:10])
            assert internal_id == (partition << 50) + sequence


def test_mpub_trace_answer_carries_the_first_id_and_offset_and_the_total_size(
    fork: YouzanCluster, connect: Connect
) -> None:
    fork.inject("plain", 0, b"earlier")
    client = connect(0)
    client.command(b"MPUB_TRACE plain 0", mpub(b"\0" * 7 + b"\1" + b"a", b"\0" * 7 + b"\2" + b"bb"))
    answer = client.response()
    first, second = fork.stored("plain", 0)[1:]
    assert answer == trace_answer(first, 0, 31 + 32)
    assert (first.trace_id, second.trace_id) == (1, 2)
    assert (first.offset, second.offset) == (37, 37 + 31)
    assert second.internal_id == first.internal_id + 1
    client.command(b"MPUB plain", mpub(b"x", b"y"))
    assert client.response() == b"OK"
    client.command(b"PUB plain 0", b"z")
    assert client.response() == b"OK"
    assert [m.body for m in fork.stored("plain", 0)] == [b"earlier", b"a", b"bb", b"x", b"y", b"z"]


def test_pub_ext_answers_by_trace_id_and_stores_the_tag(
    fork: YouzanCluster, connect: Connect
) -> None:
    client = connect(1)
    traced = b'{"##trace_id":"42","##client_dispatch_tag":"blue"}'
    client.command(b"PUB_EXT ext 1", ext_body(traced, b"payload"))
    answer = client.response()
    message = fork.stored("ext", 1)[0]
    # Extend topic: 4 + 26 + 1 version byte + 2 length bytes + the header + the body.
    assert message.raw_size == 33 + len(traced) + 7
    assert answer == trace_answer(message, 42, message.raw_size)
    assert (message.trace_id, message.tag, message.ext) == (42, "blue", traced)
    client.command(b"PUB_EXT ext", ext_body(b'{"k":"v"}', b"untraced"))
    assert client.response() == b"OK"
    plain = fork.stored("ext", 1)[1]
    assert (plain.trace_id, plain.tag, plain.ext, plain.body) == (0, "", b'{"k":"v"}', b"untraced")


def test_partitionless_pub_goes_to_the_partition_the_nsqd_leads(connect: Connect) -> None:
    with YouzanCluster([ForkTopic("three", partitions=3)]) as fork:
        for nsqd in (0, 1):
            client = connect(nsqd, fork)
            client.command(b"PUB three", b"from %d" % nsqd)
            assert client.response() == b"OK"
        # nsqd 0 leads partitions 0 and 2: the lowest.
        assert [(m.partition, m.body) for m in fork.stored("three")] == [
            (0, b"from 0"),
            (1, b"from 1"),
        ]


# nsqd: delivering


def test_message_frame_without_ext_or_detail(fork: YouzanCluster, connect: Connect) -> None:
    message = fork.inject("plain", 0, b"hello", timestamp=1_700_000_000_123_456_789)
    client = connect(0)
    client.command(b"SUB plain ch1 0")
    assert client.response() == b"OK"
    client.command(b"RDY 1")
    assert client.message() == message_frame(message, 1)


def test_message_frame_with_the_ext_header(fork: YouzanCluster, connect: Connect) -> None:
    client = connect(0)
    client.identify(extend_support=True)
    client.command(b"SUB ext ch 0")  # a new channel: it gets what is stored after it
    assert client.response() == b"OK"
    tagged = fork.inject("ext", 0, b"with", ext=b'{"a":1}', trace_id=7)
    bare = fork.inject("ext", 0, b"without")
    client.command(b"RDY 2")
    assert client.message() == message_frame(tagged, 1, ext=b'{"a":1}')
    assert client.message() == message_frame(bare, 1, ext=b"")


@pytest.mark.parametrize("command", [b"SUB_ADVANCED plain ch1 1", b"SUB_ORDERED plain ch1 1"])
def test_message_frame_with_detail(fork: YouzanCluster, connect: Connect, command: bytes) -> None:
    first = fork.inject("plain", 1, b"first")
    second = fork.inject("plain", 1, b"second")
    assert (first.offset, second.offset, second.raw_size) == (0, 35, 36)
    client = connect(1)
    client.command(command)
    assert client.response() == b"OK"
    client.command(b"RDY 1")
    assert client.message() == message_frame(first, 1, detail=True)
    client.send(b"FIN " + first.id + b"\n")
    assert client.message() == message_frame(second, 1, detail=True)


def test_a_binary_id_holding_newlines_is_finished(fork: YouzanCluster, connect: Connect) -> None:
    publisher = connect(0)
    publisher.command(b"PUB_TRACE plain 0", b"\x0a" * 8 + b"body")
    assert publisher.response()[10:18] == b"\x0a" * 8
    fork.inject("plain", 0, b"next")
    consumer = connect(0)
    consumer.command(b"SUB plain ch1 0")
    assert consumer.response() == b"OK"
    consumer.command(b"RDY 1")
    message = consumer.message()
    message_id = message[10:26]
    assert message_id == struct.pack(">QQ", 2, 0x0A0A0A0A0A0A0A0A)
    consumer.send(b"FIN " + message_id + b"\n")
    # The stream stayed in step: the next message comes, and FIN was read whole.
    assert consumer.message()[26:] == b"next"
    assert fork.finished("plain", "ch1") == [message_id]
    assert b"FIN " + message_id + b"\n" in fork.commands(0)


def test_sub_ordered_sends_one_at_a_time_and_a_requeued_message_first(
    fork: YouzanCluster, connect: Connect
) -> None:
    client = connect(1)
    client.command(b"SUB_ORDERED ordered ch 1")
    assert client.response() == b"OK"
    messages = [fork.inject("ordered", 1, b"m%d" % i) for i in range(3)]
    client.command(b"RDY 10")
    assert client.message() == message_frame(messages[0], 1, detail=True)
    assert client.quiet()  # RDY 10, yet one in flight
    client.send(b"REQ " + messages[0].id + b" 0\n")
    assert client.message() == message_frame(messages[0], 2, detail=True)
    client.send(b"FIN " + messages[0].id + b"\n")
    assert client.message() == message_frame(messages[1], 1, detail=True)
    assert client.quiet()
    client.send(b"FIN " + messages[1].id + b"\n")
    assert client.message() == message_frame(messages[2], 1, detail=True)
    offsets = [m.offset for m in messages]
    ids = [m.internal_id for m in messages]
    assert offsets == sorted(offsets) and ids == [2**50 + 2, 2**50 + 3, 2**50 + 4]


def test_req_touch_and_timeout_send_a_message_again(fork: YouzanCluster, connect: Connect) -> None:
    message = fork.inject("plain", 0, b"again")
    client = connect(0)
    client.identify(msg_timeout=150)
    client.command(b"SUB plain ch1 0")
    assert client.response() == b"OK"
    client.command(b"RDY 1")
    assert client.message() == message_frame(message, 1)
    client.send(b"REQ " + message.id + b" 0\n")
    assert client.message() == message_frame(message, 2)
    client.send(b"TOUCH " + message.id + b"\n")
    # Not FIN'd: after msg_timeout it comes back by itself.
    assert client.message() == message_frame(message, 3)
    client.send(b"FIN " + message.id + b"\n")
    client.send(b"FIN " + message.id + b"\n")  # twice: no longer in flight, not fatal
    # The id as Go prints a byte array (the page: "FIN [48 48 ...] failed ...").
    printed = b"[0 0 0 0 0 0 0 2 0 0 0 0 0 0 0 0]"
    assert message.id == bytes(7) + b"\2" + bytes(8)
    assert client.error() == b"E_FIN_FAILED FIN " + printed + (
        b" failed ErrType:7 ErrCode:0 : Message ID not in flight"
    )
    client.send(b"REQ " + message.id + b" 0\n")
    assert client.error() == b"E_REQ_FAILED REQ " + printed + b" failed Message ID not in flight"
    client.send(b"TOUCH " + message.id + b"\n")
    assert client.error() == (
        b"E_TOUCH_FAILED TOUCH " + printed + b" failed Message ID not in flight"
    )
    assert fork.finished("plain", "ch1") == [message.id]


def test_a_new_channel_starts_at_the_end_of_its_partition(
    fork: YouzanCluster, connect: Connect
) -> None:
    """Observed: SUB of a new channel on a partition holding messages got nothing; a
    channel created with the topic (ch1) has them all."""
    before = fork.inject("plain", 0, b"before")
    late = connect(0)
    late.command(b"SUB plain new 0")
    assert late.response() == b"OK"
    late.command(b"RDY 5")
    assert late.quiet()
    after = fork.inject("plain", 0, b"after")
    assert late.message() == message_frame(after, 1)
    assert late.quiet()
    early = connect(0)
    early.command(b"SUB plain ch1 0")
    assert early.response() == b"OK"
    early.command(b"RDY 5")
    assert [early.message(), early.message()] == [message_frame(m, 1) for m in (before, after)]
    # A channel that exists keeps its place while nobody is subscribed.
    late.send(b"FIN " + after.id + b"\n")
    late.close()
    wait_until(lambda: fork.connections() == 1, TIMEOUT, "the server saw late close")
    kept = fork.inject("plain", 0, b"kept")
    again = connect(0)
    again.command(b"SUB plain new 0")
    assert again.response() == b"OK"
    again.command(b"RDY 5")
    assert again.message() == message_frame(kept, 1)


def test_messages_stored_after_sub_are_delivered(fork: YouzanCluster, connect: Connect) -> None:
    client = connect(1)
    client.command(b"SUB plain ch1")
    assert client.response() == b"OK"
    client.command(b"RDY 5")
    injected = fork.inject("plain", 1, b"injected")
    assert client.message() == message_frame(injected, 1)
    publisher = connect(1)
    publisher.command(b"PUB plain", b"published")
    assert publisher.response() == b"OK"
    assert client.message()[26:] == b"published"


def test_consumers_of_a_channel_share_its_messages(fork: YouzanCluster, connect: Connect) -> None:
    consumers = [connect(0), connect(0)]
    for consumer in consumers:
        consumer.command(b"SUB plain shared 0")
        assert consumer.response() == b"OK"
        consumer.command(b"RDY 1")
    messages = [fork.inject("plain", 0, b"%d" % i) for i in range(2)]
    bodies = sorted(consumer.message()[26:] for consumer in consumers)
    assert bodies == [b"0", b"1"]
    assert all(consumer.quiet() for consumer in consumers)
    assert fork.stored("plain", 0) == messages


def tagged(fork: YouzanCluster, tag: str) -> StoredMessage:
    """A message on partition 0 of "ext", tagged as PUB_EXT's header tags it ("" none)."""
    header = json.dumps({"##client_dispatch_tag": tag}).encode() if tag else b""
    return fork.inject("ext", 0, tag.encode() or b"untagged", ext=header, tag=tag)


def tag_consumer(connect: Connect, tag: str = "", ready: int = 5) -> Client:
    """A consumer of channel ch of "ext" partition 0 with this desired_tag ("" none)."""
    client = connect(0)
    client.identify(extend_support=True, **({"desired_tag": tag} if tag else {}))
    client.command(b"SUB ext ch 0")
    assert client.response() == b"OK"
    client.command(b"RDY %d" % ready)
    return client


def test_a_tagged_message_goes_to_its_tags_consumers_the_others_to_the_untagged(
    fork: YouzanCluster, connect: Connect
) -> None:
    reds, others = tag_consumer(connect, "red", ready=0), tag_consumer(connect)
    red, blue, untagged, red_again = (tagged(fork, tag) for tag in ("red", "blue", "", "red"))
    # red waits for its tag's consumer, not ready yet, and the channel with it.
    assert others.quiet()
    reds.command(b"RDY 5")
    # blue has no consumer of its tag: it goes to the untagged consumer.
    assert [reds.message(), reds.message()] == [
        message_frame(m, 1, ext=m.ext) for m in (red, red_again)
    ]
    assert [others.message(), others.message()] == [
        message_frame(m, 1, ext=m.ext) for m in (blue, untagged)
    ]
    assert reds.quiet() and others.quiet()


def test_a_channel_of_tagged_consumers_stalls_at_a_message_none_of_them_wants(
    fork: YouzanCluster, connect: Connect
) -> None:
    reds = tag_consumer(connect, "red")
    red, blue, red_again = (tagged(fork, tag) for tag in ("red", "blue", "red"))
    assert reds.message() == message_frame(red, 1, ext=red.ext)
    reds.send(b"FIN " + red.id + b"\n")
    assert reds.quiet()  # blue waits for an untagged consumer, and red_again behind it
    others = tag_consumer(connect)
    assert others.message() == message_frame(blue, 1, ext=blue.ext)
    assert reds.message() == message_frame(red_again, 1, ext=red_again.ext)


def test_a_desired_tag_is_dropped_on_a_topic_without_tags(
    fork: YouzanCluster, connect: Connect
) -> None:
    client = connect(0)
    client.identify(desired_tag="red")
    client.command(b"SUB plain ch1 0")
    assert client.response() == b"OK"
    client.command(b"RDY 1")
    message = fork.inject("plain", 0, b"for anyone")
    assert client.message() == message_frame(message, 1)


@pytest.mark.parametrize(
    ("position", "first_body"),
    [
        (b"special:-1", b"later"),
        (b"virtual_queue:31", b"1"),  # message 0 is 4 + 26 + 1 bytes
        (b"msgcount:3", b"2"),  # 1-based: the third message
        (b"timestamp:1700000002", b"2"),
    ],
)
def test_sub_advanced_start_positions(
    fork: YouzanCluster, connect: Connect, position: bytes, first_body: bytes
) -> None:
    for second in range(3):
        fork.inject("plain", 0, b"%d" % second, timestamp=(1_700_000_000 + second) * 10**9)
    client = connect(0)
    client.command(b"SUB_ADVANCED plain ch1 0 " + position)
    assert client.response() == b"OK"
    fork.inject("plain", 0, b"later", timestamp=1_800_000_000 * 10**9)
    client.command(b"RDY 1")
    assert client.message()[38:] == first_body
    # A second client of the channel cannot move it.
    other = connect(0)
    other.command(b"SUB_ADVANCED plain ch1 0 msgcount:0")
    assert other.response() == b"OK"
    other.command(b"RDY 1")
    if first_body != b"later":
        assert other.message()[38:] != b"0"


# nsqd: errors


FATAL_CASES = [
    # The command's words as Go prints them: SUB_ORDER, ordered, ch, 0.
    (
        {},
        b"SUB_ORDER ordered ch 0\n",
        b"E_INVALID invalid command [[83 85 66 95 79 82 68 69 82] [111 114 100 101 114 101 100]"
        b" [99 104] [48]]",
    ),
    ({}, b"AUTH\n\0\0\0\2{}", b"E_AUTH_DISABLED AUTH Disabled"),
    ({}, b"PUB plain 0\n\0\0\0\0", b"E_BAD_BODY invalid body size 0"),
    (
        {},
        b"PUB_TRACE plain 0\n\0\0\0\5abcde",
        b"E_BAD_BODY invalid body size 5 with trace id enabled",
    ),
    (
        {},
        b"PUB_EXT ext 0\n\0\0\0\4\0\2{}",
        b"E_BAD_BODY invalid body size 4 in ext json header content length",
    ),
    (
        {},
        b"PUB ordered\n\0\0\0\1x",
        b"E_BAD_PARTITION topic partition is not valid for multi partition: -1",
    ),
    ({}, b"PUB nope\n\0\0\0\1x", b"E_TOPIC_NOT_EXIST "),
    ({}, b"PUB plain 1\n\0\0\0\1x", b"E_TOPIC_NOT_EXIST "),  # nsqd 0 leads partition 0
    ({}, b"SUB nope ch\n", b"E_TOPIC_NOT_EXIST "),
    (
        {},
        b"SUB ordered ch 0\n",
        b"E_SUB_ORDER_IS_MUST this topic is configured only allow ordered sub",
    ),
    (
        {},
        b"SUB ext ch\n",
        b"E_SUB_EXTEND_NEED this topic is extended and should identify as extend support.",
    ),
    (
        {"extend_support": True},
        b"SUB plain ch1\n",
        b"E_SUB_EXTEND_FORBIDDON this topic is not extended and should not identify as extend"
        b" support.",
    ),
    (
        {},
        b"SUB locked other\n",
        b"E_SUB_CHANNEL_NOT_REGISTERED channel is not registered under topic.",
    ),
    (
        {"sample_rate": 10},
        b"SUB_ORDERED ordered ch 0\n",
        b"E_INVALID order consume is not allowed while sample rate is not 0",
    ),
    (
        {"heartbeat_interval": -1},
        b"SUB plain ch1 0\n",
        b"E_INVALID cannot SUB with heartbeats disabled",
    ),
    (
        {"heartbeat_interval": -1},
        b"SUB_ORDERED ordered ch 0\n",
        b"E_INVALID cannot SUB with heartbeats disabled",
    ),
    ({}, b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
]


@pytest.mark.parametrize(("identify", "command", "error"), FATAL_CASES)
def test_fatal_errors_close_the_connection(
    connect: Connect, identify: dict[str, Any], command: bytes, error: bytes
) -> None:
    client = connect(0)
    if identify:
        client.identify(**identify)
    client.send(command + b"NOP\n")  # a command after it: unread, yet the frame arrives
    assert client.error().startswith(error)
    assert client.is_closed()


NON_FATAL_CASES = [
    (
        b'PUB_EXT plain 0\n\0\0\0\x0a\0\x07{"a":1}x',
        b"E_EXT_NOT_SUPPORT ext content not supported in topic plain",
    ),
    (
        b"PUB_EXT plain 0\n\0\0\0\3\0\0x",
        b"E_INVALID_JSON_HEADER fail to parse json header:cannot parse empty string",
    ),
    (b"PUB_EXT ext 0\n\0\0\0\5\0\2{xy", b"E_INVALID_JSON_HEADER fail to parse json header:"),
    (
        b'PUB_EXT ext 0\n\0\0\0\x13\0\x10{"##trace_id":7}x',
        b"INVALID_TRACE_ID passin trace id should be string",
    ),
    (
        b"INTERNAL_CREATE_TOPIC new 0\n",
        b"E_CREATE_TOPIC_FAILED CREATE_TOPIC is not allowed here while cluster feature enabled.",
    ),
]


@pytest.mark.parametrize(("command", "error"), NON_FATAL_CASES)
def test_non_fatal_errors_keep_the_connection(
    fork: YouzanCluster, connect: Connect, command: bytes, error: bytes
) -> None:
    client = connect(0)
    client.send(command + b"PUB plain 0\n\0\0\0\5after")
    assert client.error().startswith(error)
    assert client.response() == b"OK"
    assert [m.body for m in fork.stored("plain")] == [b"after"]


def test_the_extend_header_as_the_fork_reads_it(fork: YouzanCluster, connect: Connect) -> None:
    """Any JSON value is a header (one not an object has no keys), a tag that is no
    string is no tag, and MPUB_EXT takes a message with an empty header as a plain one,
    on any topic."""
    client = connect(0)
    client.command(b"PUB_EXT ext 0", ext_body(b"[]", b"array"))
    assert client.response() == b"OK"
    client.command(b"PUB_EXT ext 0", ext_body(b'{"##client_dispatch_tag":5}', b"number"))
    assert client.response() == b"OK"
    client.command(b"MPUB_EXT plain 0", mpub(ext_body(b"", b"a"), ext_body(b"", b"b")))
    assert client.response() == b"OK"
    stored = fork.stored("ext", 0) + fork.stored("plain", 0)
    assert [(m.body, m.ext, m.tag) for m in stored] == [
        (b"array", b"[]", ""),
        (b"number", b'{"##client_dispatch_tag":5}', ""),
        (b"a", b"", ""),
        (b"b", b"", ""),
    ]


@pytest.mark.parametrize("code", ["E_EXT_NOT_SUPPORT", "E_INVALID_JSON_HEADER", "E_PUB_FAILED"])
def test_a_scripted_refusal_of_a_pub_is_as_fatal_as_the_forks(
    fork: YouzanCluster, connect: Connect, code: str
) -> None:
    fork.refuse_next("plain", 0, code)
    client = connect(0)
    client.send(b"PUB plain 0\n\0\0\0\1xPUB plain 0\n\0\0\0\1y")
    assert client.error().startswith(code.encode() + b" ")
    assert client.response() == b"OK"


def test_too_much_waiting_is_fatal(fork: YouzanCluster, connect: Connect) -> None:
    """The fork sends E_PUB_TOO_MUCH_WAITING as a fatal error (nsqdserver/protocol_v2.go):
    the client may retry, on a new connection."""
    fork.refuse_next("plain", 0, "E_PUB_TOO_MUCH_WAITING")
    client = connect(0)
    client.send(b"PUB plain 0\n\0\0\0\1xNOP\n")
    assert client.error().startswith(b"E_PUB_TOO_MUCH_WAITING pub too much waiting in the queue")
    assert client.is_closed()


def test_subscribing_to_a_registered_channel(connect: Connect) -> None:
    client = connect(1)
    client.command(b"SUB locked known")
    assert client.response() == b"OK"


def test_not_leader_and_not_writable_are_not_fatal_on_pub(
    fork: YouzanCluster, connect: Connect
) -> None:
    client = connect(1)
    fork.refuse_next("plain", 1, "E_FAILED_ON_NOT_LEADER")
    fork.refuse_next("plain", 1, "E_FAILED_ON_NOT_WRITABLE")
    # "both with an empty description, trailing space, non-fatal"
    client.command(b"PUB plain 1", b"a")
    assert client.error() == b"E_FAILED_ON_NOT_LEADER "
    client.command(b"MPUB plain", mpub(b"b"))
    assert client.error() == b"E_FAILED_ON_NOT_WRITABLE "
    client.command(b"PUB plain 1", b"c")
    assert client.response() == b"OK"
    fork.set_writable("plain", False)
    client.command(b"PUB plain 1", b"d")
    assert client.error().startswith(b"E_FAILED_ON_NOT_WRITABLE ")
    fork.set_writable("plain", True)
    fork.refuse_next("plain", 1, "E_TOPIC_NOT_EXIST")
    client.command(b"PUB plain 1", b"e")
    assert client.error() == b"E_TOPIC_NOT_EXIST "
    assert client.is_closed()
    assert [m.body for m in fork.stored("plain")] == [b"c"]


@pytest.mark.parametrize("code", ["E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE"])
@pytest.mark.parametrize(
    "command", [b"SUB plain ch1 0", b"SUB_ADVANCED plain ch1 0", b"SUB_ORDERED plain ch1 0"]
)
def test_not_leader_and_not_writable_are_fatal_on_sub(
    fork: YouzanCluster, connect: Connect, code: str, command: bytes
) -> None:
    fork.refuse_next("plain", 0, code, on="sub")
    client = connect(0)
    client.command(command)
    assert client.error() == code.encode() + b" "
    assert client.is_closed()


def test_a_moved_partition_is_led_by_its_new_nsqd(fork: YouzanCluster, connect: Connect) -> None:
    consumer = connect(1)
    consumer.command(b"SUB plain ch1 1")
    assert consumer.response() == b"OK"
    fork.move_partition("plain", 1, 0)
    assert consumer.is_closed()
    _, body = get(fork.lookupd_http_address, "/lookup?topic=plain", V1)
    assert json.loads(body)["partitions"] == {"0": peer(fork, 0), "1": peer(fork, 0)}
    assert json.loads(body)["producers"] == [peer(fork, 0)]
    new = connect(0)
    new.command(b"PUB plain 1", b"moved")
    assert new.response() == b"OK"
    old = connect(1)
    old.command(b"PUB plain 1", b"stale")
    assert old.error() == b"E_FAILED_ON_NOT_LEADER "  # non-fatal, as during a move
    old.command(b"PUB plain 1", b"stale again")
    assert old.error() == b"E_FAILED_ON_NOT_LEADER "
    assert [m.body for m in fork.stored("plain", 1)] == [b"moved"]


# The harness itself


def test_commands_are_recorded_raw(fork: YouzanCluster, connect: Connect) -> None:
    client = connect(1)
    client.command(b"IDENTIFY", b"{}")
    assert client.response() == b"OK"
    client.command(b"PUB plain", b"x")
    assert client.response() == b"OK"
    assert fork.commands(1) == [b"IDENTIFY\n\0\0\0\2{}", b"PUB plain\n\0\0\0\1x"]
    assert fork.commands(0) == []
    assert fork.commands() == fork.commands(1)


def test_connections_end_cleanly_and_stop_is_safe_twice() -> None:
    fork = YouzanCluster(TOPICS)
    with fork:
        first = Client(fork.nsqd_tcp_addresses[0])
        second = Client(fork.nsqd_tcp_addresses[1])
        wait_until(lambda: fork.connections() == 2, TIMEOUT, "two connections")
        first.close()
        wait_until(lambda: fork.connections() == 1, TIMEOUT, "one connection left")
        started = time.monotonic()
    fork.stop()
    assert time.monotonic() - started < TIMEOUT
    assert second.is_closed()
    second.close()
    assert fork.connections() == 0
