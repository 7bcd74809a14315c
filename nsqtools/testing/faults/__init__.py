"""The fault harness: every tool, ours and Go's, run under random schedules of faults
while numbered messages go in, and held to one invariant: every message published is
delivered at least once or kept and named, nothing is FIN'd unwritten, and the exit
status tells the truth.

- schedule.py: the faults and their seeded random schedules (the seed replays one);
- tap.py: NSQ's protocol read off a proxy between a tool and nsqd: what was delivered,
  FIN'd, and held in nsqd's memory when it was killed;
- runs.py: the tool started again and again, signalled, killed, each run's exit;
- harness.py: the World (a durable nsqd behind the tap), the Target interface, and the
  Harness that follows a schedule and counts;
- targets.py (consuming tools) and targets_pub.py (to_nsq, `nsq pub --count`): each
  tool as the harness drives it;
- catalog.py: every target by name (the tests' and bench/faults.py's list);
- tally.py: what a run found, and the invariant.

    schedule = Schedule.random(seed, target.kinds, span=8.0, count=4)
    Harness(TailTarget(), schedule, tmp_path).run().check()
"""

from nsqtools.testing.faults.catalog import TARGETS
from nsqtools.testing.faults.harness import Harness, Target, World
from nsqtools.testing.faults.schedule import Fault, FaultKind, Schedule, seed_to_use
from nsqtools.testing.faults.tally import Tally
from nsqtools.testing.faults.targets import (
    RelayHttpTarget,
    RelayNsqTarget,
    TailTarget,
    ToFileTarget,
)

__all__ = [
    "TARGETS",
    "Fault",
    "FaultKind",
    "Harness",
    "RelayHttpTarget",
    "RelayNsqTarget",
    "Schedule",
    "TailTarget",
    "Tally",
    "Target",
    "ToFileTarget",
    "World",
    "seed_to_use",
]
