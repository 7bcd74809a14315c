"""A worker process of a benchmark run: one role's connections, publishers or consumers.

Started by run.py as `python -m nsqtools.benchmark.worker`, it speaks JSON lines. On
stdin: its WorkerJob, then {"go": true}, and maybe {"stop": true} (the end of stdin
means stop too: the run is gone). On stdout: {"ready": true} once connected, then
{"progress": messages} every PROGRESS_INTERVAL, and at the end {"report": ...} (a
WorkerReport) or {"error": one line}.

Publishers stand on the Producer's streaming path: each connection puts whole batches,
stamped at once, and the Producer sends each batch as one MPUB (its body limit is set
to a batch) with up to `in_flight` of them awaiting nsqd's answer. Consumers stand on
the Consumer: every batch read is recorded (latency, bytes) and FIN'd at once.

SIGINT is ignored: the terminal sends it to the whole process group, and the run
decides when its workers stop.
"""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from itertools import repeat

import trio

from nsqtools import __version__
from nsqtools.benchmark.latency import LatencyHistogram
from nsqtools.benchmark.lines import JsonLines, LineError
from nsqtools.benchmark.results import WorkerReport
from nsqtools.benchmark.settings import Role, WorkerJob
from nsqtools.benchmark.stamps import padding, record_latencies, stamped
from nsqtools.config import ClientConfig, ConfigError
from nsqtools.consumer import Budget, Consumer, ConsumerOptions, open_consumer
from nsqtools.errors import NsqError, single_errors
from nsqtools.flow import TokenBucket
from nsqtools.producer import Producer, open_producer
from nsqtools.protocol import ProtocolError, commands
from nsqtools.runtime.startup import GC_THRESHOLDS

PROGRESS_INTERVAL = 0.1
USER_AGENT = f"nsq_bench/{__version__} nsqtools/{__version__}"


def client_config(job: WorkerJob, **fixed: int) -> ClientConfig:
    """The go-nsq options the job gives, then those the benchmark fixes."""
    config = ClientConfig(user_agent=USER_AGENT)
    config.apply_options(job.client_options, fixed)
    return config


class Publishers:
    """A worker's publishing connections, each a Producer of its own."""

    def __init__(self, job: WorkerJob) -> None:
        self.job = job
        self.started_ns = self.ended_ns = 0
        self._stopping = False
        self._producers: list[Producer] = []

    async def connect(self, stack: AsyncExitStack) -> None:
        """Open the Producers (each dials nsqd with its first batch)."""
        job = self.job
        batch_body = commands.mpub_body_size([job.size] * job.batch_size)
        for _ in range(job.connections):
            producing = open_producer(
                job.nsqd_tcp_address,
                client_config(job),
                max_body_size=batch_body,
                max_unacknowledged=job.batch_size * job.in_flight,
            )
            self._producers.append(await stack.enter_async_context(producing))

    @property
    def progress(self) -> int:
        return sum(producer.acknowledged for producer in self._producers)

    def stop(self) -> None:
        self._stopping = True

    async def run(self) -> None:
        """Publish until each connection's count is done, or the duration is over, or
        stop(); then wait for nsqd's last answer."""
        job = self.job
        deadline = None if job.duration is None else trio.current_time() + job.duration
        counts: Iterable[int | None] = repeat(None) if job.counts is None else job.counts
        self.started_ns = time.time_ns()
        async with trio.open_nursery() as nursery:
            for producer, count in zip(self._producers, counts, strict=False):
                nursery.start_soon(self._publish, producer, count, deadline)
        self.ended_ns = time.time_ns()
        self._check_failures()

    async def _publish(self, producer: Producer, count: int | None, deadline: float | None) -> None:
        job = self.job
        filler = padding(job.size)
        rate = job.rate_per_connection
        bucket = TokenBucket(rate, trio.current_time()) if rate else None
        left = count
        while not self._stopping and (deadline is None or trio.current_time() < deadline):
            wanted = job.batch_size if left is None else min(job.batch_size, left)
            if wanted <= 0:
                break
            if bucket is not None:
                wanted = await _granted(bucket, wanted)
            body = stamped(time.time_ns(), filler)
            await producer.put_many(job.topic, [body] * wanted)
            if left is not None:
                left -= wanted
        await producer.flush()

    def _check_failures(self) -> None:
        failed = sum(producer.failed for producer in self._producers)
        if failed:
            reasons = [r for producer in self._producers for r in producer.failure_reasons]
            total = failed + self.progress
            raise NsqError(f"{failed:,} of {total:,} messages were not published: {reasons[0]}")

    def report(self) -> WorkerReport:
        messages = self.progress
        return WorkerReport(
            role=Role.PUBLISHER,
            messages=messages,
            bytes=messages * self.job.size,
            started_ns=self.started_ns,
            ended_ns=self.ended_ns,
            latencies=LatencyHistogram(),
        )


