"""Dialing nsqd and running a session's set-up sequence over the stream.

protocol.session decides the order (IDENTIFY, TLS, compression, AUTH) and reads the
answers; this is its I/O half: it sends what the session has to send, reads, does
the TLS handshake and puts the snappy or deflate layer on the stream when told, and
names the session's set-up failures in the terms callers handle (nsqtools.errors).
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

from nsqtools.addresses import split_address
from nsqtools.config import ClientConfig
from nsqtools.durations import format_duration
from nsqtools.errors import AuthError, ConnectError, NsqError, NsqErrorResponse, TlsError
from nsqtools.protocol import ErrorFrame, IdentifyRequest, Session, SetupStep, youzan
from nsqtools.protocol.errors import (
    AuthDeniedError,
    AuthSecretMissingError,
    ErrorFrameError,
    NotNsqError,
    SetupError,
    TlsNotOfferedError,
)
from nsqtools.transport.compression import DeflateStream, SnappyStream
from nsqtools.transport.dial import dial
from nsqtools.transport.tls import client_context, describe_tls_failure

# What one read asks of the stream, here and in the connection's reader task.
RECEIVE_SIZE = 256 * 1024

# The session's set-up failures as the errors callers handle.
_SETUP_FAILURES: dict[type[SetupError], type[NsqError]] = {
    NotNsqError: ConnectError,
    TlsNotOfferedError: TlsError,
    AuthSecretMissingError: AuthError,
    AuthDeniedError: AuthError,
}


def identify_request(config: ClientConfig, extend_support: bool = False) -> IdentifyRequest:
    return IdentifyRequest(
        client_id=config.client_id,
        hostname=config.hostname,
        user_agent=config.user_agent,
        heartbeat_interval=config.heartbeat_interval,
        output_buffer_size=config.output_buffer_size,
        output_buffer_timeout=config.output_buffer_timeout,
        tls_v1=config.tls_v1,
        snappy=config.snappy,
        deflate=config.deflate,
        deflate_level=config.deflate_level,
        sample_rate=config.sample_rate,
        msg_timeout=config.msg_timeout,
        topology_region=config.topology_region,
        topology_zone=config.topology_zone,
        extend_support=extend_support,
        desired_tag=config.desired_tag,
    )


def refusal_error(address: str, frame: ErrorFrame) -> NsqErrorResponse:
    """An error frame from nsqd as the error a request gets."""
    return NsqErrorResponse(address, frame.code, frame.message, youzan.explain(frame.code))


async def negotiate(session: Session[Any], config: ClientConfig) -> trio.abc.Stream:
    """Dial session.address and run the set-up sequence within read_timeout; return
    the stream to use from then on (with the TLS and compression layers negotiated)."""
    address = session.address
    stream = await dial(address, config.dial_timeout, config.local_addr)
    try:
        with trio.fail_after(config.read_timeout):
            return await _set_up(stream, session, config)
    except trio.TooSlowError:
        await trio.aclose_forcefully(stream)
        raise ConnectError(
            f"{address} did not complete the connection set-up within "
            f"{format_duration(config.read_timeout)} (read_timeout)"
        ) from None
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise


async def _set_up(
    stream: trio.abc.Stream, session: Session[Any], config: ClientConfig
) -> trio.abc.Stream:
    try:
        while True:
            step = session.next_step()
            if outgoing := session.data_to_send():
                await stream.send_all(outgoing)
            if step is SetupStep.READY:
                return stream
            stream = await _take_step(stream, step, session, config)
    except ErrorFrameError as error:
        raise refusal_error(session.address, error.frame) from None
    except SetupError as error:
        raise _SETUP_FAILURES[type(error)](str(error)) from None


async def _take_step(
    stream: trio.abc.Stream, step: SetupStep, session: Session[Any], config: ClientConfig
) -> trio.abc.Stream:
    """Do what the session asked; return the stream, with any layer it started."""
    if step is SetupStep.NEED_DATA:
        session.receive_data(await _receive(stream, session))
        return stream
    if step is SetupStep.START_TLS:
        return await _start_tls(stream, session.address, config)
    if step is SetupStep.START_SNAPPY:
        return SnappyStream(stream, initial=session.take_unconsumed())
    level = session.identify.deflate_level
    return DeflateStream(stream, level, initial=session.take_unconsumed())


async def _start_tls(
    stream: trio.abc.Stream, address: str, config: ClientConfig
) -> trio.SSLStream[trio.abc.Stream]:
    context = client_context(
        config.tls_root_ca_file,
        config.tls_cert,
        config.tls_key,
        config.tls_insecure_skip_verify,
        config.tls_min_version,
    )
    host, _ = split_address(address)
    tls_stream = trio.SSLStream(stream, context, server_hostname=host)
    try:
        await tls_stream.do_handshake()
    except (trio.BrokenResourceError, ssl.SSLError) as error:
        raise TlsError(
            f"TLS handshake with {address} failed: {describe_tls_failure(error)}"
        ) from error
    return tls_stream


async def _receive(stream: trio.abc.Stream, session: Session[Any]) -> bytes:
    """The next bytes of the set-up; the connection ending here is a ConnectError."""
    step = session.phase.value
    try:
        data = await stream.receive_some(RECEIVE_SIZE)
    except trio.BrokenResourceError as error:
        raise ConnectError(f"{session.address} broke the connection during {step}") from error
    if not data:
        raise ConnectError(f"{session.address} closed the connection during {step}")
    return bytes(data)
