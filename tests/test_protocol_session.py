"""A connection's protocol state (nsqtools.protocol.session), driven with bytes only:
the set-up sequence in nsqd's order, the answers owed, which error frames end the
connection, and the sticky error state."""

from __future__ import annotations

import itertools
import json
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.protocol import (
    Answered,
    ErrorFrame,
    IdentifyRequest,
    LocalProtocolError,
    MessageBatch,
    Phase,
    Refused,
    RemoteProtocolError,
    Session,
    SessionEvent,
    SetupStep,
    commands,
)
from nsqtools.protocol.errors import (
    AuthDeniedError,
    AuthSecretMissingError,
    ErrorFrameError,
    NotNsqError,
    TlsNotOfferedError,
)

ADDRESS = "nsqd.example:4150"
ID = b"0a1b2c3d4e5f6a7b"
AUTH_ANSWER = b'{"identity":"alice","identity_url":"","permission_count":2}'


def frame(frame_type: int, data: bytes) -> bytes:
    return struct.pack(">II", len(data) + 4, frame_type) + data


def response(data: bytes) -> bytes:
    return frame(0, data)


def error(text: bytes) -> bytes:
    return frame(1, text)


def message(body: bytes) -> bytes:
    return frame(2, struct.pack(">qH", 1_700_000_000_000_000_000, 1) + ID + body)


HEARTBEAT = response(b"_heartbeat_")
OK = response(b"OK")


def identify_answer(**granted: Any) -> bytes:
    return response(json.dumps({"version": "1.3.0", **granted}).encode())


def new_session(
    auth_secret: str = "", *, tls: bool = False, accepts_messages: bool = False
) -> Session[str]:
    request = IdentifyRequest("client", "host", "nsqtools/test", tls_v1=tls)
    return Session(ADDRESS, request, auth_secret, accepts_messages=accepts_messages)


def ready_session(*, accepts_messages: bool = False) -> Session[str]:
    session = new_session(accepts_messages=accepts_messages)
    session.data_to_send()
    session.receive_data(identify_answer())
    assert session.next_step() is SetupStep.READY
    return session


def events(session: Session[str], data: bytes) -> list[SessionEvent[str]]:
    session.receive_data(data)
    return list(session.next_events())


# --- the set-up sequence ---------------------------------------------------------------


def test_set_up_begins_with_the_magic_and_identify() -> None:
    session = new_session()
    request = IdentifyRequest("client", "host", "nsqtools/test")
    assert session.data_to_send() == commands.MAGIC_V2 + commands.identify(request.to_json())
    assert session.data_to_send() == b""
    assert session.phase is Phase.IDENTIFY
    assert session.next_step() is SetupStep.NEED_DATA


def test_plain_set_up_is_ready_after_the_identify_answer() -> None:
    session = new_session()
    answer = identify_answer(max_rdy_count=123, msg_timeout=42_000)
    session.receive_data(answer[:5])
    assert session.next_step() is SetupStep.NEED_DATA
    session.receive_data(answer[5:])
    assert session.next_step() is SetupStep.READY
    assert session.phase is Phase.READY
    assert session.identify.max_rdy_count == 123
    assert session.identify.msg_timeout == 42.0
    assert session.auth is None


def test_a_server_without_feature_negotiation_answers_ok() -> None:
    session = new_session()
    session.receive_data(OK)
    assert session.next_step() is SetupStep.READY
    assert session.identify.max_rdy_count == 2500


def test_identify_is_unknown_before_its_answer() -> None:
    with pytest.raises(LocalProtocolError, match="has not answered IDENTIFY yet"):
        new_session().identify  # noqa: B018


def test_tls_then_snappy_then_auth_in_nsqds_order() -> None:
    session = new_session("secret", tls=True)
    session.data_to_send()
    session.receive_data(identify_answer(tls_v1=True, snappy=True, auth_required=True))
    assert session.next_step() is SetupStep.START_TLS
    assert (session.next_step(), session.phase) == (SetupStep.NEED_DATA, Phase.TLS)  # over TLS
    session.receive_data(OK)
    assert session.next_step() is SetupStep.START_SNAPPY
    assert session.take_unconsumed() == b""
    assert (session.next_step(), session.phase) == (SetupStep.NEED_DATA, Phase.SNAPPY)
    assert session.data_to_send() == b""
    session.receive_data(OK)
    assert (session.next_step(), session.phase) == (SetupStep.NEED_DATA, Phase.AUTH)
    assert session.data_to_send() == commands.auth("secret")
    session.receive_data(response(AUTH_ANSWER))
    assert session.next_step() is SetupStep.READY
    assert session.auth is not None
    assert (session.auth.identity, session.auth.permission_count) == ("alice", 2)


