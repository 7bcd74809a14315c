"""format("nsq")'s readers: the consumers that live in the executors' Python workers.

A read task of the query (streaming.py's ReaderPartition: a batch number, a slot and a
share of maxMessagesPerTrigger) finds its process's Holder for the query, or starts one:
our consumer, run on trio in a thread of the worker, which stays between tasks (Spark
reuses its Python workers). The holder takes what it received into the task's rows and
keeps those messages in flight, TOUCHed before nsqd's msg_timeout, until the driver's
coordinator (coordination.py) says the batch was committed: then they are FIN'd.

- A task retried in the same process gets the same messages again (the holder still
  holds them): the batch is read byte for byte as before.
- A holder whose control channel ends (the driver's query stopped, failed or is gone)
  requeues everything at once and lets go; so does one whose process gets SIGTERM or
  SIGHUP (it then dies of it), ends with os._exit (as PySpark's daemon ends a worker
  whose socket Spark closed) or whose parent is gone (it then exits), and one that no
  task has used for idle_timeout while it holds no batch.
- A process that dies outright (an executor lost) leaves its messages to nsqd, which
  gives them to another consumer after msg_timeout.
So delivery is at least once, and each row has the message id for deduplication.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import trio

from nsqtools.consumer import Consumer, ConsumerOptions, ReceivedBatch, open_consumer
from nsqtools.protocol import Message
from nsqtools.spark.coordination import CoordinatorAddress, Key, Lines

if TYPE_CHECKING:
    from nsqtools.spark.streaming import SourceSettings

log = logging.getLogger("nsqtools.spark.readers")

# How long a stopping holder may take to requeue what it holds.
STOP_TIMEOUT = 10.0
# How long a new holder's first task waits for its first messages.
FIRST_WAIT = 1.0
# How long a task waits for the coordinator to acknowledge what it took.
ANSWER_TIMEOUT = 60.0
# How long a holder tries to reach the coordinator at each of its addresses.
CONNECT_TIMEOUT = 5.0
# How often the holder's process looks whether its parent is still there.
PARENT_CHECK_INTERVAL = 0.5
# How often a holder tells the coordinator how many messages wait in it (at most).
REPORT_INTERVAL = 0.02


class CoordinatorGone(RuntimeError):
    """The driver's side of the query does not answer: the task fails (and Spark,
    if the query still runs, retries it)."""


@dataclass
class _Taken:
    """Messages of one consumer batch that went into one task's rows."""

    batch: ReceivedBatch
    messages: list[Message]


