"""The httpx clients nsqtools makes (its programs' and the test harness's), all sharing
one TLS context per process.

httpx makes a new TLS context for every client, loading every CA certificate again:
about 50 ms of CPU each here, paid at every start of a program that asks a lookupd and
at every client a loop makes (a poll, a plan, a test waiting on nsqd's /stats). The
clients made here verify certificates as httpx's own do, with one context made at the
first client and shared by all (a context serves any number of connections and threads).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def _verifying_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def async_client(**options: Any) -> httpx.AsyncClient:
    """An httpx.AsyncClient with these options, on the shared TLS context."""
    return httpx.AsyncClient(verify=_verifying_context(), **options)


def sync_client(**options: Any) -> httpx.Client:
    """An httpx.Client with these options, on the shared TLS context."""
    return httpx.Client(verify=_verifying_context(), **options)
