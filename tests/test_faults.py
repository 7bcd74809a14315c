"""Every tool under a short random schedule of faults, held to one invariant
(nsqtools.testing.faults): every message published is delivered at least once or kept
and named, nothing is FIN'd unwritten, nothing comes out that went not in, and every
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

SPAN = 8.0  # seconds of faults
FAULTS = 4
MESSAGES = 400


@pytest.mark.parametrize("name", TARGETS)
def test_nothing_is_lost_under_a_short_random_schedule(name: str, tmp_path: Path) -> None:
    target = TARGETS[name](MESSAGES)
    schedule = Schedule.random(seed_to_use(), target.kinds, SPAN, FAULTS)
    print(schedule.describe())
    tally = Harness(target, schedule, tmp_path).run()
    print(tally.report())
    tally.check()


@pytest.mark.parametrize("name", ["nsq_to_file gzip", f"to_nsq --rate={RATE}"])
def test_stop_signals_at_any_moment_lose_nothing(name: str, tmp_path: Path) -> None:
    """Only stop signals: SIGINT and SIGTERM, doubled as `timeout` sends them, and within
    the first 100 ms of a start (the random schedule gives each kind its turn at most)."""
    target = TARGETS[name](MESSAGES)
    schedule = Schedule.random(seed_to_use(), (FaultKind.TOOL_STOP,), SPAN, 6)
    print(schedule.describe())
    tally = Harness(target, schedule, tmp_path).run()
    print(tally.report())
    tally.check()