def test_deflate_is_started_at_the_granted_level() -> None:
    session = new_session()
    session.receive_data(identify_answer(deflate=True, deflate_level=3))
    assert session.next_step() is SetupStep.START_DEFLATE
    assert session.identify.deflate_level == 3
    session.receive_data(OK)
    assert session.next_step() is SetupStep.READY


def test_bytes_after_an_answer_go_to_the_layer_started_next() -> None:
    """A compressed OK can come in the same read as the plain IDENTIFY answer."""
    session = new_session()
    session.receive_data(identify_answer(snappy=True) + b"\xff\x06\x00\x00sNaPpY")
    assert session.next_step() is SetupStep.START_SNAPPY
    assert session.take_unconsumed() == b"\xff\x06\x00\x00sNaPpY"


def test_tls_is_started_only_when_asked_for() -> None:
    session = new_session()
    session.receive_data(identify_answer(tls_v1=True))
    assert session.next_step() is SetupStep.READY


def test_frames_after_the_last_set_up_answer_are_kept() -> None:
    session = new_session(accepts_messages=True)
    session.data_to_send()
    session.receive_data(identify_answer() + HEARTBEAT + message(b"early"))
    assert session.next_step() is SetupStep.READY
    (batch,) = session.next_events()
    assert isinstance(batch, MessageBatch) and batch.bodies == [b"early"]
    assert session.data_to_send() == commands.NOP


def test_a_heartbeat_during_set_up_is_answered() -> None:
    session = new_session()
    session.data_to_send()
    session.receive_data(HEARTBEAT)
    assert session.next_step() is SetupStep.NEED_DATA
    assert session.data_to_send() == commands.NOP
    session.receive_data(OK)
    assert session.next_step() is SetupStep.READY


# --- set-up failures -------------------------------------------------------------------


def test_an_http_server_is_not_an_nsqd() -> None:
    session = new_session()
    with pytest.raises(NotNsqError, match=r"^nsqd\.example:4150 is an HTTP port, not nsqd's"):
        session.receive_data(b"HTTP/1.1 400 Bad Request\r\n\r\n")


@pytest.mark.parametrize(
    "pieces", [[b"\x00\x00\x00\x0eE_BAD_PROTOCOL"], [b"\x00\x00\x00\x0e", b"E_BAD"]]
)
def test_nsqlookupds_tcp_port_is_said_for_what_it_is(pieces: list[bytes]) -> None:
    """nsqlookupd answers the V2 magic with E_BAD_PROTOCOL sized but unframed, written
    in two pieces: read as a frame, its type would be 1163870785."""
    session = new_session()
    with pytest.raises(NotNsqError) as raised:
        for piece in pieces:
            session.receive_data(piece)
    assert str(raised.value) == (
        "nsqd.example:4150 is nsqlookupd's TCP port (it answered E_BAD_PROTOCOL as "
        "nsqlookupd does), not nsqd's TCP port"
    )


def test_tls_asked_for_and_not_offered() -> None:
    session = new_session(tls=True)
    session.receive_data(identify_answer(tls_v1=False))
    with pytest.raises(TlsNotOfferedError, match="does not offer TLS"):
        session.next_step()


def test_data_before_the_tls_handshake_is_refused() -> None:
    session = new_session(tls=True)
    session.receive_data(identify_answer(tls_v1=True) + b"x")
    with pytest.raises(RemoteProtocolError, match="sent data before the TLS handshake"):
        session.next_step()


def test_auth_without_a_secret_fails_after_the_upgrades() -> None:
    session = new_session()
    session.receive_data(identify_answer(snappy=True, auth_required=True))
    assert session.next_step() is SetupStep.START_SNAPPY
    session.receive_data(OK)
    with pytest.raises(AuthSecretMissingError, match="requires AUTH, but no auth secret"):
        session.next_step()


def test_auth_denied() -> None:
    session = new_session("wrong")
    session.receive_data(identify_answer(auth_required=True))
    session.next_step()
    session.receive_data(error(b"E_AUTH_FAILED AUTH failed"))
    with pytest.raises(AuthDeniedError) as raised:
        session.next_step()
    assert str(raised.value) == f"{ADDRESS} denied AUTH: E_AUTH_FAILED AUTH failed"