class Holder:
    """One query's consumer in this process, with what it holds: received and in no
    task yet (`waiting`), and each (batch, slot) a task took until the coordinator
    answers for it (`held`). Shared by Spark's thread and the consumer's; guarded by
    `lock`."""

    def __init__(self, settings: SourceSettings, coordinator: CoordinatorAddress) -> None:
        self.settings = settings
        self.coordinator = coordinator
        self.lock = threading.Lock()
        self.waiting: deque[_Taken] = deque()
        self.held: dict[Key, list[_Taken]] = {}
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self._arrived = threading.Event()  # something came since the holder started
        self._last_task = time.monotonic()
        self._answers: dict[int, trio.Event] = {}
        self._stale: dict[int, bool] = {}
        self._asks = itertools.count()
        self._lines: Lines | None = None
        self._report = trio.Event()
        self._started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._consumer: Consumer | None = None
        self._window = 0  # the consumer's in-flight window, as its thread last saw it
        self._thread = threading.Thread(target=self._run, name="nsq-source", daemon=True)
        self._thread.start()
        self._started.wait()
        if self.error is not None:
            raise self.error

    # -- Spark's thread ---------------------------------------------------------------

    def read(self, batch: int, slot: int, limit: int) -> list[tuple[Message, str]]:
        """The messages of (batch, slot): those taken for it before, else up to `limit`
        of what waits; registered with the coordinator before they are returned."""
        self._last_task = time.monotonic()
        key = (batch, slot)
        with self.lock:
            taken = self.held.get(key)
        if taken is None:
            self._arrived.wait(FIRST_WAIT)
            taken = self._take(limit)
            with self.lock:
                self.held[key] = taken
        count = sum(len(entry.messages) for entry in taken)
        if self._ask_to_hold(key, count):
            self._answer(key, requeue=True)  # a task of a committed batch: not used
            return []
        return [
            (message, entry.batch.nsqd_address) for entry in taken for message in entry.messages
        ]

    def _take(self, limit: int) -> list[_Taken]:
        """Up to `limit` waiting messages, in arrival order, and at most half the
        in-flight window: the next batch's arrive while this one waits for its commit
        (else every other batch would be the one that only commits the last)."""
        if self.error is not None:
            raise self.error
        room = min(limit, self._window // 2) if self._window > 1 else limit
        taken: list[_Taken] = []
        with self.lock:
            while self.waiting and room > 0:
                first = self.waiting[0]
                if len(first.messages) > room:
                    taken.append(_Taken(first.batch, first.messages[:room]))
                    first.messages = first.messages[room:]
                    break
                taken.append(self.waiting.popleft())
                room -= len(taken[-1].messages)
        self._request_report()
        return taken

    def _ask_to_hold(self, key: Key, count: int) -> bool:
        """Register (batch, slot) and its count with the coordinator; True if the batch
        is committed already."""
        if self._token is None or self.closed.is_set():
            raise CoordinatorGone('format("nsq")\'s reader has stopped')
        ask = next(self._asks)
        try:
            trio.from_thread.run(self._hold, ask, key, count, trio_token=self._token)
        except (trio.RunFinishedError, trio.BrokenResourceError, trio.ClosedResourceError):
            raise CoordinatorGone('format("nsq")\'s reader has stopped') from None
        return self._stale.pop(ask)

    def close(self) -> None:
        """Requeue everything not FIN'd at once and let go. Safe twice, from any thread
        but the consumer's; waits STOP_TIMEOUT at most (the consumer's thread may wait
        for `lock`, which the caller's thread may hold)."""
        consumer, token = self._consumer, self._token
        if consumer is not None and token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(consumer.stop)
        self._thread.join(STOP_TIMEOUT)

    # -- the consumer's thread ----------------------------------------------------------

    def _run(self) -> None:
        _leave_signals_to_ours()  # and so do the threads trio starts from this one
        try:
            trio.run(self._hold_messages)
        except BaseException as error:  # reported to Spark's thread by read()
            self.error = error
        finally:
            self.closed.set()
            _forget(self)
            self._started.set()

    async def _hold_messages(self) -> None:
        settings = self.settings
        self._token = trio.lowlevel.current_trio_token()
        lines = Lines(await _connect(self.coordinator))
        await lines.send({"token": self.coordinator.token})
        self._lines = lines
        async with open_consumer(
            settings.topic,
            settings.channel,
            settings.config,
            ConsumerOptions(
                nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
                lookupd_http_addresses=settings.lookupd_http_addresses,
                stop_timeout=STOP_TIMEOUT,
            ),
        ) as consumer:
            self._consumer = consumer
            self._started.set()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._listen, lines, consumer)
                nursery.start_soon(self._report_waiting, lines)
                nursery.start_soon(self._touch_held)
                nursery.start_soon(self._end_when_idle, consumer)
                nursery.start_soon(_end_with_parent)
                async for batch in consumer:
                    with self.lock:
                        self.waiting.append(_Taken(batch, batch.messages))
                    self._window = consumer.window
                    self._arrived.set()
                    self._report.set()
                nursery.cancel_scope.cancel()
        await lines.stream.aclose()

    async def _hold(self, ask: int, key: Key, count: int) -> None:
        assert self._lines is not None
        answered = self._answers[ask] = trio.Event()
        await self._lines.send({"hold": list(key), "count": count, "ask": ask})
        with trio.move_on_after(ANSWER_TIMEOUT):
            await answered.wait()
        if not answered.is_set():
            raise CoordinatorGone('format("nsq")\'s driver did not answer')

    async def _listen(self, lines: Lines, consumer: Consumer) -> None:
        """The coordinator's word; its end (the query stopped, or its driver is gone)
        ends the holder, which requeues everything."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
            async for message in lines:
                if "answer" in message:
                    ask = int(message["answer"])
                    self._stale[ask] = bool(message["stale"])
                    answered = self._answers.pop(ask, None)
                    if answered is not None:
                        answered.set()
                for key in message.get("fin", []):
                    self._answer((key[0], key[1]), requeue=False)
                for key in message.get("requeue", []):
                    self._answer((key[0], key[1]), requeue=True)
                if message.get("stop"):
                    break
        consumer.stop()

    def _answer(self, key: Key, requeue: bool) -> None:
        with self.lock:
            taken = self.held.pop(key, [])
        for entry in taken:
            if requeue:
                entry.batch.requeue(entry.messages, delay=0, backoff=False)
            else:
                entry.batch.finish(entry.messages)

    def _request_report(self) -> None:
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._report.set)

    async def _report_waiting(self, lines: Lines) -> None:
        """Tell the coordinator how many messages wait here when that changes: it
        plans a batch when some do."""
        told = None
        while True:
            await self._report.wait()
            self._report = trio.Event()
            with self.lock:
                waiting = sum(len(entry.messages) for entry in self.waiting)
            if waiting != told:
                await lines.send({"waiting": waiting})
                told = waiting
            await trio.sleep(REPORT_INTERVAL)

    async def _touch_held(self) -> None:
        """TOUCH what is held, so a batch slower than msg_timeout is not redelivered."""
        while True:
            await trio.sleep(self._touch_interval())
            with self.lock:
                everything = [*self.waiting, *itertools.chain(*self.held.values())]
            for entry in everything:
                entry.batch.touch(entry.messages)

    def _touch_interval(self) -> float:
        """A third of the shortest msg_timeout an nsqd granted (60 s: nsqd's default)."""
        granted = None if self._consumer is None else self._consumer.msg_timeout
        return max((granted or self.settings.config.msg_timeout or 60.0) / 3, 0.1)

    async def _end_when_idle(self, consumer: Consumer) -> None:
        """Let go once no task has come for idle_timeout and no batch is held: what
        waits here goes back to nsqd for the holders that tasks do visit."""
        idle_timeout = self.settings.idle_timeout
        while True:
            await trio.sleep(min(idle_timeout, 1.0))
            with self.lock:
                holding = bool(self.held)
            if not holding and time.monotonic() - self._last_task > idle_timeout:
                consumer.stop()
                return


async def _connect(address: CoordinatorAddress) -> trio.SocketStream:
    """A stream to the coordinator, at the first of its addresses that answers."""
    errors = []
    for host in address.hosts:
        with trio.move_on_after(CONNECT_TIMEOUT):
            try:
                return await trio.open_tcp_stream(host, address.port)
            except OSError as error:
                errors.append(f"{host}: {error.strerror or error}")
                continue
        errors.append(f"{host}: timed out")
    raise CoordinatorGone(
        f'format("nsq")\'s reader cannot reach the driver on port {address.port} '
        f"({'; '.join(errors)})"
    )


# -- the holders of this process ------------------------------------------------------

_HOLDERS: dict[str, Holder] = {}
_HOLDERS_LOCK = threading.Lock()


def holder_for(settings: SourceSettings, coordinator: CoordinatorAddress) -> Holder:
    """This process's holder for the query whose coordinator this is (started on its
    first task here)."""
    with _HOLDERS_LOCK:
        holder = _HOLDERS.get(coordinator.token)
        if holder is not None and not holder.closed.is_set():
            return holder
        _check_workers_are_reused()
        _requeue_before_dying()
        holder = Holder(settings, coordinator)
        _HOLDERS[coordinator.token] = holder
        return holder


def _check_workers_are_reused() -> None:
    """A Spark task's worker that ends with its task would take its holder along (and
    leave what it held to msg_timeout): refuse to read there."""
    from pyspark import TaskContext

    if TaskContext.get() is not None and not os.environ.get("SPARK_REUSE_WORKER"):
        raise RuntimeError(
            'format("nsq") reads in Python workers that Spark keeps between tasks: '
            "spark.python.worker.reuse must be true (its default)"
        )


def _forget(holder: Holder) -> None:
    with _HOLDERS_LOCK:
        if _HOLDERS.get(holder.coordinator.token) is holder:
            del _HOLDERS[holder.coordinator.token]


def close_all() -> None:
    """Requeue what every holder of this process holds, and let go."""
    with _HOLDERS_LOCK:
        holders = list(_HOLDERS.values())
    for holder in holders:
        holder.close()


# -- signals --------------------------------------------------------------------------

# How a worker is ended: SIGTERM, and SIGHUP (PySpark's daemon sends it to its workers
# as it shuts down).
_ENDING_SIGNALS = frozenset({signal.SIGTERM, signal.SIGHUP})
_signals_taken = False


def _requeue_before_dying() -> None:
    """End the process as its signal would, but after every holder requeued. PySpark's
    worker resets the handlers of SIGTERM and SIGHUP before each task, so no handler
    lasts; instead both are blocked in this thread (Spark's: its later threads inherit
    the mask) and taken by a thread of ours with sigwait(), which requeues, then lets
    the signal through to end the process. A signal that comes again meanwhile is the
    same one. A normal exit (atexit) and os._exit requeue first too."""
    global _signals_taken
    if _signals_taken:
        return
    _signals_taken = True
    atexit.register(close_all)
    os._exit = _requeue_then_exit
    signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING_SIGNALS)
    threading.Thread(target=_end_when_signalled, name="nsq-source-signals", daemon=True).start()


