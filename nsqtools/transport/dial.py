"""Dialing nsqd: a TCP stream to host:port, from a chosen local address if asked.

Owns the socket-level connect (trio's happy eyeballs, or, with local_addr, a socket
bound first as go-nsq's net.Dialer LocalAddr does) and saying in plain words why it
failed: "connection refused", "name does not resolve", never "unknown error -2".
Every failure is a ConnectError naming the address.
"""

from __future__ import annotations

import socket

import trio

from nsqtools.addresses import split_address, split_bind_address
from nsqtools.durations import format_duration
from nsqtools.errors import ConnectError, describe_connect_failure


async def dial(address: str, timeout: float, local_addr: str = "") -> trio.SocketStream:
    """A TCP stream to `address` ("host:port"), bound to `local_addr` if given."""
    host, port = split_address(address)
    try:
        with trio.fail_after(timeout):
            if local_addr:
                return await _dial_from(address, host, port, local_addr)
            return await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        limit = format_duration(timeout)
        raise _cannot_connect(address, f"timed out after {limit} (dial_timeout)") from None
    except UnicodeError as error:  # the IDNA codec refuses it: an empty or over-long label
        raise _cannot_connect(address, "not a valid host name") from error
    except OSError as error:
        raise _cannot_connect(address, describe_connect_failure(error)) from error


def _cannot_connect(address: str, reason: str) -> ConnectError:
    return ConnectError(f"cannot connect to {address}: {reason}")


async def _dial_from(address: str, host: str, port: int, local_addr: str) -> trio.SocketStream:
    """Connect from `local_addr` to the first of host's addresses that accepts, trying
    those of the local address's family in the resolver's order."""
    local = await _bind_addresses(address, local_addr)
    targets = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    failure: OSError | None = None
    for family, kind, protocol, _, target in targets:
        if family not in local:
            continue
        sock = trio.socket.socket(family, kind, protocol)
        try:
            await _bind(sock, local[family], address, local_addr)
            await sock.connect(target)
        except OSError as error:
            sock.close()
            failure = error
            continue
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)
    if failure is None:
        raise _cannot_connect(address, f"it has no address of local_addr {local_addr}'s family")
    raise failure


async def _bind_addresses(address: str, local_addr: str) -> dict[int, tuple[object, ...]]:
    """Family → socket address to bind; an empty host offers the wildcard of each."""
    host, port = split_bind_address(local_addr)
    try:
        found = await trio.socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as error:
        raise _bind_failure(address, local_addr, error) from error
    chosen: dict[int, tuple[object, ...]] = {}
    for family, _, _, _, sockaddr in found:
        chosen.setdefault(family, sockaddr)
    return chosen


async def _bind(
    sock: trio.socket.SocketType, sockaddr: object, address: str, local_addr: str
) -> None:
    try:
        await sock.bind(sockaddr)
    except OSError as error:
        raise _bind_failure(address, local_addr, error) from error


def _bind_failure(address: str, local_addr: str, error: OSError) -> ConnectError:
    reason = f"cannot bind to local_addr {local_addr}: {describe_connect_failure(error)}"
    return _cannot_connect(address, reason)
