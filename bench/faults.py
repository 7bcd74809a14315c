"""The fault harness by hand: long schedules, and the table of tool x fault beside Go's.

Two modes, both printing each run's full report (seed included: NSQTOOLS_FAULT_SEED
replays one) to stderr:

- table (the default): for each tool and each fault kind that applies to it, a schedule
  of that kind only (--faults of them over --seconds), for ours and for Go's tool where
  Go has one, --rounds times; then a Markdown row, each cell "ours / Go's" where the two
  differ (one figure where they agree or Go has no tool): published, delivered, duplicates,
  kept (dead letters, failed records), lost by nsqd (a SIGKILLed nsqd's own: what it held
  in memory), lost (ours: must be 0), and the median time to the first progress after a
  fault ended.
- --mixed: each tool under one long random schedule of all its kinds (the suite's short
  ones, made long); fails (exit 1) if the invariant breaks for ours.

    .venv/bin/python bench/faults.py --tools nsq_tail,nsq_to_nsq --rounds 2
    .venv/bin/python bench/faults.py --mixed --seconds 120 --faults 30 --messages 5000
    .venv/bin/python bench/faults.py --tools nsq_to_nsq --kinds destination_down \\
        --seconds 90 --faults 1 --longest 60      # a destination down for a minute
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nsqtools.testing.faults import TARGETS, FaultKind, Harness, Schedule, Tally, seed_to_use


@dataclass
class Row:
    """One tool x fault kind x implementation, summed over its rounds."""

    published: int = 0
    delivered: int = 0
    duplicates: int = 0
    kept: int = 0
    lost_by_nsqd: int = 0
    lost: int = 0
    recoveries: list[float] = field(default_factory=list)
    stalled: int = 0  # faults after which no progress came at all

    def add(self, tally: Tally) -> None:
        self.published += len(tally.published)
        self.delivered += len(tally.published & tally.output.keys())
        self.duplicates += tally.duplicates
        self.kept += len(tally.kept)
        self.lost_by_nsqd += len(tally.lost_by_nsqd)
        self.lost += len(tally.lost)
        for _fault, seconds in tally.recoveries:
            if seconds is None:
                self.stalled += 1
            else:
                self.recoveries.append(seconds)

    def cells(self) -> list[str]:
        recovery = f"{statistics.median(self.recoveries):.2f}s" if self.recoveries else "-"
        if self.stalled:
            recovery += f" ({self.stalled} none)"
        return [
            str(self.published),
            str(self.delivered),
            str(self.duplicates),
            str(self.kept),
            str(self.lost_by_nsqd),
            f"**{self.lost}**" if self.lost else "0",
            recovery,
        ]


def run_one(name: str, implementation: str, schedule: Schedule, messages: int, root: Path) -> Tally:
    target = TARGETS[name](messages)
    directory = Path(tempfile.mkdtemp(prefix="faults-", dir=root))
    tally = Harness(target, schedule, directory, implementation).run()
    print(tally.report(), file=sys.stderr, flush=True)
    return tally


def table(args: argparse.Namespace, names: Iterable[str], root: Path) -> None:
    print(
        "| tool | fault | published | delivered | duplicates | kept | lost by nsqd | lost "
        "| recovery (median) |"
    )
    print("|" + " --- |" * 9)
    for name in names:
        probe = TARGETS[name](1)
        for kind in _kinds(args, probe.kinds):
            rows = {"ours": Row(), "go": Row()} if probe.go_program else {"ours": Row()}
            for _round in range(args.rounds):
                schedule = Schedule.random(
                    seed_to_use(), (kind,), args.seconds, args.faults, args.longest
                )
                for implementation, row in rows.items():
                    row.add(run_one(name, implementation, schedule, args.messages, root))
            cells = [name, kind.value, *side_by_side([row.cells() for row in rows.values()])]
            print("| " + " | ".join(cells) + " |", flush=True)


def side_by_side(implementations: list[list[str]]) -> list[str]:
    """One cell per column, "ours / go" where Go has a tool and the two differ."""
    return [" / ".join(dict.fromkeys(column)) for column in zip(*implementations, strict=True)]


def mixed(args: argparse.Namespace, names: Iterable[str], root: Path) -> int:
    failures = 0
    for name in names:
        kinds = _kinds(args, TARGETS[name](1).kinds)
        schedule = Schedule.random(seed_to_use(), kinds, args.seconds, args.faults, args.longest)
        tally = run_one(name, "ours", schedule, args.messages, root)
        try:
            tally.check()
            print(f"{name}: invariant holds (seed {schedule.seed})")
        except AssertionError:
            failures += 1
            print(f"{name}: INVARIANT BROKEN (seed {schedule.seed}): see stderr")
    return 1 if failures else 0


def _kinds(args: argparse.Namespace, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind, ...]:
    if not args.kinds:
        return kinds
    wanted = {FaultKind[name.strip().upper()] for name in args.kinds.split(",")}
    return tuple(kind for kind in kinds if kind in wanted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", default="", help="comma-separated names (default: all)")
    parser.add_argument("--kinds", default="", help="comma-separated, e.g. nsqd_kill,tool_stop")
    parser.add_argument("--seconds", type=float, default=12.0, help="a schedule's span")
    parser.add_argument("--faults", type=int, default=3, help="faults in a schedule")
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--longest", type=float, default=1.5, help="a fault's most seconds")
    parser.add_argument("--rounds", type=int, default=1, help="schedules per table row")
    parser.add_argument("--mixed", action="store_true", help="one long mixed schedule per tool")
    args = parser.parse_args()
    names = [name.strip() for name in args.tools.split(",")] if args.tools else list(TARGETS)
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        parser.error(f"unknown tools {unknown}; known: {', '.join(TARGETS)}")
    with tempfile.TemporaryDirectory(prefix="nsqtools-faults-") as root:
        if args.mixed:
            sys.exit(mixed(args, names, Path(root)))
        table(args, names, Path(root))


if __name__ == "__main__":
    main()
