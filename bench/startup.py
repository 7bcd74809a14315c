"""Issue 27's start-up measure: the wall time of `nsq topics` (one nsqd with a few topics
behind one nsqlookupd: the time is start-up, not the cluster) and of a completion
request (what a Tab runs: `nsq` with click's _NSQ_COMPLETE set), start to exit, on
nsqtools byte-compiled as an installed copy is; several runs of each, the median. The
target is under 150 ms for both.

Each line also gives the median CPU time (user and system) of the process, which a
busy machine inflates less than the wall time. Beside them, for where the time goes:
the interpreter alone (`python -c pass`), `nsq --version` (the entry point, nothing
else), a Tab offering topic names (one more request, to the lookupd), and `nsq topics
--help` (the command imported, no request).

    .venv/bin/python bench/startup.py [--runs 11]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from harness import compile_package

from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi import send_sync
from nsqtools.testing import Nsqd, Nsqlookupd, our_tool, wait_until

TARGET_SECONDS = 0.150
TOPICS = ("events", "orders", "clicks")
TARGETED = ("nsq topics", "Tab: nsq tail --to")


def timed(argv: list[str], environment: dict[str, str], expected: str) -> tuple[float, float]:
    """Wall seconds from start to exit, and the CPU seconds the process used (user and
    system: on a busy machine the wall time grows with the wait for a core, the CPU
    time hardly); the output must hold `expected`."""
    used_before = _children_cpu()
    started = time.perf_counter()
    result = subprocess.run(argv, env=environment, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0 or expected not in result.stdout:
        raise SystemExit(f"{argv[-1]!r} failed ({result.returncode}): {result.stderr.strip()}")
    return elapsed, _children_cpu() - used_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def completing(words: str, lookupd: str) -> dict[str, str]:
    """The environment of the completion request bash makes on a Tab after `words`."""
    return {
        "_NSQ_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        "NSQ_LOOKUPD_HTTP_ADDRESS": lookupd,
    }


def cases(lookupd: str) -> dict[str, tuple[list[str], dict[str, str], str]]:
    """Name → (command line, environment added, what its output must hold)."""
    nsq = our_tool("nsq")
    address = f"--lookupd-http-address={lookupd}"
    return {
        "python -c pass": ([sys.executable, "-c", "pass"], {}, ""),
        "nsq --version": ([*nsq, "--version"], {}, "nsq v"),
        "nsq topics --help": ([*nsq, "topics", "--help"], {}, "Usage"),
        "nsq topics": ([*nsq, "topics", address], {}, "events"),
        "Tab: nsq tail --to": (nsq, completing("nsq tail --to", lookupd), "--topic"),
        "Tab: nsq tail --topic": (nsq, completing("nsq tail --topic ", lookupd), "events"),
    }


def measure(lookupd: Nsqlookupd, runs: int) -> dict[str, float]:
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    medians = {}
    for name, (argv, added, expected) in cases(lookupd.http_address).items():
        timed(argv, environment | added, expected)  # warm the page cache
        measured = [timed(argv, environment | added, expected) for _ in range(runs)]
        walls, cpus = [wall for wall, _ in measured], [cpu for _, cpu in measured]
        medians[name] = statistics.median(walls)
        listed = " ".join(f"{seconds * 1000:.0f}" for seconds in walls)
        print(
            f"{name:<24} runs (ms): {listed}  median {medians[name] * 1000:.0f} ms "
            f"(CPU {statistics.median(cpus) * 1000:.0f} ms)"
        )
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as folder:
        root = Path(folder)
        lookupd = Nsqlookupd(root / "lookupd", "nsqlookupd")
        lookupd.start()
        nsqd = Nsqd(root / "nsqd", "nsqd", lookupds=[lookupd])
        try:
            nsqd.start()
            with httpx.Client(timeout=30) as client:
                for topic in TOPICS:
                    send_sync(client, nsqd_api.create_topic(nsqd.http_address, topic))
                listed = f"http://{lookupd.http_address}/topics"

                def registered() -> bool:
                    return len(client.get(listed).json()["topics"]) == len(TOPICS)

                wait_until(registered, 30, "the topics registered with the lookupd")
            medians = measure(lookupd, args.runs)
        finally:
            nsqd.stop()
            lookupd.stop()
    for name in TARGETED:
        verdict = "under" if medians[name] < TARGET_SECONDS else "OVER"
        print(f"{name}: median {medians[name] * 1000:.0f} ms, {verdict} the 150 ms target")


if __name__ == "__main__":
    main()