def test_an_error_frame_answering_identify() -> None:
    session = new_session()
    session.receive_data(error(b"E_BAD_BODY IDENTIFY invalid body"))
    with pytest.raises(ErrorFrameError) as raised:
        session.next_step()
    assert raised.value.frame == ErrorFrame("E_BAD_BODY", "IDENTIFY invalid body")


def test_an_upgrade_answered_with_other_than_ok() -> None:
    session = new_session()
    session.receive_data(identify_answer(deflate=True))
    session.next_step()
    session.receive_data(response(b"nope"))
    with pytest.raises(RemoteProtocolError, match=r"answered deflate set-up with b'nope'"):
        session.next_step()


def test_a_message_during_set_up() -> None:
    session = new_session(accepts_messages=True)
    session.receive_data(message(b"too soon"))
    with pytest.raises(RemoteProtocolError, match="sent a message during IDENTIFY"):
        session.next_step()


def test_a_set_up_failure_is_sticky() -> None:
    session = new_session(tls=True)
    session.receive_data(identify_answer())
    with pytest.raises(TlsNotOfferedError) as first:
        session.next_step()
    for call in (session.next_step, lambda: session.receive_data(OK)):
        with pytest.raises(TlsNotOfferedError) as again:
            call()
        assert again.value is first.value
    assert session.phase is Phase.CLOSED
    assert session.data_to_send() == b""


def test_commands_wait_for_the_set_up() -> None:
    session = new_session()
    with pytest.raises(LocalProtocolError, match="IDENTIFY is awaited"):
        session.expect_answer("SUB")
    with pytest.raises(LocalProtocolError, match="IDENTIFY is awaited"):
        session.next_events()


# --- the answers owed ------------------------------------------------------------------


def test_answers_settle_the_requests_in_the_order_sent() -> None:
    session = ready_session()
    session.expect_answer("SUB")
    session.expect_answer("PUB")
    assert session.oldest_owed == "SUB"
    assert events(session, OK + response(b"OK2")) == [
        Answered("SUB", b"OK"),
        Answered("PUB", b"OK2"),
    ]
    assert session.oldest_owed is None


def test_a_heartbeat_is_answered_with_nop() -> None:
    session = ready_session()
    assert events(session, HEARTBEAT + HEARTBEAT) == []
    assert session.data_to_send() == commands.NOP + commands.NOP


def test_messages_are_handed_on_in_batches() -> None:
    session = ready_session(accepts_messages=True)
    (batch,) = events(session, message(b"one") + message(b"two"))
    assert isinstance(batch, MessageBatch) and batch.bodies == [b"one", b"two"]


def test_a_message_nobody_consumes_comes_after_the_events_before_it() -> None:
    session = ready_session()
    session.expect_answer("PUB")
    session.receive_data(OK + message(b"unasked"))
    received = session.next_events()
    assert next(received) == Answered("PUB", b"OK")
    with pytest.raises(RemoteProtocolError, match="sent a message before any SUB"):
        next(received)


def test_an_unrequested_answer_is_a_protocol_error() -> None:
    session = ready_session()
    with pytest.raises(RemoteProtocolError, match=r"sent an unrequested answer: b'OK'"):
        events(session, OK)


def test_a_malformed_frame_is_a_protocol_error_and_sticky() -> None:
    session = ready_session()
    session.expect_answer("PUB")
    with pytest.raises(RemoteProtocolError, match="unknown frame type 7") as first:
        events(session, frame(7, b"?"))
    with pytest.raises(RemoteProtocolError) as again:
        session.receive_data(OK)
    assert again.value is first.value
    assert session.close() == ["PUB"]


# --- error frames: which end the connection --------------------------------------------


@pytest.mark.parametrize("code", ["E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"])
def test_a_failed_fin_req_or_touch_answers_no_request(code: str) -> None:
    session = ready_session()
    session.expect_answer("PUB")
    assert events(session, error(code.encode() + b" message id")) == [
        ErrorFrame(code, "message id")
    ]
    assert session.oldest_owed == "PUB"
    assert events(session, OK) == [Answered("PUB", b"OK")]


