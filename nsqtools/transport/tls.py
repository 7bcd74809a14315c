"""The client TLS context from settings: verification on unless asked, CA file,
client certificate and key, minimum version."""

from __future__ import annotations

import ssl

from nsqtools.errors import TlsError

# ssl.TLSVersion's names (read when a context is made: importing this module reads
# nothing from ssl, which loads OpenSSL; nsqtools.runtime.startup).
MIN_VERSIONS = {"tls1.0": "TLSv1", "tls1.1": "TLSv1_1", "tls1.2": "TLSv1_2", "tls1.3": "TLSv1_3"}


def client_context(
    root_ca_file: str = "",
    cert_file: str = "",
    key_file: str = "",
    insecure_skip_verify: bool = False,
    min_version: str = "",
) -> ssl.SSLContext:
    """Build the context, or raise TlsError saying which file or setting is wrong."""
    try:
        context = ssl.create_default_context(cafile=root_ca_file or None)
    except (OSError, ssl.SSLError) as error:
        raise TlsError(f"cannot load TLS root CA file {root_ca_file}: {_reason(error)}") from error
    if cert_file or key_file:
        try:
            context.load_cert_chain(cert_file, key_file or None)
        except (OSError, ssl.SSLError) as error:
            raise TlsError(
                f"cannot load TLS client certificate {cert_file} / key {key_file}: {_reason(error)}"
            ) from error
    if insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if min_version:
        if min_version not in MIN_VERSIONS:
            raise TlsError(f"unknown TLS minimum version {min_version!r}")
        minimum = ssl.TLSVersion[MIN_VERSIONS[min_version]]
        # OpenSSL's default security level refuses TLS < 1.2; honour an explicit request.
        if minimum < ssl.TLSVersion.TLSv1_2:
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
        context.minimum_version = minimum
    return context


def describe_tls_failure(error: BaseException) -> str:
    """One line saying why a handshake failed, from an SSLError somewhere in the chain."""
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {current.verify_message}"
        if isinstance(current, ssl.SSLError):
            return _reason(current)
        current = current.__cause__ or current.__context__
    return str(error) or type(error).__name__


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason).lower().replace("_", " ")
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)
