"""One benchmark run: its worker processes, started together and followed to the end,
the topic made for it (deleted after), the live counts a display shows, the results.

Before any worker starts, nsqd is asked once over TCP (and over HTTP when the run needs
it), so a wrong address fails at once, in one line. Every worker connects (consumers
subscribe) and says it is ready; then all get "go" at once. Publishers stop by
themselves (their count, or the duration); consumers that drain a channel alone too;
consumers beside publishers are stopped once they have consumed every message the
publishers had acknowledged, so the latency covers every message. interrupt() (the
first SIGINT) stops every worker at once: the results then cover what was done.

Workers run `python -m nsqtools.benchmark.worker` from this very copy of nsqtools.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import trio

from nsqtools import discovery
from nsqtools.addresses import split_address
from nsqtools.benchmark.lines import JsonLines, LineError
from nsqtools.benchmark.results import BenchResults, WorkerReport
from nsqtools.benchmark.settings import BenchSettings, Role, WorkerJob
from nsqtools.config import ClientConfig
from nsqtools.errors import NsqError
from nsqtools.httpapi import HttpApiError, send
from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi.call import TOPIC_NOT_FOUND
from nsqtools.httpapi.clients import async_client
from nsqtools.transport import open_connection

HTTP_TIMEOUT = 5.0
# How long nsqlookupd may take to list a topic nsqd was just told to create.
LOOKUPD_REGISTRATION_TIMEOUT = 10.0
LOOKUPD_POLL_INTERVAL = 0.05
# How long a worker may take to exit once its work is over, before it is killed.
EXIT_TIMEOUT = 5.0
STDERR_KEPT = 4096  # the tail of a worker's stderr, to explain a crash

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_WORKER = [sys.executable, "-m", "nsqtools.benchmark.worker"]


class BenchError(NsqError):
    """The benchmark could not run, or a worker failed: one line."""


@dataclass
class LiveCounts:
    """What a progress display reads while the run goes."""

    published: int = 0
    consumed: int = 0
    started_at: float | None = None  # trio.current_time() of "go"
    publishing_done: bool = False


class _Worker:
    """One worker process, the lines it sent, and its report once it is done."""

    def __init__(self, job: WorkerJob, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.job = job
        self.process = process
        self.lines = JsonLines(process.stdout, process.stdin)
        self.ready = trio.Event()
        self.progress = 0
        self.report: WorkerReport | None = None
        self.stderr = bytearray()
        self.stderr_closed = trio.Event()

    @property
    def name(self) -> str:
        return f"{self.job.role.value} worker {self.process.pid}"

    async def follow(self, on_progress: Callable[[], None]) -> None:
        """Read the worker's lines to its report; a failure raises BenchError."""
        try:
            while (document := await self.lines.receive()) is not None:
                if "error" in document:
                    raise BenchError(str(document["error"]))
                if "ready" in document:
                    self.ready.set()
                elif "progress" in document:
                    self.progress = int(document["progress"])
                    on_progress()
                elif "report" in document:
                    self.report = WorkerReport.from_json(document["report"])
                    self.progress = self.report.messages
                    on_progress()
                    return
        except LineError as error:
            raise BenchError(f"{self.name}: {error}") from None
        await self.stderr_closed.wait()
        await self.process.wait()
        raise BenchError(f"{self.name} exited ({self.process.returncode}){self._last_words()}")

    async def keep_stderr(self) -> None:
        """The tail of what the worker writes on stderr (a traceback, if it crashed)."""
        assert self.process.stderr is not None
        try:
            while data := await self.process.stderr.receive_some():
                self.stderr += data
                del self.stderr[:-STDERR_KEPT]
        finally:
            self.stderr_closed.set()

    def _last_words(self) -> str:
        lines = bytes(self.stderr).decode(errors="replace").strip().splitlines()
        return f": {lines[-1]}" if lines else ""

    async def order(self, order: str) -> None:
        """Send an order ("go", "stop"); a worker already gone has nothing left to obey."""
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self.lines.send({order: True})

    async def close(self) -> None:
        """End of input (a worker still running stops), then wait for it to exit."""
        with trio.CancelScope(shield=True):
            assert self.process.stdin is not None
            await self.process.stdin.aclose()
            with trio.move_on_after(EXIT_TIMEOUT):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


