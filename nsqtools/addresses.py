"""host:port addresses as the Go tools take them ("127.0.0.1:4150", "[::1]:4150"):
splitting, joining, and telling two spellings of one address apart from two addresses."""

from __future__ import annotations

import ipaddress


class AddressError(ValueError):
    """An address that is not host:port; the message is one line naming it."""


def split_address(address: str) -> tuple[str, int]:
    """("host", port) from "host:port"; brackets around an IPv6 host are removed."""
    host, port = _split(address)
    if not host:
        raise AddressError(f"invalid address {address!r}: expected host:port")
    if not 0 < port < 65536:
        raise AddressError(f"invalid address {address!r}: port must be 1..65535")
    return host, port


def split_bind_address(address: str) -> tuple[str, int]:
    """("host", port) of a local address to bind to: an empty host means any address,
    port 0 any port (":0", "127.0.0.2:0", "[::1]:4000")."""
    host, port = _split(address)
    if port > 65535:
        raise AddressError(f"invalid address {address!r}: port must be 0..65535")
    return host, port


def _split(address: str) -> tuple[str, int]:
    if "://" in address:
        raise AddressError(_url_given(address))
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise AddressError(f"invalid address {address!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise AddressError(f"invalid address {address!r}: put an IPv6 host in brackets")
    return host, int(port_text)


def _url_given(address: str) -> str:
    """The error for a URL where host:port is wanted, naming the host:port in it."""
    host_port = address.partition("://")[2].partition("/")[0]
    instead = f" (give {host_port})" if host_port else ""
    return f"invalid address {address!r}: a URL, where host:port is wanted{instead}"


def join_host_port(host: str, port: int) -> str:
    """host:port from its parts, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_key(address: str) -> str:
    """The same key for every spelling of one host:port that needs no name lookup to
    tell: host names are case-blind, and an IP address has one shortest form.

    localhost and 127.0.0.1 get different keys: only a lookup could say they are one.
    """
    host, port = split_address(address)
    try:
        host = ipaddress.ip_address(host).compressed
    except ValueError:
        host = host.lower()
    return join_host_port(host, port)