async def _granted(bucket: TokenBucket, wanted: int) -> int:
    """Up to `wanted` messages the rate allows, waiting until it allows at least one."""
    while not (granted := bucket.take(wanted, trio.current_time())):
        await trio.sleep(bucket.wait_time(trio.current_time()))
    return granted


class Consumers:
    """A worker's consuming connections, each a Consumer of its own on the channel."""

    def __init__(self, job: WorkerJob) -> None:
        self.job = job
        self.started_ns = self.ended_ns = self.last_ns = 0
        self.messages = self.bytes = self.unstamped = 0
        self.latencies = LatencyHistogram()
        self._stopping = False
        self._timed_out = False
        self._consumers: list[Consumer] = []

    async def connect(self, stack: AsyncExitStack) -> None:
        """Subscribe every connection (with nsqlookupd: start looking the topic up)."""
        job = self.job
        config = client_config(job, max_in_flight=job.rdy)
        direct = () if job.lookupd_http_addresses else (job.nsqd_tcp_address,)
        limits: Iterable[int | None] = repeat(None) if job.counts is None else job.counts
        for _, limit in zip(range(job.connections), limits, strict=False):
            opened = open_consumer(
                job.topic,
                job.channel,
                config,
                ConsumerOptions(
                    nsqd_tcp_addresses=direct,
                    lookupd_http_addresses=job.lookupd_http_addresses,
                    budget=None if limit is None else Budget(limit),
                ),
            )
            consumer = await stack.enter_async_context(opened)
            if self._stopping:
                consumer.stop()
            self._consumers.append(consumer)

    @property
    def progress(self) -> int:
        return self.messages

    def stop(self) -> None:
        self._stopping = True
        for consumer in self._consumers:
            consumer.stop()

    async def run(self) -> None:
        """Drain until each connection's count is done, or the duration is over, or
        stop(). The window ends at the last message (at the end of the duration)."""
        self.started_ns = time.time_ns()
        async with trio.open_nursery() as timer:
            if self.job.duration is not None:
                timer.start_soon(self._stop_after, self.job.duration)
            async with trio.open_nursery() as drains:
                for consumer in self._consumers:
                    drains.start_soon(self._drain, consumer)
            timer.cancel_scope.cancel()
        if not self._timed_out:
            self.ended_ns = max(self.last_ns, self.started_ns)

    async def _stop_after(self, duration: float) -> None:
        await trio.sleep(duration)
        self.ended_ns = time.time_ns()
        self._timed_out = True
        self.stop()

    async def _drain(self, consumer: Consumer) -> None:
        latencies = self.latencies
        async for batch in consumer:
            received_ns = time.time_ns()
            bodies = batch.bodies
            self.unstamped += record_latencies(latencies, bodies, received_ns)
            self.bytes += sum(map(len, bodies))
            batch.finish()
            self.messages += len(bodies)
            self.last_ns = received_ns

    def report(self) -> WorkerReport:
        return WorkerReport(
            role=Role.CONSUMER,
            messages=self.messages,
            bytes=self.bytes,
            started_ns=self.started_ns,
            ended_ns=self.ended_ns,
            latencies=self.latencies,
            unstamped=self.unstamped,
        )


Worker = Publishers | Consumers


async def work(job: WorkerJob, lines: JsonLines) -> WorkerReport | None:
    """Connect, say ready, wait for go, run, report; None if stopped before go."""
    worker: Worker = Publishers(job) if job.role is Role.PUBLISHER else Consumers(job)
    async with AsyncExitStack() as stack:
        if not job.subscribe_at_go:
            await worker.connect(stack)
        await lines.send({"ready": True})
        order = await lines.receive()
        if order is None or not order.get("go"):
            return None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_follow_orders, lines, worker)
            nursery.start_soon(_report_progress, lines, worker)
            async with AsyncExitStack() as at_go:
                if job.subscribe_at_go:
                    await worker.connect(at_go)
                await worker.run()
            nursery.cancel_scope.cancel()
    return worker.report()


async def _follow_orders(lines: JsonLines, worker: Worker) -> None:
    """Stop the worker when the run says so, or when the run is gone."""
    while (order := await lines.receive()) is not None and not order.get("stop"):
        pass
    worker.stop()


async def _report_progress(lines: JsonLines, worker: Worker) -> None:
    while True:
        await trio.sleep(PROGRESS_INTERVAL)
        await lines.send({"progress": worker.progress})


async def serve() -> None:
    """The worker's life: its job from stdin, its report (or error) to stdout."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    lines = JsonLines(stdin, stdout)
    try:
        document = await lines.receive()
        if document is None:
            return
        with single_errors():
            report = await work(WorkerJob.from_json(document), lines)
        if report is not None:
            await lines.send({"report": report.to_json()})
    except (NsqError, ProtocolError, ConfigError, LineError, OSError) as error:
        await lines.send({"error": str(error) or type(error).__name__})


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # As the console scripts do (nsqtools.runtime.startup, front.run_event_loop): consumers make a
    # few objects per message, and the default collector would run every 700 of them.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    trio.run(serve)


if __name__ == "__main__":
    main()
