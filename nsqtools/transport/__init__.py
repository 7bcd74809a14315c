"""Byte streams to nsqd: TCP, TLS, snappy and deflate, and the negotiated connection.

Owns dialing, the I/O of the set-up sequence (the TLS handshake, the compression
layers), the reader and writer tasks, timeouts and coalesced writes. What the protocol
decides (the order of the set-up, the answers owed, heartbeats, which errors end the
connection) is protocol.session's. Knows nothing of RDY, subscriptions' policy or
publishing strategy.
"""

from nsqtools.transport.conn import Conn, open_connection
from nsqtools.transport.negotiation import negotiate

__all__ = ["Conn", "negotiate", "open_connection"]
