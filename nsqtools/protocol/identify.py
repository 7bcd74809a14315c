"""IDENTIFY negotiation and AUTH answers: typed request, typed answers.

The request says what the client would like (TLS, compression, heartbeats, buffers);
the answer says what nsqd granted and its limits (max_rdy_count, max_msg_timeout).
Durations are seconds here and milliseconds on the wire.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nsqtools.protocol.errors import RemoteProtocolError


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass(frozen=True)
class IdentifyRequest:
    client_id: str
    hostname: str
    user_agent: str
    heartbeat_interval: float = 30.0  # seconds; negative disables heartbeats
    output_buffer_size: int = 16384
    output_buffer_timeout: float = 0.25
    tls_v1: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    sample_rate: int = 0
    msg_timeout: float = 0.0  # 0 keeps nsqd's default
    topology_region: str = ""
    topology_zone: str = ""
    # The Youzan fork's: parse the extend header of an extend topic's messages; receive
    # only messages tagged so. Sent only when set, so upstream nsqd sees nothing new.
    extend_support: bool = False
    desired_tag: str = ""

    def to_json(self) -> bytes:
        document: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": True,
            "heartbeat_interval": -1
            if self.heartbeat_interval < 0
            else _ms(self.heartbeat_interval),
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": _ms(self.output_buffer_timeout),
            "tls_v1": self.tls_v1,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "sample_rate": self.sample_rate,
        }
        if self.msg_timeout > 0:
            document["msg_timeout"] = _ms(self.msg_timeout)
        if self.topology_region:
            document["topology_region"] = self.topology_region
        if self.topology_zone:
            document["topology_zone"] = self.topology_zone
        if self.extend_support:
            document["extend_support"] = True
        if self.desired_tag:
            document["desired_tag"] = self.desired_tag
        return json.dumps(document, separators=(",", ":")).encode()


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise RemoteProtocolError(f"{what} is not JSON: {data[:80]!r}") from error
    if not isinstance(document, dict):
        raise RemoteProtocolError(f"{what} is not a JSON object: {data[:80]!r}")
    return document


def _field(document: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = document.get(name, default)
    # bool is an int in Python; an int field must not accept true/false and vice versa.
    if type(value) is not kind and not (kind is float and type(value) is int):
        raise RemoteProtocolError(
            f"IDENTIFY answer field {name} is not a {kind.__name__}: {value!r}"
        )
    return value


@dataclass(frozen=True)
class IdentifyResponse:
    """What nsqd granted. Defaults are nsqd's own, for an old server that says only OK."""

    max_rdy_count: int = 2500
    version: str = ""
    max_msg_timeout: float = 900.0
    msg_timeout: float = 60.0
    tls_v1: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    max_deflate_level: int = 6
    auth_required: bool = False
    sample_rate: int = 0
    output_buffer_size: int = 16384
    output_buffer_timeout: float = 0.25

    @classmethod
    def parse(cls, data: bytes) -> IdentifyResponse:
        if data == b"OK":  # a server without feature negotiation
            return cls()
        document = _json_object(data, "IDENTIFY answer")
        return cls(
            max_rdy_count=_field(document, "max_rdy_count", int, 2500),
            version=_field(document, "version", str, ""),
            max_msg_timeout=_field(document, "max_msg_timeout", int, 900_000) / 1000,
            msg_timeout=_field(document, "msg_timeout", int, 60_000) / 1000,
            tls_v1=_field(document, "tls_v1", bool, False),
            snappy=_field(document, "snappy", bool, False),
            deflate=_field(document, "deflate", bool, False),
            deflate_level=_field(document, "deflate_level", int, 6),
            max_deflate_level=_field(document, "max_deflate_level", int, 6),
            auth_required=_field(document, "auth_required", bool, False),
            sample_rate=_field(document, "sample_rate", int, 0),
            output_buffer_size=_field(document, "output_buffer_size", int, 16384),
            output_buffer_timeout=_field(document, "output_buffer_timeout", int, 250) / 1000,
        )


@dataclass(frozen=True)
class AuthResponse:
    """nsqd's answer to AUTH: who the auth service says we are."""

    identity: str
    identity_url: str
    permission_count: int

    @classmethod
    def parse(cls, data: bytes) -> AuthResponse:
        document = _json_object(data, "AUTH answer")
        identity = document.get("identity", "")
        identity_url = document.get("identity_url", "")
        permission_count = document.get("permission_count", 0)
        if not (isinstance(identity, str) and isinstance(identity_url, str)):
            raise RemoteProtocolError(f"AUTH answer has a malformed identity: {data[:80]!r}")
        if type(permission_count) is not int:
            raise RemoteProtocolError(
                f"AUTH answer has a malformed permission_count: {data[:80]!r}"
            )
        return cls(identity, identity_url, permission_count)
