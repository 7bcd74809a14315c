"""Real NSQ for tests, demos and benchmarks.

This package owns starting and stopping real nsqd and nsqlookupd processes built by
scripts/install-nsq, the small AUTH service nsqd can be pointed at, and running the Go
reference utilities side by side with ours. Nothing here fakes NSQ.
"""

from nsqtools.testing.binaries import NsqNotInstalled, find_binary, run_go_tool
from nsqtools.testing.cluster import (
    Nsqd,
    Nsqlookupd,
    NsqProcess,
    NsqProcessError,
    TlsFiles,
    wait_until,
)

__all__ = [
    "NsqNotInstalled",
    "NsqProcess",
    "NsqProcessError",
    "Nsqd",
    "Nsqlookupd",
    "TlsFiles",
    "find_binary",
    "run_go_tool",
    "wait_until",
]
