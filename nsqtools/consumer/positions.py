"""Starting a channel of one partition of the Youzan fork at a position, over the
partition leader's HTTP API.

The fork's SUB_ADVANCED ignores its partition parameter when it carries a start
position: it serves a partition of the nsqd's own choosing (spec, "Observed on a running
fork"); and SUB_ORDERED takes no position at all. So a consumer that knows the leader's
HTTP address (nsqlookupd gives it) moves the channel first, POST /channel/setoffset
(creating the channel with POST /channel/create if it does not exist yet), then
subscribes to the partition without a position. Unlike SUB_ADVANCED's position, this
one moves the channel whatever clients it has.
"""

from __future__ import annotations

from nsqtools.errors import NsqError
from nsqtools.httpapi import HttpApiError, send
from nsqtools.httpapi.call import post
from nsqtools.protocol.youzan import StartPosition

SERVER = "nsqd"
CHANNEL_NOT_FOUND = "CHANNEL_NOT_FOUND"
# The consumer's HTTP requests all take the timeout of its lookups.
TIMEOUT_OPTION = "lookupd_poll_timeout"


class StartPositionError(NsqError):
    """A start position that was refused or cannot be applied; `code` is nsqd's error
    text when it gave one (E_TOPIC_NOT_EXIST: the partition moved)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


async def start_channel_at(
    http_address: str,
    topic: str,
    channel: str,
    partition: int,
    start: StartPosition,
    timeout: float,
) -> None:
    """Move the channel of the partition to `start`, creating the channel if need be."""
    # Imported here: httpx costs ~100ms at start-up, and most consumers never need it.
    from nsqtools.httpapi.clients import async_client

    params = {"topic": topic, "partition": str(partition), "channel": channel}
    set_offset = post(SERVER, http_address, "/channel/setoffset", params, start.wire.encode())
    try:
        async with async_client(timeout=timeout) as client:
            try:
                await send(client, set_offset, timeout_option=TIMEOUT_OPTION)
            except HttpApiError as error:
                if error.message != CHANNEL_NOT_FOUND:
                    raise
                create = post(SERVER, http_address, "/channel/create", params)
                await send(client, create, timeout_option=TIMEOUT_OPTION)
                await send(client, set_offset, timeout_option=TIMEOUT_OPTION)
    except HttpApiError as error:
        where = f"{topic}/{channel} partition {partition}"
        message = f"cannot start {where} at {start}: {error}"
        raise StartPositionError(message, error.message) from error
