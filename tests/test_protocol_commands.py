"""Byte-exact encoders for every command (nsqtools.protocol.commands)."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqtools.protocol import IdentifyRequest, LocalProtocolError, commands

ID = b"0a1b2c3d4e5f6a7b"
ID2 = b"0000000000000001"

message_ids = st.lists(st.binary(min_size=16, max_size=16), max_size=30)
bodies = st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=20)


# --- constants ------------------------------------------------------------------------


def test_magic_and_bare_commands() -> None:
    assert commands.MAGIC_V2 == b"  V2"
    assert len(commands.MAGIC_V2) == 4
    assert commands.NOP == b"NOP\n"
    assert commands.CLS == b"CLS\n"
    assert commands.MESSAGE_ID_LENGTH == 16


# --- IDENTIFY, AUTH -------------------------------------------------------------------


def test_identify() -> None:
    assert commands.identify(b'{"a":1}') == b'IDENTIFY\n\x00\x00\x00\x07{"a":1}'


def test_identify_with_request_document() -> None:
    body = IdentifyRequest("c", "h", "ua").to_json()
    encoded = commands.identify(body)
    assert encoded == b"IDENTIFY\n" + struct.pack(">I", len(body)) + body
    assert encoded.startswith(b"IDENTIFY\n\x00\x00\x00")


def test_auth() -> None:
    assert commands.auth("s3cret") == b"AUTH\n\x00\x00\x00\x06s3cret"


def test_auth_encodes_utf8() -> None:
    assert commands.auth("pässwörd") == b"AUTH\n\x00\x00\x00\x0ap\xc3\xa4ssw\xc3\xb6rd"


def test_auth_rejects_empty_secret() -> None:
    with pytest.raises(LocalProtocolError, match="AUTH"):
        commands.auth("")


# --- SUB ------------------------------------------------------------------------------


def test_sub() -> None:
    assert commands.sub("test", "ch") == b"SUB test ch\n"
    assert commands.sub("t#ephemeral", "c#ephemeral") == b"SUB t#ephemeral c#ephemeral\n"
    assert commands.sub("..", ".") == b"SUB .. .\n"


@pytest.mark.parametrize(
    ("topic", "channel", "kind"),
    [
        ("", "ch", "topic"),
        ("a b", "ch", "topic"),
        ("a" * 65, "ch", "topic"),
        ("test", "", "channel"),
        ("test", "c h", "channel"),
        ("test", "#ephemeral", "channel"),
    ],
)
def test_sub_rejects_bad_names(topic: str, channel: str, kind: str) -> None:
    with pytest.raises(LocalProtocolError, match=f"invalid {kind} name"):
        commands.sub(topic, channel)


# --- PUB ------------------------------------------------------------------------------


def test_pub() -> None:
    assert commands.pub("test", b"hello") == b"PUB test\n\x00\x00\x00\x05hello"


def test_pub_binary_body() -> None:
    body = bytes(range(256))
    assert commands.pub("t", body) == b"PUB t\n\x00\x00\x01\x00" + body


def test_pub_body_with_newlines_is_framed_not_split() -> None:
    assert commands.pub("t", b"a\nb\n") == b"PUB t\n\x00\x00\x00\x04a\nb\n"


def test_pub_rejects_empty_body() -> None:
    with pytest.raises(LocalProtocolError, match="empty"):
        commands.pub("test", b"")


@pytest.mark.parametrize("topic", ["", "a b", "a" * 65, "#ephemeral", "naïve"])
def test_pub_rejects_bad_topic(topic: str) -> None:
    with pytest.raises(LocalProtocolError, match="invalid topic name"):
        commands.pub(topic, b"x")


# --- DPUB -----------------------------------------------------------------------------


def test_dpub() -> None:
    assert commands.dpub("test", 1.5, b"hello") == b"DPUB test 1500\n\x00\x00\x00\x05hello"


@pytest.mark.parametrize(
    ("delay", "line"),
    [
        (0, b"DPUB t 0\n"),
        (0.0, b"DPUB t 0\n"),
        (0.0004, b"DPUB t 0\n"),
        (0.0014, b"DPUB t 1\n"),
        (0.0016, b"DPUB t 2\n"),
        (0.001, b"DPUB t 1\n"),
        (0.1, b"DPUB t 100\n"),
        (2.0006, b"DPUB t 2001\n"),
        (60, b"DPUB t 60000\n"),
        (3600, b"DPUB t 3600000\n"),
    ],
)
def test_dpub_rounds_to_milliseconds(delay: float, line: bytes) -> None:
    assert commands.dpub("t", delay, b"x") == line + b"\x00\x00\x00\x01x"


def test_dpub_rejects_negative_delay() -> None:
    with pytest.raises(LocalProtocolError, match="negative"):
        commands.dpub("t", -0.001, b"x")
    with pytest.raises(LocalProtocolError, match="negative"):
        commands.dpub("t", -1, b"x")


def test_dpub_rejects_empty_body_and_bad_topic() -> None:
    with pytest.raises(LocalProtocolError, match="empty"):
        commands.dpub("t", 1, b"")
    with pytest.raises(LocalProtocolError, match="invalid topic name"):
        commands.dpub("a b", 1, b"x")


# --- MPUB -----------------------------------------------------------------------------


def test_mpub() -> None:
    assert commands.mpub("test", [b"a", b"bc"]) == (
        b"MPUB test\n"
        b"\x00\x00\x00\x0f"  # body size: 4 + (4 + 1) + (4 + 2)
        b"\x00\x00\x00\x02"  # count
        b"\x00\x00\x00\x01a"
        b"\x00\x00\x00\x02bc"
    )


def test_mpub_single_message() -> None:
    assert commands.mpub("t", [b"hello"]) == (
        b"MPUB t\n\x00\x00\x00\x0d\x00\x00\x00\x01\x00\x00\x00\x05hello"
    )


def test_mpub_body_size() -> None:
    assert commands.mpub_body_size([1, 2]) == 15
    assert commands.mpub_body_size([5]) == 13


def test_mpub_accepts_tuple() -> None:
    assert commands.mpub("t", (b"a", b"bc")) == commands.mpub("t", [b"a", b"bc"])


def test_mpub_rejects_no_messages() -> None:
    with pytest.raises(LocalProtocolError, match="at least one"):
        commands.mpub("t", [])


def test_mpub_rejects_an_empty_message() -> None:
    with pytest.raises(LocalProtocolError, match="empty"):
        commands.mpub("t", [b"a", b"", b"c"])


def test_mpub_rejects_bad_topic() -> None:
    with pytest.raises(LocalProtocolError, match="invalid topic name"):
        commands.mpub("a/b", [b"a"])


@settings(max_examples=150, deadline=None)
@given(bodies)
def test_mpub_framing_roundtrip(messages: list[bytes]) -> None:
    line = b"MPUB topic\n"
    encoded = commands.mpub("topic", messages)
    assert encoded.startswith(line)
    (size,) = struct.unpack_from(">I", encoded, len(line))
    body = encoded[len(line) + 4 :]
    assert size == len(body) == commands.mpub_body_size(list(map(len, messages)))
    assert commands.mpub_body_size(list(map(len, messages))) == len(encoded) - len(line) - 4
    (count,) = struct.unpack_from(">I", body, 0)
    assert count == len(messages)
    pos = 4
    decoded = []
    for _ in range(count):
        (length,) = struct.unpack_from(">I", body, pos)
        decoded.append(body[pos + 4 : pos + 4 + length])
        pos += 4 + length
    assert pos == len(body)
    assert decoded == messages


# --- RDY ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "encoded"),
    [
        (0, b"RDY 0\n"),
        (1, b"RDY 1\n"),
        (2500, b"RDY 2500\n"),
        (2**31 - 1, b"RDY 2147483647\n"),
    ],
)
def test_rdy(count: int, encoded: bytes) -> None:
    assert commands.rdy(count) == encoded


@pytest.mark.parametrize("count", [-1, -2500, 2**31, 2**63])
def test_rdy_out_of_range(count: int) -> None:
    with pytest.raises(LocalProtocolError, match="RDY"):
        commands.rdy(count)


# --- FIN, REQ, TOUCH ------------------------------------------------------------------


def test_fin() -> None:
    assert commands.fin(ID) == b"FIN 0a1b2c3d4e5f6a7b\n"


def test_touch() -> None:
    assert commands.touch(ID) == b"TOUCH 0a1b2c3d4e5f6a7b\n"


@pytest.mark.parametrize(
    ("delay", "encoded"),
    [
        (None, b"REQ 0a1b2c3d4e5f6a7b 0\n"),
        (0, b"REQ 0a1b2c3d4e5f6a7b 0\n"),
        (0.0004, b"REQ 0a1b2c3d4e5f6a7b 0\n"),
        (0.0016, b"REQ 0a1b2c3d4e5f6a7b 2\n"),
        (2.5, b"REQ 0a1b2c3d4e5f6a7b 2500\n"),
        (90, b"REQ 0a1b2c3d4e5f6a7b 90000\n"),
    ],
)
def test_req(delay: float | None, encoded: bytes) -> None:
    if delay is None:
        assert commands.req(ID) == encoded
    else:
        assert commands.req(ID, delay) == encoded


def test_req_rejects_negative_delay() -> None:
    with pytest.raises(LocalProtocolError, match="REQ delay must not be negative"):
        commands.req(ID, -1)


IdEncoder = Callable[[bytes], bytes]
ID_ENCODERS: list[IdEncoder] = [commands.fin, commands.touch, commands.req]


@pytest.mark.parametrize("encode", ID_ENCODERS)
@pytest.mark.parametrize("length", [0, 1, 15, 17, 32])
def test_wrong_id_length(encode: IdEncoder, length: int) -> None:
    with pytest.raises(LocalProtocolError, match=f"16 bytes, got {length}"):
        encode(b"a" * length)


# --- FIN/REQ for a batch --------------------------------------------------------------


def test_fin_many() -> None:
    assert commands.fin_many([ID, ID2]) == b"FIN 0a1b2c3d4e5f6a7b\nFIN 0000000000000001\n"
    assert commands.fin_many([ID]) == b"FIN 0a1b2c3d4e5f6a7b\n"
    assert commands.fin_many([]) == b""


def test_req_many() -> None:
    assert commands.req_many([ID, ID2], 1.5) == (
        b"REQ 0a1b2c3d4e5f6a7b 1500\nREQ 0000000000000001 1500\n"
    )
    assert commands.req_many([ID]) == b"REQ 0a1b2c3d4e5f6a7b 0\n"
    assert commands.req_many([]) == b""


def test_req_many_rejects_negative_delay() -> None:
    with pytest.raises(LocalProtocolError, match="negative"):
        commands.req_many([ID], -0.5)


@settings(max_examples=200, deadline=None)
@given(message_ids)
def test_fin_many_is_concatenated_fin(ids: list[bytes]) -> None:
    assert commands.fin_many(ids) == b"".join(commands.fin(i) for i in ids)


@settings(max_examples=200, deadline=None)
@given(message_ids, st.floats(min_value=0, max_value=7200, allow_nan=False))
def test_req_many_is_concatenated_req(ids: list[bytes], delay: float) -> None:
    assert commands.req_many(ids, delay) == b"".join(commands.req(i, delay) for i in ids)
    assert commands.req_many(ids) == b"".join(commands.req(i) for i in ids)


# The batch encoders skip the id check that fin/req make, so a malformed id reaches nsqd
# (which answers the fatal E_INVALID and closes the connection) instead of raising here.
@pytest.mark.parametrize(
    "encode_many",
    [commands.fin_many, commands.req_many],
    ids=["fin_many", "req_many"],
)
def test_batch_encoders_reject_wrong_id_length(
    encode_many: Callable[[list[bytes]], bytes],
) -> None:
    with pytest.raises(LocalProtocolError, match="16 bytes, got 15"):
        encode_many([ID, b"a" * 15])


# A delay of inf or NaN escapes as OverflowError / a bare ValueError, not as
# LocalProtocolError, so a CLI option such as --delay inf would end in a traceback.
@pytest.mark.parametrize("delay", [math.inf, math.nan], ids=["inf", "nan"])
def test_non_finite_delay_is_a_local_protocol_error(delay: float) -> None:
    with pytest.raises(LocalProtocolError):
        commands.dpub("t", delay, b"x")
    with pytest.raises(LocalProtocolError):
        commands.req(ID, delay)
    with pytest.raises(LocalProtocolError):
        commands.req_many([ID], delay)


@given(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=50))
def test_mpub_with_precomputed_sizes_is_the_same_bytes(bodies: list[bytes]) -> None:
    expected = b"".join(struct.pack(">I", len(body)) + body for body in bodies)
    expected = struct.pack(">I", len(bodies)) + expected
    encoded = commands.mpub("t", bodies, [len(body) for body in bodies])
    assert encoded == b"MPUB t\n" + struct.pack(">I", len(expected)) + expected
    assert encoded == commands.mpub("t", bodies)