@pytest.mark.parametrize("code", ["E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE"])
def test_the_forks_leader_errors_refuse_a_request_and_keep_the_connection(code: str) -> None:
    session = ready_session()
    session.expect_answer("PUB")
    session.expect_answer("PUB again")
    assert events(session, error(code.encode())) == [Refused("PUB", ErrorFrame(code, ""))]
    assert session.phase is Phase.READY
    assert events(session, OK) == [Answered("PUB again", b"OK")]


@pytest.mark.parametrize(
    "code",
    ["E_INVALID", "E_BAD_TOPIC", "E_BAD_MESSAGE", "E_BAD_BODY", "E_TOPIC_NOT_EXIST"],
)
def test_any_other_error_refuses_a_request_and_ends_the_connection(code: str) -> None:
    session = ready_session()
    for request in ("PUB 1", "PUB 2", "PUB 3"):
        session.expect_answer(request)
    text = code.encode() + b" refused"
    received = events(session, HEARTBEAT + error(text) + OK + HEARTBEAT)
    assert received == [Refused("PUB 1", ErrorFrame(code, "refused"))]  # nothing after it
    assert session.phase is Phase.CLOSED
    assert session.data_to_send() == b""  # nsqd reads nothing more
    with pytest.raises(ErrorFrameError, match=f"{ADDRESS}: {code} refused"):
        session.receive_data(OK)
    with pytest.raises(ErrorFrameError):
        session.expect_answer("PUB 4")
    assert session.close() == ["PUB 2", "PUB 3"]


def test_a_fatal_error_with_nothing_owed() -> None:
    session = ready_session()
    assert events(session, error(b"E_INVALID cannot SUB in current state")) == [
        Refused(None, ErrorFrame("E_INVALID", "cannot SUB in current state"))
    ]


def test_a_request_sent_on_a_fatal_refusal_is_owed_until_close() -> None:
    """What the I/O layer does on the refusal (a callback sending again) happens while
    the connection is open, as nsqd saw it; close() then returns it, in order."""
    session = ready_session()
    session.expect_answer("PUB 1")
    session.expect_answer("PUB 2")
    session.receive_data(error(b"E_BAD_TOPIC bad"))
    received = session.next_events()
    assert next(received) == Refused("PUB 1", ErrorFrame("E_BAD_TOPIC", "bad"))
    session.expect_answer("PUB 3")
    assert session.close() == ["PUB 2", "PUB 3"]
    assert list(received) == []


def test_close_returns_what_is_owed_and_ends_the_session() -> None:
    session = ready_session()
    session.expect_answer("SUB")
    session.expect_answer("CLS")
    assert session.close() == ["SUB", "CLS"]
    assert session.close() == []
    with pytest.raises(LocalProtocolError, match="is closed"):
        session.receive_data(OK)


# --- any chunking ----------------------------------------------------------------------

SET_UP = identify_answer(auth_required=True) + HEARTBEAT + response(AUTH_ANSWER)
AFTER = OK + message(b"m1") + HEARTBEAT + error(b"E_FIN_FAILED late") + response(b"CLOSE_WAIT")


def run_through(chunks: list[bytes]) -> tuple[list[SessionEvent[str]], bytes]:
    """Feed chunks as reads come, through set-up and after; what came out."""
    session = new_session("secret", accepts_messages=True)
    sent = session.data_to_send()
    received: list[SessionEvent[str]] = []
    for chunk in chunks:
        session.receive_data(chunk)
        if session.phase is not Phase.READY and session.next_step() is SetupStep.READY:
            session.expect_answer("SUB")
            session.expect_answer("CLS")
        if session.phase is Phase.READY:
            received.extend(session.next_events())
        sent += session.data_to_send()
    return received, sent


@given(st.lists(st.integers(min_value=0, max_value=len(SET_UP + AFTER)), max_size=8))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    data = SET_UP + AFTER
    points = sorted({0, *cuts, len(data)})
    chunks = [data[start:end] for start, end in itertools.pairwise(points) if end > start]
    received, sent = run_through(chunks)
    assert [type(event) for event in received] == [Answered, MessageBatch, ErrorFrame, Answered]
    assert received[0] == Answered("SUB", b"OK")
    assert received[3] == Answered("CLS", b"CLOSE_WAIT")
    request = IdentifyRequest("client", "host", "nsqtools/test")
    magic_and_identify = commands.MAGIC_V2 + commands.identify(request.to_json())
    assert sent == magic_and_identify + commands.auth("secret") + commands.NOP * 2
