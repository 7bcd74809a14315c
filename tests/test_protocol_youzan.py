"""The Youzan fork's wire, sans-IO: commands byte for byte, the 30-byte trace answer, the
message layout with and without extend header and detail, binary ids, start positions,
and the lookup records read from the exact JSON of ../shared/spec/youzan.md."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.errors import NsqErrorResponse
from nsqtools.httpapi.call import HttpAnswer, read_answer
from nsqtools.httpapi.lookupd import TopicMeta, list_lookup, topic_lookup
from nsqtools.protocol import (
    ErrorFrame,
    FrameDecoder,
    LocalProtocolError,
    Message,
    MessageBatch,
    RemoteProtocolError,
    commands,
    youzan,
)
from nsqtools.protocol.youzan import ForkMessage, MessageLayout, StartPosition, TraceAnswer

# The page's example answer to PUB_TRACE.
TRACE_ANSWER = bytes.fromhex("4f4b0004000000000004112233445566778800000000000000640000002a")
# An id whose both halves are full of newlines: nsqd reads FIN at fixed length.
NEWLINE_ID = struct.pack(">QQ", 0x0A0A_0A0A_0A0A_0A0A, 0x0A0A_0A0A_0A0A_0A0A)


def test_partitioned_sub_and_pub_name_the_partition() -> None:
    assert commands.sub("t", "c", 3) == b"SUB t c 3\n"
    assert commands.sub("t", "c") == b"SUB t c\n"  # upstream: unchanged
    assert commands.pub("t", b"hi", 1) == b"PUB t 1\n\x00\x00\x00\x02hi"
    assert commands.mpub("t", [b"a", b"bc"], partition=0) == (
        b"MPUB t 0\n" + struct.pack(">II", 4 + 4 + 1 + 4 + 2, 2) + b"\x00\x00\x00\x01a"
        b"\x00\x00\x00\x02bc"
    )
    with pytest.raises(LocalProtocolError, match="negative"):
        commands.pub("t", b"x", -1)


def test_ordered_and_advanced_subscriptions() -> None:
    assert youzan.sub_ordered("t", "c", 2) == b"SUB_ORDERED t c 2\n"
    assert youzan.sub_advanced("t", "c", 0, youzan.END) == b"SUB_ADVANCED t c 0 special:-1\n"
    start = youzan.parse_start_position("offset:120")
    assert youzan.sub_advanced("t", "c", 1, start) == b"SUB_ADVANCED t c 1 virtual_queue:120\n"


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("end", "special:-1"),
        ("special:-1", "special:-1"),
        ("timestamp:1700000000", "timestamp:1700000000"),
        ("time:5", "timestamp:5"),
        ("offset:0", "virtual_queue:0"),
        ("virtual_queue:9", "virtual_queue:9"),
        ("count:10", "msgcount:10"),
        ("msgcount:3", "msgcount:3"),
    ],
)
def test_start_positions(text: str, wire: str) -> None:
    assert youzan.parse_start_position(text).wire == wire


@pytest.mark.parametrize("text", ["", "offset", "offset:-1", "later:3", "count:x"])
def test_bad_start_positions_say_what_is_taken(text: str) -> None:
    with pytest.raises(LocalProtocolError, match="end, timestamp"):
        youzan.parse_start_position(text)


def test_pub_trace_prefixes_the_trace_id() -> None:
    assert youzan.pub_trace("t", 0, 0x1122334455667788, b"body") == (
        b"PUB_TRACE t 0\n\x00\x00\x00\x0c" + bytes.fromhex("1122334455667788") + b"body"
    )


def test_mpub_trace_prefixes_each_body_with_its_trace_id() -> None:
    encoded = youzan.mpub_trace("t", 1, [1, 2], [b"a", b"b"])
    first, second = struct.pack(">Q", 1) + b"a", struct.pack(">Q", 2) + b"b"
    assert encoded == (
        b"MPUB_TRACE t 1\n"
        + struct.pack(">II", 4 + 2 * 4 + 18, 2)
        + struct.pack(">I", 9)
        + first
        + struct.pack(">I", 9)
        + second
    )
    with pytest.raises(LocalProtocolError, match="trace ids for"):
        youzan.mpub_trace("t", 1, [1], [b"a", b"b"])


def test_pub_ext_carries_a_json_header() -> None:
    header = youzan.ext_header(tag="blue", trace_id=42)
    encoded = youzan.pub_ext("t", 0, header, b"body")
    document = b'{"##client_dispatch_tag":"blue","##trace_id":"42"}'
    body = struct.pack(">H", len(document)) + document + b"body"
    assert encoded == b"PUB_EXT t 0\n" + struct.pack(">I", len(body)) + body


def test_the_trace_answer_of_the_page() -> None:
    assert TraceAnswer.parse(TRACE_ANSWER) == TraceAnswer(
        internal_id=0x0004000000000004,
        trace_id=0x1122334455667788,
        queue_offset=0x64,
        raw_size=42,
    )
    for bad in (b"OK", TRACE_ANSWER[:-1], b"NO" + TRACE_ANSWER[2:]):
        with pytest.raises(RemoteProtocolError, match="trace answer"):
            TraceAnswer.parse(bad)


def _message_frame(payload: bytes, message_id: bytes = NEWLINE_ID) -> bytes:
    data = struct.pack(">qH", 1_700_000_000_000_000_000, 3) + message_id + payload
    return struct.pack(">II", len(data) + 4, 2) + data


def _received(payload: bytes, message_id: bytes = NEWLINE_ID) -> MessageBatch:
    (batch,) = FrameDecoder().feed(_message_frame(payload, message_id))
    assert isinstance(batch, MessageBatch)
    return batch


def _read(layout: MessageLayout, payload: bytes) -> ForkMessage:
    (message,) = layout.read(_received(payload)).messages
    assert isinstance(message, ForkMessage)
    return message


def test_a_plain_fork_message_splits_its_id() -> None:
    message = _read(MessageLayout(partition=1), b"hello")
    assert (message.body, message.partition, message.attempts) == (b"hello", 1, 3)
    assert message.internal_id == message.trace_id == 0x0A0A_0A0A_0A0A_0A0A
    assert message.queue_offset is None and message.tag == ""


def test_the_detail_block_after_sub_ordered() -> None:
    detail = struct.pack(">QI", 100, 42)
    message = _read(MessageLayout(0, detail=True), detail + b"body")
    assert (message.queue_offset, message.raw_size, message.body) == (100, 42, b"body")


def test_the_extend_header_version_0_and_4() -> None:
    assert _read(MessageLayout(0, extend=True), b"\x00body").body == b"body"
    ext = b'{"##client_dispatch_tag":"red"}'
    payload = b"\x04" + struct.pack(">H", len(ext)) + ext + struct.pack(">QI", 7, 9) + b"x"
    message = _read(MessageLayout(0, extend=True, detail=True), payload)
    assert (message.ext, message.tag, message.queue_offset, message.body) == (ext, "red", 7, b"x")


@pytest.mark.parametrize(
    ("layout", "payload"),
    [
        (MessageLayout(0, detail=True), b"\x00" * 11),
        (MessageLayout(0, extend=True), b""),
        (MessageLayout(0, extend=True), b"\x04\x00"),
        (MessageLayout(0, extend=True), b"\x04\x00\x09{}"),
    ],
)
def test_a_cut_layout_is_the_peers_fault(layout: MessageLayout, payload: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="too short"):
        layout.read(_received(payload))


def test_binary_ids_with_newlines_are_echoed_raw() -> None:
    """nsqd reads FIN/REQ/TOUCH at fixed length: the 16 bytes go out as received."""
    message = _read(MessageLayout(0), b"x")
    assert commands.fin(message.id) == b"FIN " + NEWLINE_ID + b"\n"
    assert commands.fin_many([message.id]) == b"FIN " + NEWLINE_ID + b"\n"
    assert commands.req(message.id, 0) == b"REQ " + NEWLINE_ID + b" 0\n"
    assert commands.touch(message.id) == b"TOUCH " + NEWLINE_ID + b"\n"


@given(st.binary(min_size=16, max_size=16), st.binary(max_size=64))
def test_any_id_survives_the_decoder_and_the_layout(message_id: bytes, body: bytes) -> None:
    (message,) = MessageLayout(0).read(_received(body, message_id)).messages
    assert (message.id, message.body) == (message_id, body)


def test_a_batch_keeps_the_fork_messages_it_was_given() -> None:
    fork = ForkMessage(Message(NEWLINE_ID, 1, 1, b""), b"b", 2)
    batch = MessageBatch([fork])
    assert batch.messages[0] is fork and batch.bodies == [b"b"]


def test_leader_errors_refuse_a_request_and_keep_the_connection() -> None:
    for code in ("E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE"):
        frame = ErrorFrame.parse(code.encode() + b" not leader")
        assert not frame.fatal and frame.refuses_request
    assert ErrorFrame.parse(b"E_TOPIC_NOT_EXIST ").fatal
    assert not ErrorFrame.parse(b"E_FIN_FAILED x").refuses_request


def test_every_new_error_code_has_words() -> None:
    codes = {
        "E_TOPIC_NOT_EXIST",
        "E_FAILED_ON_NOT_LEADER",
        "E_FAILED_ON_NOT_WRITABLE",
        "E_BAD_PARTITION",
        "E_SUB_ORDER_IS_MUST",
        "E_SUB_EXTEND_NEED",
        "E_SUB_EXTEND_FORBIDDON",
        "E_SUB_CHANNEL_NOT_REGISTERED",
        "E_EXT_NOT_SUPPORT",
        "E_INVALID_JSON_HEADER",
        "E_PUB_TOO_MUCH_WAITING",
        "E_BAD_EXT",
        "E_BAD_TAG",
    }
    assert set(youzan.ERRORS) == codes
    for code in codes:
        assert youzan.explain(code)
    error = NsqErrorResponse("h:1", "E_TOPIC_NOT_EXIST", "", youzan.explain("E_TOPIC_NOT_EXIST"))
    assert (
        str(error)
        == "h:1: E_TOPIC_NOT_EXIST (the topic, or this partition of it, is not on this nsqd)"
    )
    assert youzan.explain("E_BAD_TOPIC") == ""


def test_fork_versions() -> None:
    assert youzan.is_fork_version("0.3.7-HA.1.12.7")
    assert not youzan.is_fork_version("1.3.0")
    assert not youzan.is_fork_version("")


# -- nsqlookupd's answers ------------------------------------------------------------------

PEER = {
    "id": "127.0.0.1:54540",
    "remote_address": "127.0.0.1:54540",
    "hostname": "host",
    "broadcast_address": "127.0.0.1",
    "tcp_port": 42155,
    "http_port": 42156,
    "version": "0.3.7-HA.1.12.7",
    "distributed_id": "127.0.0.1:42255:42155:2",
}
OTHER = PEER | {"tcp_port": 42150, "http_port": 42151, "distributed_id": "127.0.0.1:42250:42150:1"}
DATA = {
    "channels": ["ch1"],
    "meta": {
        "disable_channel_auto_create": False,
        "extend_support": False,
        "multi_part": False,
        "ordered": False,
        "partition_num": 2,
        "replica": 1,
    },
    "partitions": {"0": PEER, "1": OTHER},
    "producers": [OTHER, PEER],
}


def _lookup(document: object, status: int = 200) -> object:
    answer = HttpAnswer(status, "OK", json.dumps(document).encode())
    return read_answer(topic_lookup("127.0.0.1:1", "yz_part", "w"), answer)


@pytest.mark.parametrize(
    "document",
    [{"status_code": 200, "status_txt": "OK", "data": DATA}, DATA],
    ids=["wrapped", "bare"],
)
def test_the_pages_lookup_in_both_envelopes(document: object) -> None:
    found = _lookup(document)
    assert found.is_fork  # type: ignore[attr-defined]
    assert found.meta == TopicMeta(partition_num=2, replica=1)  # type: ignore[attr-defined]
    partitions = found.partitions  # type: ignore[attr-defined]
    assert {number: node.tcp_address for number, node in partitions.items()} == {
        0: "127.0.0.1:42155",
        1: "127.0.0.1:42150",
    }
    assert [node.tcp_port for node in found.producers] == [42150, 42155]  # type: ignore[attr-defined]


def test_an_upstream_lookup_is_no_fork() -> None:
    found = _lookup({"channels": [], "producers": [PEER | {"version": "1.3.0"}]})
    assert not found.is_fork and found.meta is None  # type: ignore[attr-defined]


def test_a_wrapped_error_is_one_line() -> None:
    document = {"status_code": 500, "status_txt": "Topic has no channel", "data": None}
    with pytest.raises(Exception, match="HTTP 500 Topic has no channel"):
        _lookup(document, 500)


def test_listlookup_names_every_lookupd() -> None:
    node = {
        "ID": "1",
        "NodeIP": "127.0.0.1",
        "TcpPort": "4160",
        "HttpPort": "4161",
        "RpcPort": "4162",
        "Epoch": 1,
    }
    other = node | {"ID": "2", "HttpPort": "5161"}
    document = {"lookupdleader": node, "lookupdnodes": [node, other]}
    answer = HttpAnswer(200, "OK", json.dumps(document).encode())
    found = read_answer(list_lookup("127.0.0.1:4161"), answer)
    assert [lookupd.http_address for lookupd in found] == ["127.0.0.1:4161", "127.0.0.1:5161"]


def test_start_position_text() -> None:
    assert str(StartPosition("msgcount", 4)) == "msgcount:4"
