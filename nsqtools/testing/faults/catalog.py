"""Every target the fault harness knows, by the name tables and tests use: the tests'
short schedules and bench/faults.py's long ones draw on the same list."""

from __future__ import annotations

from collections.abc import Callable

from nsqtools.testing.faults.harness import Target
from nsqtools.testing.faults.targets import (
    RelayHttpTarget,
    RelayNsqTarget,
    TailTarget,
    ToFileTarget,
)
from nsqtools.testing.faults.targets_pub import PublishTarget
from nsqtools.testing.faults.targets_spark import ReplayTarget, StreamSinkTarget, StreamSourceTarget

# to_nsq --rate: slower than the records come, so that records wait in the limiter.
RATE = 40

TARGETS: dict[str, Callable[[int], Target]] = {
    "nsq_tail": TailTarget,
    "nsq_to_file plain": lambda messages: ToFileTarget("plain", messages),
    "nsq_to_file gzip": lambda messages: ToFileTarget("gzip", messages),
    "nsq_to_file work dir": lambda messages: ToFileTarget("work dir", messages),
    "nsq_to_nsq": RelayNsqTarget,
    "nsq_to_http": RelayHttpTarget,
    "to_nsq": PublishTarget,
    f"to_nsq --rate={RATE}": lambda messages: PublishTarget(messages, rate=RATE),
    StreamSourceTarget.name: StreamSourceTarget,
    StreamSinkTarget.name: StreamSinkTarget,
    ReplayTarget.name: ReplayTarget,
}
