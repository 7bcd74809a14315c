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
from nsqtools.testing.faults.targets_pub import PubCountTarget, PublishTarget
from nsqtools.testing.faults.targets_spark import ReplayTarget, StreamSinkTarget, StreamSourceTarget

# to_nsq --rate: slower than the records come, so that records wait in the limiter.
RATE = 40
# A max_attempts that an endpoint down for a second exhausts: messages are given up.
MAX_ATTEMPTS = 2

TARGETS: dict[str, Callable[[int], Target]] = {
    "nsq_tail": TailTarget,
    "nsq_to_file plain": lambda messages: ToFileTarget("plain", messages),
    "nsq_to_file gzip": lambda messages: ToFileTarget("gzip", messages),
    "nsq_to_file work dir": lambda messages: ToFileTarget("work dir", messages),
    "nsq_to_file --exit-at-end": lambda messages: ToFileTarget("--exit-at-end", messages),
    "nsq_to_nsq": RelayNsqTarget,
    "nsq_to_http": RelayHttpTarget,
    f"nsq_to_http max_attempts={MAX_ATTEMPTS}": lambda messages: RelayHttpTarget(
        messages, MAX_ATTEMPTS
    ),
    "to_nsq": PublishTarget,
    f"to_nsq --rate={RATE}": lambda messages: PublishTarget(messages, rate=RATE),
    PubCountTarget.name: PubCountTarget,
    StreamSourceTarget.name: StreamSourceTarget,
    StreamSinkTarget.name: StreamSinkTarget,
    ReplayTarget.name: ReplayTarget,
}
