"""Errors a command prints as one line: what failed, where, and why.

Raised by the transport, consumer and producer; the CLI maps them to exit status 1.
Protocol violations have their own types in nsqtools.protocol.errors. A failed file
operation (an OSError) is described in the same way by describe_file_error, a failed
connect (refused, unresolvable; trio's "all attempts failed") by describe_connect_failure.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

# getaddrinfo's failures that its own text (or none, from os.strerror) says badly.
_RESOLVE_FAILURES: dict[int | None, str] = {socket.EAI_NONAME: "name does not resolve"}


class NsqError(Exception):
    """Base of every operational failure; str() is one line fit for a terminal."""


class ConnectError(NsqError):
    """A TCP connection to nsqd could not be made (refused, unreachable, timed out)."""


class TlsError(NsqError):
    """TLS could not be set up: a failed handshake, verification, or a refusal to offer it."""


class AuthError(NsqError):
    """nsqd required AUTH and it was missing or denied."""


class ConnectionClosed(NsqError):
    """The connection closed before an answer arrived, or was used after closing."""


class NsqErrorResponse(NsqError):
    """nsqd answered a command with an error frame such as E_BAD_TOPIC. `hint` says in
    words what a code means when nsqd's own text does not (the Youzan fork's codes)."""

    def __init__(self, address: str, code: str, message: str, hint: str = "") -> None:
        text = f"{address}: {code} {message}".rstrip()
        super().__init__(f"{text} ({hint})" if hint else text)
        self.address = address
        self.code = code
        self.message = message


def describe_file_error(error: OSError, place: object = None) -> str:
    """One line for a failed file operation: where (the error's file, else `place`; both
    ends of a link or a move, as which of them failed is the question), and why."""
    where = f"{error.filename or place}"
    if error.filename2:
        where = f"{where} -> {error.filename2}"
    return f"{where}: {(error.strerror or str(error)).lower()}"


def describe_connect_failure(error: BaseException) -> str:
    """The root reason in plain words, e.g. "connection refused", "name does not
    resolve", from an OSError or trio's "all attempts to connect failed"."""
    cause = error.__cause__
    if isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        return describe_connect_failure(cause.exceptions[0])
    if isinstance(error, socket.gaierror):
        known = _RESOLVE_FAILURES.get(error.errno)
        return known or (error.strerror or str(error)).lower()
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno).lower()
    return str(error)


@contextmanager
def single_errors() -> Iterator[None]:
    """Re-raise an exception group that holds one exception as that exception.

    trio's nurseries wrap everything in groups; callers of our context managers should
    see the ConnectError or AssertionError itself, not a group of one.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exception in group.exceptions:
        if isinstance(exception, BaseExceptionGroup):
            found.extend(_leaves(exception))
        else:
            found.append(exception)
    return found