_exit = os._exit


def _requeue_then_exit(status: int) -> NoReturn:
    """os._exit, after every holder requeued. PySpark's daemon ends its workers with
    os._exit, which runs no atexit hook: when Spark closes a worker's socket (its
    executor stopping, or the query's driver gone) the worker's thread leaves at once,
    before the holder's thread has sent a REQ, and nsqd would give those messages out
    again only after msg_timeout."""
    close_all()
    _exit(status)


def _end_when_signalled() -> None:
    signum = signal.sigwait(_ENDING_SIGNALS)
    close_all()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})  # in this thread alone
    os.kill(os.getpid(), signum)


def _leave_signals_to_ours() -> None:
    """Block the ending signals in the calling thread (and so in the threads it
    starts): the kernel gives a process's signal to any thread not blocking it, and
    then the process would end before it requeued."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING_SIGNALS)


async def _end_with_parent() -> None:
    """End the worker, as SIGTERM does, once its parent is gone (it has a new one): no
    task and no signal will come from an executor that was killed."""
    parent = os.getppid()
    while os.getppid() == parent:
        await trio.sleep(PARENT_CHECK_INTERVAL)
    log.warning("the process that started this worker is gone: requeueing, then exiting")
    os.kill(os.getpid(), signal.SIGTERM)
