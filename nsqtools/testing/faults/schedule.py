"""Fault schedules: which faults strike when, drawn at random from a seed that replays
them exactly.

A Schedule is a list of Faults over a span of seconds. Each fault has a kind (what breaks:
nsqd killed, frozen, a slow or cut link, a destination down, a full disk, the tool itself
killed or signalled), a start time, a duration (how long the fault lasts before it is
mended), and for signals which one, whether it is doubled (as GNU `timeout` sends it:
to the child, then to its process group) and whether it comes early (within the first
100 ms of a fresh start of the tool). The same seed and kinds give the same schedule;
the harness prints the seed with every result, and NSQTOOLS_FAULT_SEED replays one.
"""

from __future__ import annotations

import enum
import os
import random
from dataclasses import dataclass

SEED_VARIABLE = "NSQTOOLS_FAULT_SEED"
LONGEST = 1.5  # seconds a fault lasts at most, by default


class FaultKind(enum.Enum):
    """What breaks. The value is the name the tables and the seeds' replays show."""

    NSQD_KILL = "nsqd SIGKILL + restart"  # the tool's source nsqd (to_nsq: destination)
    NSQD_FREEZE = "nsqd SIGSTOP + SIGCONT"
    SLOW_LINK = "slow link"  # the tap throttled to a few kB/s both ways
    LINK_CUT = "link cut"  # every connection through the tap reset
    DESTINATION_DOWN = "destination refuses"  # nsqd stopped / HTTP 503 / HTTP resets
    DESTINATION_KILL = "destination nsqd SIGKILL"  # a relay's destination nsqd
    DISK_FULL = "disk full"  # the output's filesystem filled, freed at the end
    TOOL_KILL = "tool SIGKILL + restart"
    TOOL_STOP = "tool SIGINT/SIGTERM + restart"

    @property
    def breaks_nsqd(self) -> bool:
        return self in (FaultKind.NSQD_KILL, FaultKind.NSQD_FREEZE)


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    at: float  # seconds from the start of the schedule
    duration: float  # seconds until it is mended (a restart, a thaw, the link fast again)
    signal: str = ""  # TOOL_STOP: "SIGINT" or "SIGTERM"
    doubled: bool = False  # TOOL_STOP: sent twice at once, as `timeout` does
    early: bool = False  # TOOL_STOP: to a fresh start of the tool, within 100 ms
    early_delay: float = 0.0  # TOOL_STOP early: seconds after that start

    @property
    def ends(self) -> float:
        return self.at + self.duration

    def describe(self) -> str:
        text = f"{self.at:5.2f}s {self.kind.value} for {self.duration:.2f}s"
        if self.kind is FaultKind.TOOL_STOP:
            text += f" ({self.signal}{' twice' if self.doubled else ''}"
            text += f", {self.early_delay * 1000:.0f} ms after a start)" if self.early else ")"
        return text


@dataclass(frozen=True)
class Schedule:
    seed: int
    span: float  # seconds during which messages go in and faults strike
    faults: tuple[Fault, ...]

    @classmethod
    def random(
        cls,
        seed: int,
        kinds: tuple[FaultKind, ...],
        span: float,
        count: int,
        longest: float = LONGEST,
    ) -> Schedule:
        """`count` faults of the given kinds, each lasting up to `longest` seconds, spread
        over the span so that two never overlap (each is mended before the next strikes:
        the harness can tell which one a loss or a slow recovery follows)."""
        rng = random.Random(seed)
        slot = span / count
        faults = []
        for index in range(count):
            kind = rng.choice(kinds)
            duration = rng.uniform(0.2, min(longest, slot * 0.6))
            at = index * slot + rng.uniform(0.1, slot - duration - 0.05)
            faults.append(_with_signal(Fault(kind, round(at, 3), round(duration, 3)), rng))
        return cls(seed, span, tuple(faults))

    def describe(self) -> str:
        lines = [f"seed {self.seed} (replay: {SEED_VARIABLE}={self.seed}), span {self.span}s"]
        return "\n".join([*lines, *(f"  {fault.describe()}" for fault in self.faults)])


def _with_signal(fault: Fault, rng: random.Random) -> Fault:
    if fault.kind is not FaultKind.TOOL_STOP:
        return fault
    early = rng.random() < 0.5
    return Fault(
        fault.kind,
        fault.at,
        fault.duration,
        signal=rng.choice(("SIGINT", "SIGTERM")),
        doubled=rng.random() < 0.5,
        early=early,
        early_delay=round(rng.uniform(0.0, 0.1), 3) if early else 0.0,
    )


def seed_to_use() -> int:
    """NSQTOOLS_FAULT_SEED when set (a replay), else a fresh one."""
    given = os.environ.get(SEED_VARIABLE)
    return int(given) if given else random.SystemRandom().randrange(2**31)
