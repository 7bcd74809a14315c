"""The HTTP data path alone: requests/s of N concurrent senders POSTing 100-byte bodies
to a local nginx, our ConnectionPool against Go's net/http client set up as
nsq_to_http sets it up (bench/http_pool_go, built here with `go build`).

Starts nginx (`apt-get install -y nginx-light`; one worker, no access log, keep-alive
without a request limit, `return 200`) on a free port in a temp dir; in each run sends
M requests with ours and with Go's, which goes first alternating; prints every run,
the medians and the ratio ours/Go. No NSQ here: bench the nsq_to_http command for that.

    .venv/bin/python bench/http_pool.py [--requests M] [--senders N] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio
from harness import running_nginx

from nsqtools.httpclient.pool import ConnectionPool
from nsqtools.httpclient.requests import PostTarget

BODY = b"x" * 100
GO_SOURCE = Path(__file__).parent / "http_pool_go"


async def send_ours(url: str, requests: int, senders: int) -> None:
    target = PostTarget(url)
    left = requests

    async def sender(pool: ConnectionPool) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            if (await pool.send(target.request(BODY))).status != 200:
                raise RuntimeError("not 200")

    async with ConnectionPool() as pool, trio.open_nursery() as tasks:
        for _ in range(senders):
            tasks.start_soon(sender, pool)


def timed(run: Callable[[], None], requests: int) -> float:
    start = time.perf_counter()
    run()
    return requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--senders", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        go_bench = root / "go_bench"
        subprocess.run(
            ["go", "build", "-o", str(go_bench), "."],
            cwd=GO_SOURCE,
            check=True,
            env={**os.environ, "GOCACHE": str(root / "gocache"), "GOFLAGS": "-mod=mod"},
        )
        with running_nginx(root) as url:
            report(url, go_bench, options.requests, options.senders, options.runs)


def report(url: str, go_bench: Path, requests: int, senders: int, runs: int) -> None:
    def ours() -> None:
        trio.run(send_ours, url, requests, senders)

    def go() -> None:
        command = [str(go_bench), f"-url={url}", f"-n={senders}", f"-requests={requests}"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)

    rates: dict[str, list[float]] = {"ours": [], "go": []}
    for run in range(runs):
        order = [("ours", ours), ("go", go)] if run % 2 == 0 else [("go", go), ("ours", ours)]
        for name, action in order:
            rates[name].append(timed(action, requests))
            print(f"run {run + 1} {name:4}: {rates[name][-1]:9.0f} req/s", flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"median ours {medians['ours']:.0f} req/s, go {medians['go']:.0f} req/s, "
        f"ours/go {medians['ours'] / medians['go']:.2f}x"
    )


if __name__ == "__main__":
    main()
