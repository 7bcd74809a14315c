"""Real NSQ for tests, demos and benchmarks.

This package owns starting, stopping, killing and freezing real nsqd and nsqlookupd
processes built by scripts/install-nsq, the small AUTH service nsqd can be pointed at,
running the Go reference utilities side by side with ours (run from this copy of the
package), the faults every tool's tests reuse (a throttled, silent or cut link:
proxy.py; a lookupd answering junk: junklookupd.py; a second filesystem, real or
pretended, a full or a read-only one, a file size limit: filesystems.py), work
bounds without timers (bytes allocated per step: work.py), and a Spark standalone
cluster on loopback whose workers can each have a private output dir
(spark_cluster.py, imported by name: it needs the spark extra and Java), a Spark
Connect server (spark_connect.py, likewise), an S3 server on loopback with the Spark
confs that reach it (s3.py, imported by name), and the services one test run's
processes share (shared_services.py: the cluster, the Connect server).
Nothing here fakes upstream nsqd. The one stand-in is youzan/: a scripted server of the
Youzan fork, which cannot be built here, following ../shared/spec/youzan.md.
"""

from nsqtools.testing.binaries import (
    NsqNotInstalled,
    RunningTool,
    find_binary,
    imported_modules,
    imported_packages,
    our_tool,
    run_go_tool,
    running,
)
from nsqtools.testing.cluster import (
    Nsqd,
    Nsqlookupd,
    NsqProcess,
    NsqProcessError,
    TlsFiles,
    holds_throughout,
    not_in_nsqd,
    wait_until,
)
from nsqtools.testing.filesystems import (
    file_size_limit,
    links_cross_filesystems,
    other_filesystem,
    remount,
    small_filesystem,
)
from nsqtools.testing.junklookupd import JUNK_LOOKUPS, JunkLookupd
from nsqtools.testing.proxy import LinkProxy
from nsqtools.testing.work import AllocationMeter

__all__ = [
    "JUNK_LOOKUPS",
    "AllocationMeter",
    "JunkLookupd",
    "LinkProxy",
    "NsqNotInstalled",
    "NsqProcess",
    "NsqProcessError",
    "Nsqd",
    "Nsqlookupd",
    "RunningTool",
    "TlsFiles",
    "file_size_limit",
    "find_binary",
    "holds_throughout",
    "imported_modules",
    "imported_packages",
    "links_cross_filesystems",
    "not_in_nsqd",
    "other_filesystem",
    "our_tool",
    "remount",
    "run_go_tool",
    "running",
    "small_filesystem",
    "wait_until",
]
