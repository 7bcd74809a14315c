"""Protocol errors, split by which side broke the rules.

LocalProtocolError: we were about to send something nsqd would reject (a bad name, an
empty or oversized body). RemoteProtocolError: the peer sent bytes that are not valid
NSQ. Both derive from ProtocolError, whose message is one line a CLI can print.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """A violation of the NSQ protocol; str() is a one-line description."""


class LocalProtocolError(ProtocolError, ValueError):
    """Our side would break the protocol; nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something that is not valid NSQ."""
