"""IDENTIFY request/answer and AUTH answer documents (nsqtools.protocol.identify)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from nsqtools.protocol import (
    AuthResponse,
    IdentifyRequest,
    IdentifyResponse,
    RemoteProtocolError,
)

# What nsqd v1.3.0 answers to IDENTIFY with feature_negotiation, default flags.
NSQD_130_ANSWER = (
    b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,'
    b'"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,'
    b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
    b'"output_buffer_size":16384,"output_buffer_timeout":250}'
)


# --- IdentifyRequest.to_json ----------------------------------------------------------


def test_request_defaults_exact_json() -> None:
    request = IdentifyRequest("client-1", "host.example", "nsqtools/0.1")
    assert request.to_json() == (
        b'{"client_id":"client-1","hostname":"host.example","user_agent":"nsqtools/0.1",'
        b'"feature_negotiation":true,"heartbeat_interval":30000,"output_buffer_size":16384,'
        b'"output_buffer_timeout":250,"tls_v1":false,"snappy":false,"deflate":false,'
        b'"deflate_level":6,"sample_rate":0}'
    )


def test_request_all_fields_exact_json() -> None:
    request = IdentifyRequest(
        client_id="c",
        hostname="h",
        user_agent="ua",
        heartbeat_interval=5.5,
        output_buffer_size=65536,
        output_buffer_timeout=0.1,
        tls_v1=True,
        snappy=False,
        deflate=True,
        deflate_level=3,
        sample_rate=25,
        msg_timeout=45.5,
        topology_region="eu-west",
        topology_zone="eu-west-1a",
    )
    assert request.to_json() == (
        b'{"client_id":"c","hostname":"h","user_agent":"ua","feature_negotiation":true,'
        b'"heartbeat_interval":5500,"output_buffer_size":65536,"output_buffer_timeout":100,'
        b'"tls_v1":true,"snappy":false,"deflate":true,"deflate_level":3,"sample_rate":25,'
        b'"msg_timeout":45500,"topology_region":"eu-west","topology_zone":"eu-west-1a"}'
    )


@pytest.mark.parametrize(
    ("seconds", "wire"),
    [(-1, -1), (-0.001, -1), (-30.0, -1), (0, 0), (1, 1000), (0.0016, 2), (60.0, 60000)],
)
def test_request_heartbeat_interval(seconds: float, wire: int) -> None:
    document = json.loads(IdentifyRequest("c", "h", "ua", heartbeat_interval=seconds).to_json())
    assert document["heartbeat_interval"] == wire
    assert type(document["heartbeat_interval"]) is int


def test_request_optional_fields_only_when_set() -> None:
    document = json.loads(IdentifyRequest("c", "h", "ua").to_json())
    assert "msg_timeout" not in document
    assert "topology_region" not in document
    assert "topology_zone" not in document
    assert document["feature_negotiation"] is True

    document = json.loads(IdentifyRequest("c", "h", "ua", msg_timeout=0.0).to_json())
    assert "msg_timeout" not in document

    document = json.loads(IdentifyRequest("c", "h", "ua", msg_timeout=120).to_json())
    assert document["msg_timeout"] == 120000

    document = json.loads(IdentifyRequest("c", "h", "ua", topology_zone="z1").to_json())
    assert document["topology_zone"] == "z1"
    assert "topology_region" not in document

    document = json.loads(IdentifyRequest("c", "h", "ua", topology_region="r1").to_json())
    assert document["topology_region"] == "r1"
    assert "topology_zone" not in document


def test_request_snappy_flag() -> None:
    document = json.loads(IdentifyRequest("c", "h", "ua", snappy=True).to_json())
    assert document["snappy"] is True
    assert document["deflate"] is False


def test_request_non_ascii_is_valid_json() -> None:
    raw = IdentifyRequest("clïent", "hôst", "ua").to_json()
    raw.decode("ascii")  # escaped, so the body is plain ASCII
    document = json.loads(raw)
    assert document["client_id"] == "clïent"
    assert document["hostname"] == "hôst"


# --- IdentifyResponse.parse -----------------------------------------------------------


def test_response_from_nsqd_130() -> None:
    response = IdentifyResponse.parse(NSQD_130_ANSWER)
    assert response == IdentifyResponse(
        max_rdy_count=2500,
        version="1.3.0",
        max_msg_timeout=900.0,
        msg_timeout=60.0,
        tls_v1=False,
        snappy=False,
        deflate=False,
        deflate_level=6,
        max_deflate_level=6,
        auth_required=False,
        sample_rate=0,
        output_buffer_size=16384,
        output_buffer_timeout=0.25,
    )


def test_response_with_features_granted() -> None:
    data = (
        b'{"max_rdy_count":100,"version":"1.3.0","max_msg_timeout":300000,'
        b'"msg_timeout":30000,"tls_v1":true,"deflate":true,"deflate_level":4,'
        b'"max_deflate_level":9,"snappy":false,"sample_rate":50,"auth_required":true,'
        b'"output_buffer_size":8192,"output_buffer_timeout":100,"future_field":[1,2]}'
    )
    response = IdentifyResponse.parse(data)
    assert response.max_rdy_count == 100
    assert response.max_msg_timeout == 300.0
    assert response.msg_timeout == 30.0
    assert response.tls_v1 is True
    assert response.deflate is True
    assert response.snappy is False
    assert response.deflate_level == 4
    assert response.max_deflate_level == 9
    assert response.sample_rate == 50
    assert response.auth_required is True
    assert response.output_buffer_size == 8192
    assert response.output_buffer_timeout == 0.1


def test_response_ok_gives_defaults() -> None:
    response = IdentifyResponse.parse(b"OK")
    assert response == IdentifyResponse()
    assert response.max_rdy_count == 2500
    assert response.max_msg_timeout == 900.0
    assert response.msg_timeout == 60.0
    assert response.output_buffer_timeout == 0.25
    assert response.version == ""
    assert not (response.tls_v1 or response.snappy or response.deflate)
    assert not response.auth_required


def test_response_missing_fields_take_defaults() -> None:
    assert IdentifyResponse.parse(b"{}") == IdentifyResponse()
    assert IdentifyResponse.parse(b'{"snappy":true}') == IdentifyResponse(snappy=True)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"not json",
        b"ok",
        b"OK\n",
        b"E_INVALID",
        b"[1,2]",
        b'"OK"',
        b"null",
        b"2500",
        b"\xff\xfe\xfa",
        b'{"version":"1.3.0"',
    ],
)
def test_response_malformed_json(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="IDENTIFY answer"):
        IdentifyResponse.parse(data)


@pytest.mark.parametrize(
    "field",
    [
        b'"max_rdy_count":"2500"',
        b'"max_rdy_count":true',
        b'"max_rdy_count":2500.5',
        b'"max_rdy_count":null',
        b'"version":130',
        b'"version":null',
        b'"max_msg_timeout":"900000"',
        b'"msg_timeout":60000.0',
        b'"msg_timeout":false',
        b'"tls_v1":1',
        b'"tls_v1":"false"',
        b'"snappy":0',
        b'"deflate":null',
        b'"deflate_level":"6"',
        b'"max_deflate_level":true',
        b'"auth_required":"yes"',
        b'"sample_rate":[0]',
        b'"output_buffer_size":{}',
        b'"output_buffer_timeout":"250"',
    ],
)
def test_response_wrong_field_types(field: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="IDENTIFY answer field"):
        IdentifyResponse.parse(b"{" + field + b"}")


# --- AuthResponse.parse ---------------------------------------------------------------


def test_auth_response() -> None:
    data = b'{"identity":"alice","identity_url":"https://auth.example/alice","permission_count":2}'
    assert AuthResponse.parse(data) == AuthResponse("alice", "https://auth.example/alice", 2)


def test_auth_response_defaults() -> None:
    assert AuthResponse.parse(b"{}") == AuthResponse("", "", 0)
    assert AuthResponse.parse(b'{"identity":"bob"}') == AuthResponse("bob", "", 0)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "not JSON"),
        (b"OK", "not JSON"),
        (b"{", "not JSON"),
        (b"\xff", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'"alice"', "not a JSON object"),
        (b'{"identity":5}', "identity"),
        (b'{"identity":null}', "identity"),
        (b'{"identity_url":["x"]}', "identity"),
        (b'{"permission_count":"2"}', "permission_count"),
        (b'{"permission_count":true}', "permission_count"),
        (b'{"permission_count":2.0}', "permission_count"),
        (b'{"permission_count":null}', "permission_count"),
    ],
)
def test_auth_response_malformed(data: bytes, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        AuthResponse.parse(data)


# A peer can send deeply nested JSON; json.loads then raises RecursionError, which
# escapes instead of RemoteProtocolError.
@pytest.mark.parametrize(
    "parse",
    [IdentifyResponse.parse, AuthResponse.parse],
    ids=["IdentifyResponse", "AuthResponse"],
)
def test_deeply_nested_json_is_a_remote_protocol_error(parse: Callable[[bytes], object]) -> None:
    with pytest.raises(RemoteProtocolError):
        parse(b"[" * 100_000)