class BenchRun:
    """Run with `await BenchRun(settings).run()`; `live` shows the counts meanwhile."""

    def __init__(self, settings: BenchSettings) -> None:
        self.settings = settings
        self.live = LiveCounts()
        self.interrupted = False
        self._workers: list[_Worker] = []
        self._stop_all = trio.Event()
        # Beside publishers: they are done, and every message they published consumed.
        self._all_consumed = trio.Event()

    def interrupt(self) -> None:
        """Stop every worker now; the results cover what was done so far."""
        self.interrupted = True
        self._stop_all.set()

    async def run(self) -> BenchResults:
        settings = self.settings
        await self._check_nsqd()
        try:
            if settings.lookupd_http_addresses and settings.mode.consumes:
                await self._register_topic()
            reports = await self._run_workers()
        except BaseException:
            if settings.delete_topic:
                with suppress(BenchError):  # what failed first is what to say
                    await self._delete_topic()
            raise
        if settings.delete_topic:
            await self._delete_topic()
        return BenchResults.from_reports(settings, reports, self.interrupted)

    # -- before and after --------------------------------------------------------------

    async def _check_nsqd(self) -> None:
        """nsqd answers over TCP (and over HTTP, when the run needs it, for this nsqd)."""
        settings = self.settings
        if settings.mode.publishes or not settings.lookupd_http_addresses:
            async with open_connection(settings.nsqd_tcp_address, ClientConfig()):
                pass
        if settings.nsqd_http_address is None:
            return
        async with _http_client() as client:
            try:
                info = await send(client, nsqd_api.info(settings.nsqd_http_address))
            except HttpApiError as error:
                raise BenchError(f"{error}; nsqd's HTTP API is {self._why_http()}") from None
        tcp_port = split_address(settings.nsqd_tcp_address)[1]
        if info.tcp_port != tcp_port:
            raise BenchError(
                f"nsqd {settings.nsqd_http_address} is the nsqd of TCP port {info.tcp_port}, "
                f"not of {settings.nsqd_tcp_address}: give its own --nsqd-http-address"
            )

    def _why_http(self) -> str:
        if self.settings.delete_topic:
            return "needed to delete the run's own topic: give --nsqd-http-address, or --keep-topic"
        return "needed to create the topic for nsqlookupd: give --nsqd-http-address"

    async def _register_topic(self) -> None:
        """Create the topic and channel on nsqd, and wait until nsqlookupd lists the
        topic: consumers look it up once at start, then only every minute."""
        settings = self.settings
        address = self._http_address()
        async with _http_client() as client:
            await send(client, nsqd_api.create_topic(address, settings.topic))
            await send(client, nsqd_api.create_channel(address, settings.topic, settings.channel))
            with trio.move_on_after(LOOKUPD_REGISTRATION_TIMEOUT):
                while True:
                    nodes, _ = await discovery.lookup_all(
                        client, settings.lookupd_http_addresses, settings.topic
                    )
                    if nodes:
                        return
                    await trio.sleep(LOOKUPD_POLL_INTERVAL)
        lookupds = ", ".join(settings.lookupd_http_addresses)
        raise BenchError(f"nsqlookupd {lookupds} does not list topic {settings.topic}")

    async def _delete_topic(self) -> None:
        call = nsqd_api.delete_topic(self._http_address(), self.settings.topic)
        with trio.CancelScope(shield=True), trio.move_on_after(HTTP_TIMEOUT):
            async with _http_client() as client:
                try:
                    await send(client, call)
                except HttpApiError as error:
                    if error.message != TOPIC_NOT_FOUND:  # never made: nothing to delete
                        raise BenchError(f"the topic could not be deleted: {error}") from None

    def _http_address(self) -> str:
        assert self.settings.nsqd_http_address is not None  # the command sets it when needed
        return self.settings.nsqd_http_address

    # -- the workers -------------------------------------------------------------------

    async def _run_workers(self) -> list[WorkerReport]:
        """Start every worker, "go" once all are ready, follow them to their reports."""
        settings = self.settings
        jobs = [
            *(settings.jobs(Role.CONSUMER) if settings.mode.consumes else []),
            *(settings.jobs(Role.PUBLISHER) if settings.mode.publishes else []),
        ]
        async with AsyncExitStack() as stack, trio.open_nursery() as orders:
            async with trio.open_nursery() as followers:
                for job in jobs:
                    worker = await self._start(job)
                    stack.push_async_callback(worker.close)
                    followers.start_soon(worker.keep_stderr)
                    followers.start_soon(worker.follow, self._on_progress)
                for worker in self._workers:
                    await worker.ready.wait()
                self.live.started_at = trio.current_time()
                for worker in self._workers:
                    await worker.order("go")
                orders.start_soon(self._stop_when, self._stop_all, self._workers)
                orders.start_soon(self._stop_when, self._all_consumed, self._of(Role.CONSUMER))
            orders.cancel_scope.cancel()
        return [worker.report for worker in self._workers if worker.report is not None]

    async def _start(self, job: WorkerJob) -> _Worker:
        process = await trio.lowlevel.open_process(
            _WORKER,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_worker_environment(),
        )
        worker = _Worker(job, process)
        self._workers.append(worker)
        await worker.lines.send(job.to_json())
        return worker

    def _on_progress(self) -> None:
        publishers = self._of(Role.PUBLISHER)
        consumers = self._of(Role.CONSUMER)
        live = self.live
        live.published = sum(worker.progress for worker in publishers)
        live.consumed = sum(worker.progress for worker in consumers)
        live.publishing_done = all(worker.report is not None for worker in publishers)
        if publishers and live.publishing_done and live.consumed >= live.published:
            self._all_consumed.set()

    async def _stop_when(self, event: trio.Event, workers: Sequence[_Worker]) -> None:
        await event.wait()
        for worker in workers:
            await worker.order("stop")

    def _of(self, role: Role) -> list[_Worker]:
        return [worker for worker in self._workers if worker.job.role is role]


def _http_client() -> httpx.AsyncClient:
    return async_client(timeout=HTTP_TIMEOUT)


def _worker_environment() -> dict[str, str]:
    """The environment, with this copy of nsqtools first on the workers' import path."""
    environment = dict(os.environ)
    paths = [str(_PACKAGE_ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment
