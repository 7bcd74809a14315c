"""The benchmark behind `nsq bench`: throughput and end-to-end latency of an nsqd.

Publishers (our Producer) and consumers (our Consumer) run in worker processes, so
that Python uses every core; each message carries its publication time and the
consumers record how long it took to reach them. No click and no rich here: the
command (nsqtools.commands.bench) shows the progress and the results.

- settings.py: what a run is asked to do (BenchSettings, Mode) and each worker's share;
- stamps.py, latency.py: stamped bodies and a bounded-memory latency histogram (sans-IO);
- worker.py: a worker process (`python -m nsqtools.benchmark.worker`);
- run.py: a run (BenchRun): nsqd checked, workers started together and followed, the
  topic made for the run deleted after;
- results.py: the workers' reports and the run's figures (BenchResults), for JSON and CSV;
- lines.py: JSON lines between the run and its workers.
"""

from nsqtools.benchmark.results import BenchResults, Throughput
from nsqtools.benchmark.run import BenchError, BenchRun, LiveCounts
from nsqtools.benchmark.settings import BenchSettings, Mode

__all__ = [
    "BenchError",
    "BenchResults",
    "BenchRun",
    "BenchSettings",
    "LiveCounts",
    "Mode",
    "Throughput",
]
