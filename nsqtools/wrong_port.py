"""What a server's first answer says it is, when it is not the server asked for: a port
of another service or protocol said for what it is, rather than read as garbage.

Any wrong magic gets E_BAD_PROTOCOL: nsqd's TCP port frames it as an error frame;
nsqlookupd's sends it sized but unframed, so that read as an nsqd frame its "E_BA" is
frame type 1163870785. An HTTP server answers anything with a status line. The servers
write the size, the frame type and the text apart, so the bytes may come in pieces:
ANSWER_START bytes (or all there are) decide.
"""

from __future__ import annotations

ANSWER_START = 12
_BAD = b"E_BA"  # E_BAD_PROTOCOL's first four bytes: never a frame type nor a status line's
_ERROR_FRAME_TYPE = (1).to_bytes(4, "big")
_LOOKUPD_TCP = "nsqlookupd's TCP port (it answered E_BAD_PROTOCOL as nsqlookupd does)"


def not_nsqd_tcp(start: bytes) -> str | None:
    """What the port is, when the first bytes answering nsqd's TCP magic say it is not
    nsqd's TCP port; None when they may be nsqd's."""
    if start.startswith(b"HTTP/"):
        return "an HTTP port, not nsqd's TCP port (it answered in HTTP)"
    if start[4:8] == _BAD:
        return f"{_LOOKUPD_TCP}, not nsqd's TCP port"
    return None


def not_http(start: bytes) -> str | None:
    """What the port is, when the first bytes answering an HTTP request are NSQ's TCP
    protocol; None when they may be HTTP."""
    if start[4:8] == _ERROR_FRAME_TYPE and start[8:12] == _BAD:
        return "nsqd's TCP port, not an HTTP port (it answered in NSQ's TCP protocol)"
    if start[4:8] == _BAD:
        return f"{_LOOKUPD_TCP}, not an HTTP port"
    return None
