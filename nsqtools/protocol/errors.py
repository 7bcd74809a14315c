"""Protocol errors, split by which side broke the rules, and the set-up's failures.

LocalProtocolError: we were about to send something nsqd would reject (a bad name, an
empty or oversized body). RemoteProtocolError: the peer sent bytes that are not valid
NSQ. ErrorFrameError: nsqd answered with an error frame that ends the connection.
SetupError's kinds: the set-up cannot complete though nobody broke the rules (not an
nsqd, TLS not offered, AUTH required without a secret or denied). All derive from
ProtocolError, whose message is one line a CLI can print.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqtools.protocol.frames import ErrorFrame


class ProtocolError(Exception):
    """A violation of the NSQ protocol; str() is a one-line description."""


class LocalProtocolError(ProtocolError, ValueError):
    """Our side would break the protocol; nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something that is not valid NSQ."""


class ErrorFrameError(ProtocolError):
    """nsqd answered with an error frame after which it closes the connection (during
    the set-up, any error frame)."""

    def __init__(self, address: str, frame: ErrorFrame) -> None:
        super().__init__(f"{address}: {frame}")
        self.frame = frame


class SetupError(ProtocolError):
    """The set-up sequence cannot complete, though neither side broke the rules."""


class NotNsqError(SetupError):
    """The peer's answer to the magic says it is not nsqd's TCP port (an HTTP port, or
    nsqlookupd's TCP port)."""


class TlsNotOfferedError(SetupError):
    """TLS was asked for and nsqd's answer to IDENTIFY does not offer it."""


class AuthSecretMissingError(SetupError):
    """nsqd requires AUTH and no secret was given."""


class AuthDeniedError(SetupError):
    """nsqd answered AUTH with an error frame."""
