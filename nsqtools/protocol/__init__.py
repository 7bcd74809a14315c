"""The NSQ V2 TCP protocol, sans-IO: bytes in, events out; intentions in, bytes out.

Owns command encoding (commands), frame decoding (frames), name rules (names), the
IDENTIFY/AUTH negotiation documents (identify), a connection's protocol state: its
set-up sequence, the answers owed, which errors end it (session). What another server's
answer says it is lives beside it (nsqtools.wrong_port: HTTP clients ask it too, which
should not load this package). It never imports trio, ssl, socket, httpx, click or
rich, so it is tested and fuzzed without any network.
"""

from nsqtools.protocol import commands, youzan
from nsqtools.protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from nsqtools.protocol.frames import (
    HEARTBEAT,
    ErrorFrame,
    Event,
    FrameDecoder,
    Heartbeat,
    Message,
    MessageBatch,
    Response,
)
from nsqtools.protocol.identify import AuthResponse, IdentifyRequest, IdentifyResponse
from nsqtools.protocol.names import check_channel, check_topic, is_ephemeral, is_valid_name
from nsqtools.protocol.session import Answered, Phase, Refused, Session, SessionEvent, SetupStep

__all__ = [
    "HEARTBEAT",
    "Answered",
    "AuthResponse",
    "ErrorFrame",
    "Event",
    "FrameDecoder",
    "Heartbeat",
    "IdentifyRequest",
    "IdentifyResponse",
    "LocalProtocolError",
    "Message",
    "MessageBatch",
    "Phase",
    "ProtocolError",
    "Refused",
    "RemoteProtocolError",
    "Response",
    "Session",
    "SessionEvent",
    "SetupStep",
    "check_channel",
    "check_topic",
    "commands",
    "is_ephemeral",
    "is_valid_name",
    "youzan",
]
