"""Byte streams to nsqd: TCP, TLS, snappy and deflate, and the negotiated connection.

Owns dialing, the set-up sequence, heartbeats, request/answer matching and coalesced
writes. Knows nothing of RDY, subscriptions' policy or publishing strategy.
"""

from nsqtools.transport.conn import Conn, negotiate, open_connection

__all__ = ["Conn", "negotiate", "open_connection"]
