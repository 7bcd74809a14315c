"""Issue 8's slow-link measure: `to_nsq < file` of N lines (99 bytes + newline) through a
loopback proxy that throttles client -> nsqd, ours and Go's side by side on one nsqd,
each through its own proxy at the same rate, at the same time.

Prints, for each: the exit status, the wall time, the records in nsqd, and the last
line of stderr. Before issue 8, ours failed every record after ~2.4 s at 300 KB/s.

    .venv/bin/python bench/pub_slow_link.py [--messages N] [--rate BYTES_PER_S]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nsqtools.testing import LinkProxy, Nsqd, find_binary

OURS = str(Path(sys.executable).parent / "to_nsq")


def publish(tool: str, target: str, rate: float, topic: str, lines: Path) -> str:
    with LinkProxy(target, upstream_rate=rate) as proxy, lines.open("rb") as stdin:
        argv = [tool, f"--nsqd-tcp-address={proxy.address}", f"--topic={topic}"]
        started = time.perf_counter()
        result = subprocess.run(argv, stdin=stdin, capture_output=True, check=False)
        elapsed = time.perf_counter() - started
    last_line = (result.stderr.decode().strip().splitlines() or [""])[-1]
    return f"exit {result.returncode} after {elapsed:.1f}s; stderr: {last_line[:160]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rate", type=float, default=300_000, help="bytes per second")
    args = parser.parse_args()
    tools = {"ours": OURS, "go": str(find_binary("to_nsq"))}
    with tempfile.TemporaryDirectory() as scratch:
        lines = Path(scratch) / "lines"
        lines.write_bytes(b"".join(b"%099d\n" % index for index in range(args.messages)))
        with Nsqd(Path(scratch) / "nsqd") as nsqd, ThreadPoolExecutor() as pool:
            runs = {
                name: pool.submit(publish, tool, nsqd.tcp_address, args.rate, name, lines)
                for name, tool in tools.items()
            }
            for name, run in runs.items():
                report = run.result()
                print(f"{name:5} {report}; in nsqd: {nsqd.topic_depth(name):,}")


if __name__ == "__main__":
    main()
