"""The incremental frame decoder (nsqtools.protocol.frames), by hand and by property."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqtools.protocol import (
    HEARTBEAT,
    ErrorFrame,
    Event,
    FrameDecoder,
    Heartbeat,
    Message,
    MessageBatch,
    RemoteProtocolError,
    Response,
)
from nsqtools.testing import AllocationMeter

Flat = Response | ErrorFrame | Heartbeat | Message

ID = b"0a1b2c3d4e5f6a7b"
ID2 = b"0a1b2c3d4e5f6a7c"
ID3 = b"0a1b2c3d4e5f6a7d"
TS = 1_700_000_000_123_456_789

OK_FRAME = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
HEARTBEAT_FRAME = b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_"


def frame(frame_type: int, data: bytes) -> bytes:
    return struct.pack(">II", len(data) + 4, frame_type) + data


def message_frame(message_id: bytes, timestamp: int, attempts: int, body: bytes) -> bytes:
    return frame(2, struct.pack(">qH", timestamp, attempts) + message_id + body)


def flatten(events: Iterable[Event]) -> list[Flat]:
    flat: list[Flat] = []
    for event in events:
        if isinstance(event, MessageBatch):
            assert event.messages, "an empty MessageBatch"
            flat.extend(event.messages)
        else:
            flat.append(event)
    return flat


def split(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = []
    start = 0
    for point in [*points, len(data)]:
        chunks.append(data[start:point])
        start = point
    return chunks


def feed_all(decoder: FrameDecoder, chunks: Sequence[bytes]) -> list[Event]:
    events: list[Event] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


# --- hand-built frames ----------------------------------------------------------------


def test_ok_response() -> None:
    assert frame(0, b"OK") == OK_FRAME
    decoder = FrameDecoder()
    assert decoder.feed(OK_FRAME) == [Response(b"OK")]
    assert decoder.take_unconsumed() == b""


def test_json_and_close_wait_responses() -> None:
    decoder = FrameDecoder()
    events = decoder.feed(frame(0, b'{"max_rdy_count":2500}') + frame(0, b"CLOSE_WAIT"))
    assert events == [Response(b'{"max_rdy_count":2500}'), Response(b"CLOSE_WAIT")]


def test_empty_response() -> None:
    assert FrameDecoder().feed(b"\x00\x00\x00\x04\x00\x00\x00\x00") == [Response(b"")]


def test_heartbeat() -> None:
    assert frame(0, b"_heartbeat_") == HEARTBEAT_FRAME
    events = FrameDecoder().feed(HEARTBEAT_FRAME)
    assert events == [HEARTBEAT]
    assert isinstance(events[0], Heartbeat)
    assert events[0] is HEARTBEAT


def test_heartbeat_only_as_a_response() -> None:
    events = FrameDecoder().feed(frame(0, b"_heartbeat_x") + frame(1, b"_heartbeat_"))
    assert events == [Response(b"_heartbeat_x"), ErrorFrame("_heartbeat_", "")]


def test_error_frame() -> None:
    data = b'E_BAD_TOPIC PUB topic name "x y" is not valid'
    raw = b"\x00\x00\x00\x31\x00\x00\x00\x01" + data
    assert raw == frame(1, data)
    (event,) = FrameDecoder().feed(raw)
    assert event == ErrorFrame("E_BAD_TOPIC", 'PUB topic name "x y" is not valid')
    assert isinstance(event, ErrorFrame)
    assert event.fatal
    assert str(event) == 'E_BAD_TOPIC PUB topic name "x y" is not valid'


def test_error_frame_without_message() -> None:
    (event,) = FrameDecoder().feed(frame(1, b"E_INVALID"))
    assert event == ErrorFrame("E_INVALID", "")
    assert str(event) == "E_INVALID"


def test_error_frame_invalid_utf8_is_replaced() -> None:
    (event,) = FrameDecoder().feed(frame(1, b"E_BAD_BODY \xff\xfe"))
    assert event == ErrorFrame("E_BAD_BODY", "\ufffd\ufffd")


@pytest.mark.parametrize(
    ("code", "fatal"),
    [
        ("E_FIN_FAILED", False),
        ("E_REQ_FAILED", False),
        ("E_TOUCH_FAILED", False),
        ("E_INVALID", True),
        ("E_BAD_BODY", True),
        ("E_BAD_TOPIC", True),
        ("E_BAD_CHANNEL", True),
        ("E_BAD_MESSAGE", True),
        ("E_PUB_FAILED", True),
        ("E_MPUB_FAILED", True),
        ("E_DPUB_FAILED", True),
        ("E_AUTH_FAILED", True),
        ("E_UNAUTHORIZED", True),
        ("E_fin_failed", True),
    ],
)
def test_error_fatal(code: str, fatal: bool) -> None:
    (event,) = FrameDecoder().feed(frame(1, code.encode() + b" details here"))
    assert isinstance(event, ErrorFrame)
    assert event.code == code
    assert event.message == "details here"
    assert event.fatal is fatal


def test_message_frame_literal() -> None:
    raw = (
        b"\x00\x00\x00\x23"  # size: 4 + 8 + 2 + 16 + 5 = 35
        b"\x00\x00\x00\x02"  # type: message
        b"\x17\x97\x9c\xfe\x3d\x85\xcd\x15"  # timestamp
        b"\x00\x03"  # attempts
        b"0a1b2c3d4e5f6a7b"  # id
        b"hello"
    )
    assert raw == message_frame(ID, TS, 3, b"hello")
    decoder = FrameDecoder()
    assert decoder.feed(raw) == [MessageBatch([Message(ID, TS, 3, b"hello")])]
    assert decoder.take_unconsumed() == b""


def test_message_fields() -> None:
    (batch,) = FrameDecoder().feed(message_frame(ID, TS, 65535, b"\x00body\n"))
    assert isinstance(batch, MessageBatch)
    (message,) = batch.messages
    assert message.id == ID
    assert message.timestamp == TS
    assert message.attempts == 65535
    assert message.body == b"\x00body\n"
    assert type(message.body) is bytes
    assert type(message.id) is bytes


def test_message_empty_body() -> None:
    raw = message_frame(ID, 0, 1, b"")
    assert len(raw) == 34
    assert FrameDecoder().feed(raw) == [MessageBatch([Message(ID, 0, 1, b"")])]


def test_message_timestamp_is_signed_int64() -> None:
    for timestamp in (-1, -(2**63), 2**63 - 1):
        (batch,) = FrameDecoder().feed(message_frame(ID, timestamp, 0, b"x"))
        assert isinstance(batch, MessageBatch)
        assert batch.messages[0].timestamp == timestamp


def test_message_equality_and_repr() -> None:
    assert Message(ID, 1, 2, b"b") == Message(ID, 1, 2, b"b")
    assert Message(ID, 1, 2, b"b") != Message(ID, 1, 3, b"b")
    assert Message(ID, 1, 2, b"b") != "not a message"
    assert "attempts=2" in repr(Message(ID, 1, 2, b"b"))


def test_consecutive_messages_are_one_batch_in_order() -> None:
    m1 = Message(ID, TS, 1, b"one")
    m2 = Message(ID2, TS + 1, 2, b"")
    m3 = Message(ID3, TS + 2, 3, b"three" * 100)
    raw = b"".join(message_frame(m.id, m.timestamp, m.attempts, m.body) for m in (m1, m2, m3))
    assert FrameDecoder().feed(raw) == [MessageBatch([m1, m2, m3])]


def test_response_between_messages_splits_batches() -> None:
    m1 = Message(ID, TS, 1, b"one")
    m2 = Message(ID2, TS, 1, b"two")
    m3 = Message(ID3, TS, 1, b"three")
    raw = (
        message_frame(ID, TS, 1, b"one")
        + message_frame(ID2, TS, 1, b"two")
        + OK_FRAME
        + message_frame(ID3, TS, 1, b"three")
        + HEARTBEAT_FRAME
        + message_frame(ID, TS, 1, b"one")
        + frame(1, b"E_FIN_FAILED FIN failed")
        + message_frame(ID2, TS, 1, b"two")
    )
    assert FrameDecoder().feed(raw) == [
        MessageBatch([m1, m2]),
        Response(b"OK"),
        MessageBatch([m3]),
        HEARTBEAT,
        MessageBatch([m1]),
        ErrorFrame("E_FIN_FAILED", "FIN failed"),
        MessageBatch([m2]),
    ]


def test_incomplete_frame_stays_buffered() -> None:
    raw = message_frame(ID, TS, 1, b"hello") + OK_FRAME
    decoder = FrameDecoder()
    assert decoder.feed(raw[:3]) == []
    assert decoder.feed(raw[3:20]) == []
    assert decoder.feed(raw[20:-1]) == [MessageBatch([Message(ID, TS, 1, b"hello")])]
    assert decoder.feed(raw[-1:]) == [Response(b"OK")]
    assert decoder.take_unconsumed() == b""


def test_byte_at_a_time() -> None:
    raw = OK_FRAME + message_frame(ID, TS, 1, b"hi") + HEARTBEAT_FRAME
    decoder = FrameDecoder()
    events = feed_all(decoder, [raw[i : i + 1] for i in range(len(raw))])
    assert events == [Response(b"OK"), MessageBatch([Message(ID, TS, 1, b"hi")]), HEARTBEAT]


def test_large_message_up_to_max_frame_size() -> None:
    decoder = FrameDecoder(max_frame_size=30 + 1000)
    body = bytes(range(256)) * 3 + b"z" * 232
    raw = message_frame(ID, TS, 1, body)
    assert decoder.feed(raw) == [MessageBatch([Message(ID, TS, 1, body)])]


# --- next_event and take_unconsumed ---------------------------------------------------


SNAPPY_STREAM_START = b"\xff\x06\x00\x00sNaPpY\x01\x09\x00\x00"


def test_next_event_one_frame_at_a_time() -> None:
    answer = b'{"max_rdy_count":2500,"version":"1.3.0","snappy":true}'
    decoder = FrameDecoder()
    decoder.receive_data(frame(0, answer) + SNAPPY_STREAM_START)
    assert decoder.next_event() == Response(answer)
    assert decoder.take_unconsumed() == SNAPPY_STREAM_START
    assert decoder.take_unconsumed() == b""
    assert decoder.next_event() is None


def test_next_event_leaves_following_frames() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(OK_FRAME + HEARTBEAT_FRAME + message_frame(ID, TS, 2, b"m") + b"\x00")
    assert decoder.next_event() == Response(b"OK")
    assert decoder.next_event() == HEARTBEAT
    assert decoder.next_event() == MessageBatch([Message(ID, TS, 2, b"m")])
    assert decoder.next_event() is None
    assert decoder.take_unconsumed() == b"\x00"


def test_next_event_waits_for_a_whole_frame() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(OK_FRAME[:7])
    assert decoder.next_event() is None
    decoder.receive_data(OK_FRAME[7:])
    assert decoder.next_event() == Response(b"OK")
    assert decoder.take_unconsumed() == b""


def test_next_event_error_frame() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(frame(1, b"E_IDENTIFY_FAILED bad body") + b"rest")
    assert decoder.next_event() == ErrorFrame("E_IDENTIFY_FAILED", "bad body")
    assert decoder.take_unconsumed() == b"rest"


def test_take_unconsumed_after_feed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(OK_FRAME + OK_FRAME[:9]) == [Response(b"OK")]
    assert decoder.take_unconsumed() == OK_FRAME[:9]
    assert decoder.feed(OK_FRAME) == [Response(b"OK")]


def test_feed_after_next_event_continues() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(OK_FRAME + OK_FRAME[:3])
    assert decoder.next_event() == Response(b"OK")
    assert decoder.feed(OK_FRAME[3:] + HEARTBEAT_FRAME) == [Response(b"OK"), HEARTBEAT]


# --- specific bad input ---------------------------------------------------------------


def assert_broken(decoder: FrameDecoder) -> None:
    """A decoder that has raised keeps raising, whatever it is given."""
    with pytest.raises(RemoteProtocolError):
        decoder.feed(b"")
    with pytest.raises(RemoteProtocolError):
        decoder.feed(OK_FRAME)
    with pytest.raises(RemoteProtocolError):
        decoder.next_event()


@pytest.mark.parametrize("size", [0, 1, 2, 3])
def test_size_too_small(size: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match="too small"):
        decoder.feed(struct.pack(">I", size))
    assert_broken(decoder)


@pytest.mark.parametrize("size", [0, 3])
def test_size_too_small_with_next_event(size: int) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">II", size, 0) + b"OK")
    with pytest.raises(RemoteProtocolError, match="too small"):
        decoder.next_event()
    assert_broken(decoder)


def test_size_above_max_frame_size() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    assert decoder.feed(frame(0, b"x" * 96)) == [Response(b"x" * 96)]
    with pytest.raises(RemoteProtocolError, match="larger than the limit of 100"):
        decoder.feed(struct.pack(">I", 101))
    assert_broken(decoder)


def test_size_above_max_frame_size_is_detected_before_the_data() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(RemoteProtocolError, match="larger than"):
        decoder.feed(struct.pack(">II", 2**32 - 1, 0) + b"x" * 40)


def test_message_above_max_frame_size() -> None:
    decoder = FrameDecoder(max_frame_size=35)
    assert decoder.feed(message_frame(ID, TS, 1, b"12345")) != []
    with pytest.raises(RemoteProtocolError, match="larger than the limit of 35"):
        decoder.feed(message_frame(ID, TS, 1, b"123456"))
    assert_broken(decoder)


@pytest.mark.parametrize("frame_type", [3, 4, 255, 2**32 - 1])
def test_unknown_frame_type(frame_type: int) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(frame(frame_type, b"data")[:-1]) == []
    with pytest.raises(RemoteProtocolError, match=f"unknown frame type {frame_type}"):
        decoder.feed(b"a")
    assert_broken(decoder)


@pytest.mark.parametrize("data_length", [0, 1, 10, 25])
def test_message_shorter_than_header(data_length: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match="shorter than its header"):
        decoder.feed(frame(2, b"x" * data_length))
    assert_broken(decoder)


def test_message_shorter_than_header_followed_by_more() -> None:
    # Enough bytes follow for the decoder's 34-byte message fast path to look at it.
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match="shorter than its header"):
        decoder.feed(frame(2, b"x" * 25) + OK_FRAME * 4)
    assert_broken(decoder)


def test_message_shorter_than_header_with_next_event() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(frame(2, b"x" * 25))
    with pytest.raises(RemoteProtocolError, match="shorter than its header"):
        decoder.next_event()
    assert_broken(decoder)


def test_error_after_good_frames_in_one_chunk() -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match="invalid frame from nsqd"):
        decoder.feed(OK_FRAME + message_frame(ID, TS, 1, b"x") + frame(7, b""))
    assert_broken(decoder)


# --- property: any chunking gives the same events -------------------------------------

response_data = st.one_of(
    st.sampled_from([b"OK", b"CLOSE_WAIT", b"_heartbeat_", b'{"max_rdy_count":2500}']),
    st.binary(max_size=64),
)
responses = response_data.map(
    lambda data: (frame(0, data), HEARTBEAT if data == b"_heartbeat_" else Response(data))
)
error_codes = st.sampled_from(
    ["E_INVALID", "E_BAD_BODY", "E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED", "E_X"]
)
errors = st.builds(
    lambda code, text: (
        frame(1, code.encode() + b" " + text.encode()),
        ErrorFrame(code, text),
    ),
    error_codes,
    st.text(max_size=40),
)
messages = st.builds(
    lambda message_id, timestamp, attempts, body: (
        message_frame(message_id, timestamp, attempts, body),
        Message(message_id, timestamp, attempts, body),
    ),
    st.binary(min_size=16, max_size=16),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**16 - 1),
    st.one_of(st.binary(max_size=64), st.binary(max_size=4000)),
)
frame_lists = st.lists(st.one_of(responses, errors, messages, messages), max_size=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame_lists, st.data())
def test_any_chunking_yields_the_same_events(
    frames: list[tuple[bytes, Flat]], data: st.DataObject
) -> None:
    raw = b"".join(encoded for encoded, _ in frames)
    expected = [event for _, event in frames]

    whole = FrameDecoder()
    whole_events = whole.feed(raw)
    assert flatten(whole_events) == expected
    assert whole.take_unconsumed() == b""

    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    chunked = FrameDecoder()
    chunked_events = feed_all(chunked, split(raw, cuts))
    assert flatten(chunked_events) == expected
    assert chunked.take_unconsumed() == b""

    stepped = FrameDecoder()
    stepped.receive_data(raw)
    one_by_one: list[Event] = []
    while (event := stepped.next_event()) is not None:
        one_by_one.append(event)
    assert flatten(one_by_one) == expected
    assert stepped.take_unconsumed() == b""


@settings(max_examples=100, deadline=None)
@given(frame_lists)
def test_whole_input_batches_maximal_runs(frames: list[tuple[bytes, Flat]]) -> None:
    raw = b"".join(encoded for encoded, _ in frames)
    events = FrameDecoder().feed(raw)
    for before, after in itertools.pairwise(events):
        assert not (isinstance(before, MessageBatch) and isinstance(after, MessageBatch))


# --- fuzz: anything decodes or raises RemoteProtocolError -----------------------------


def check_any_input(chunks: Sequence[bytes], max_frame_size: int) -> None:
    decoder = FrameDecoder(max_frame_size=max_frame_size)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
    except RemoteProtocolError:
        assert_broken(decoder)

    stepped = FrameDecoder(max_frame_size=max_frame_size)
    try:
        for chunk in chunks:
            stepped.receive_data(chunk)
            while stepped.next_event() is not None:
                pass
    except RemoteProtocolError:
        assert_broken(stepped)


# Frame-shaped noise: plausible sizes and types with random data, so the fuzz reaches
# past the size check.
noise_frames = st.builds(
    lambda size, frame_type, data: struct.pack(">II", size, frame_type) + data,
    st.one_of(st.integers(0, 80), st.integers(0, 2**32 - 1)),
    st.one_of(st.integers(0, 4), st.integers(0, 2**32 - 1)),
    st.binary(max_size=80),
)
noise = st.one_of(
    st.binary(max_size=300),
    st.lists(st.one_of(noise_frames, st.binary(max_size=8)), max_size=8).map(b"".join),
)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(noise, st.lists(st.integers(0, 700), max_size=10), st.sampled_from([64, 1024, 2**26]))
def test_fuzz_any_bytes(raw: bytes, cuts: list[int], max_frame_size: int) -> None:
    check_any_input([raw], max_frame_size)
    check_any_input(split(raw, cuts), max_frame_size)


@settings(max_examples=500, deadline=None)
@given(frame_lists, st.data())
def test_fuzz_mutated_valid_stream(frames: list[tuple[bytes, Flat]], data: st.DataObject) -> None:
    raw = bytearray(b"".join(encoded for encoded, _ in frames) + OK_FRAME)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=10))
    check_any_input([bytes(raw)], 2**16)
    check_any_input(split(bytes(raw), cuts), 2**16)


CHUNK = 64 * 1024


@pytest.mark.parametrize("body_size", [1 << 20, 16 << 20])
def test_one_large_message_in_small_chunks_costs_work_linear_in_its_size(
    body_size: int,
) -> None:
    """Bounded by bytes allocated, not by a timer: joining the chunks once and cutting the
    body out is about twice the size; copying the buffer on every chunk, as the decoder
    once did, is the size times the number of chunks over two (a 32 MiB message took
    ~12 s in 64 KiB chunks)."""
    data = message_frame(ID, TS, 1, b"x" * body_size)
    chunks = [data[start : start + CHUNK] for start in range(0, len(data), CHUNK)]
    decoder = FrameDecoder()
    events: list[Event] = []
    with AllocationMeter() as meter:
        for chunk in chunks:
            events += decoder.feed(chunk)
            meter.step()
    [batch] = events
    assert isinstance(batch, MessageBatch)
    assert [len(body) for body in batch.bodies] == [body_size]
    assert meter.allocated < 3 * body_size
