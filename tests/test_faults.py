"""Every tool under a short random schedule of faults, held to one invariant
(nsqtools.testing.faults): every message published is delivered at least once or kept
and named, nothing is FIN'd unwritten, nothing comes out that was never put in, and every
run's exit status tells the truth.

Each test prints its seed and its schedule; `NSQTOOLS_FAULT_SEED=<seed> pytest
tests/test_faults.py -k <tool>` replays a failure exactly. Longer schedules, and Go's tools
under the same ones, run by hand: bench/faults.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqtools.testing.faults import TARGETS, FaultKind, Harness, Schedule, seed_to_use
from nsqtools.testing.faults.catalog import RATE
from nsqtools.testing.faults.targets_pub import PubCountTarget
from nsqtools.testing.faults.targets_spark import ReplayTarget, StreamSinkTarget, StreamSourceTarget

# Random fault schedules, tens of seconds each (scripts/test --all runs them).
pytestmark = pytest.mark.slow

SPAN = 8.0  # seconds of faults
FAULTS = 4
MESSAGES = 400
# A Spark application takes seconds to start and a few per micro-batch: fewer faults,
# further apart.
SPARK_SPAN = 20.0
SPARK_FAULTS = 2
SPARK = (StreamSourceTarget.name, StreamSinkTarget.name, ReplayTarget.name)


@pytest.mark.parametrize("name", TARGETS)
def test_nothing_is_lost_under_a_short_random_schedule(name: str, tmp_path: Path) -> None:
    target = TARGETS[name](MESSAGES)
    span, faults = (SPARK_SPAN, SPARK_FAULTS) if name in SPARK else (SPAN, FAULTS)
    schedule = Schedule.random(seed_to_use(), target.kinds, span, faults)
    print(schedule.describe())
    tally = Harness(target, schedule, tmp_path).run()
    print(tally.report())
    tally.check()


@pytest.mark.parametrize("name", ["nsq_to_file gzip", f"to_nsq --rate={RATE}", PubCountTarget.name])
def test_stop_signals_at_any_moment_lose_nothing(name: str, tmp_path: Path) -> None:
    """Only stop signals: SIGINT and SIGTERM, doubled as `timeout` sends them, and within
    the first 100 ms of a start (the random schedule gives each kind its turn at most)."""
    target = TARGETS[name](MESSAGES)
    schedule = Schedule.random(seed_to_use(), (FaultKind.TOOL_STOP,), SPAN, 6)
    print(schedule.describe())
    tally = Harness(target, schedule, tmp_path).run()
    print(tally.report())
    tally.check()
