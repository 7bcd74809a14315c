"""Topic and channel names: 1..64 of [.a-zA-Z0-9_-], with an optional #ephemeral suffix.

The suffix counts toward the 64 characters, as in nsqd. Note that "." and ".." are
valid names: never join a name into a filesystem path without care.
"""

from __future__ import annotations

import re

from nsqtools.protocol.errors import LocalProtocolError

MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"
_VALID = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def is_valid_name(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME_LENGTH and _VALID.fullmatch(name) is not None


def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)


def check_topic(topic: str) -> str:
    """Return the topic unchanged, or raise LocalProtocolError saying why it is invalid."""
    return _check("topic", topic)


def check_channel(channel: str) -> str:
    """Return the channel unchanged, or raise LocalProtocolError saying why it is invalid."""
    return _check("channel", channel)


def _check(kind: str, name: str) -> str:
    if is_valid_name(name):
        return name
    if not name:
        reason = "it is empty"
    elif len(name) > MAX_NAME_LENGTH:
        reason = f"it is longer than {MAX_NAME_LENGTH} characters"
    else:
        reason = "use only letters, digits, '.', '_' and '-', optionally ending in #ephemeral"
    raise LocalProtocolError(f"invalid {kind} name {name!r}: {reason}")
