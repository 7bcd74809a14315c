"""Dead letters: what the runtime does with a message it gives up on, before its FIN.

A message is given up when it comes past max_attempts (the consumer hands it up), or
when its sink refused it for good and a dead-letter destination is set. Each is kept as
its JSON envelope, the one `nsq_tail --format json` writes (nsqtools.formats), with a
"reason" added, and only then FIN'd:

- with a dead-letter file: appended to it (opened for append, never truncated), flushed
  and fsynced (and its directory too, when the run made the file);
- with a dead-letter topic: published to that topic on the nsqd that delivered the
  message, and acknowledged;
- with neither (max_attempts set, no destination): the envelope in a warning on stderr.

Letters queued together are kept together (one write and one fsync for the lot). Every
message given up is counted by why; at the end of a run GivenUp says how many and where
(exit status 1). A destination that fails ends the run (DeadLettersFailed): the messages
go back to nsqd, none is FIN'd before it was kept.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO, Self

import trio

from nsqtools import formats
from nsqtools.config import ClientConfig
from nsqtools.consumer import ReceivedBatch
from nsqtools.durable import fsync_directory
from nsqtools.errors import NsqError, describe_file_error
from nsqtools.protocol import Message
from nsqtools.runtime.sinks import SinkFailed

if TYPE_CHECKING:  # the producer is loaded only when a dead-letter topic is used
    from nsqtools.producer import Producer

log = logging.getLogger("nsqtools.runtime")

# Why messages were given up, as the line at the end of a run says it.
PAST_MAX_ATTEMPTS = "given up after max_attempts"
REFUSED = "refused by the destination"


@dataclass(frozen=True)
class DeadLetterSettings:
    """Where given-up messages are kept (neither: in warnings on stderr)."""

    file: Path | None = None
    topic: str | None = None

    @property
    def kept(self) -> bool:
        """A destination is set: a message a sink refuses is given up, not retried."""
        return self.file is not None or self.topic is not None

    def where(self) -> str:
        places = []
        if self.file is not None:
            places.append(str(self.file))
        if self.topic is not None:
            places.append(f"topic {self.topic} on the nsqd that delivered each")
        return " and ".join(places) or "the warnings on stderr"


class GivenUp(NsqError):
    """The run gave messages up (each kept as a dead letter): its exit status is 1."""

    def __init__(self, counts: Mapping[str, int], where: str) -> None:
        parts = [
            f"{count} {'message was' if count == 1 else 'messages were'} {why}"
            for why, count in sorted(counts.items())
        ]
        them = "it is" if sum(counts.values()) == 1 else "they are"
        super().__init__(f"{' and '.join(parts)}; {them} in {where}")


class DeadLettersFailed(SinkFailed):
    """A dead-letter destination failed: the run ends, what it was given is requeued."""


@dataclass
class Letters:
    """Messages of one batch given up for one reason."""

    origin: formats.Origin
    batch: ReceivedBatch
    messages: list[Message]
    reason: str  # in a line, in each envelope
    why: str  # PAST_MAX_ATTEMPTS or REFUSED, for the count

    def lines(self) -> list[bytes]:
        return [
            json.dumps(
                formats.envelope(message, self.origin) | {"reason": self.reason},
                ensure_ascii=False,
            ).encode()
            for message in self.messages
        ]


class DeadLetters:
    """Keeps what it is given (keep(), from any task), then FINs it; a context manager
    that opens the file at once (a bad path fails the start) and runs the keeper."""

    def __init__(
        self,
        settings: DeadLetterSettings,
        config: ClientConfig,
        counts: Counter[str],
        on_failure: Callable[[SinkFailed], None],
    ) -> None:
        self.settings = settings
        self.config = config  # for publishing to the nsqds that delivered the messages
        self.counts = counts
        self.on_failure = on_failure
        self.failure: DeadLettersFailed | None = None
        self._send, self._receive = trio.open_memory_channel[Letters](math.inf)
        self._waiting = 0  # letters given, not yet kept (or requeued)
        self._all_kept = trio.Event()
        self._all_kept.set()
        self._file: BinaryIO | None = None
        self._producers: dict[str, Producer] = {}  # for the topic, by nsqd address
        self._nursery_manager = trio.open_nursery()
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> Self:
        if self.settings.file is not None:
            self._file = await trio.to_thread.run_sync(_open_for_append, self.settings.file)
        self._nursery = await self._nursery_manager.__aenter__()
        self._nursery.start_soon(self._keep_what_comes)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop keeping: what was given and not kept is the consumers' to requeue."""
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        try:
            await self._nursery_manager.__aexit__(exc_type, exc, traceback)
        finally:
            if self._file is not None:
                self._file.close()

    def keep(self, letters: Letters) -> None:
        """Keep these messages, then FIN them (soon: this does not wait)."""
        if self.failure is not None:
            letters.batch.requeue(letters.messages, delay=0, backoff=False)
            return
        self._waiting += 1
        self._all_kept = trio.Event() if self._all_kept.is_set() else self._all_kept
        self._send.send_nowait(letters)

    async def wait_all_kept(self) -> None:
        """Until everything given so far is kept and FIN'd (or requeued)."""
        await self._all_kept.wait()

    async def _keep_what_comes(self) -> None:
        async with AsyncExitStack() as producers:  # the topic's, made as they are needed
            async for first in self._receive:
                given = [first]
                while True:
                    try:
                        given.append(self._receive.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._keep_all(given, producers)
                self._waiting -= len(given)
                if not self._waiting:
                    self._all_kept.set()

    async def _keep_all(self, given: list[Letters], producers: AsyncExitStack) -> None:
        if self.failure is None:
            try:
                await self._write(given, producers)
            except (OSError, NsqError) as error:
                self._fail(error)
        for letters in given:
            if self.failure is None:
                letters.batch.finish(letters.messages)
                self.counts[letters.why] += len(letters.messages)
            else:
                letters.batch.requeue(letters.messages, delay=0, backoff=False)

    async def _write(self, given: list[Letters], producers: AsyncExitStack) -> None:
        if not self.settings.kept:
            for letters in given:
                for message, line in zip(letters.messages, letters.lines(), strict=True):
                    log.warning(
                        "giving up on message %s (%s): %s",
                        formats.message_id(message),
                        letters.reason,
                        line.decode(),
                    )
            return
        if self._file is not None:
            data = b"".join(line + b"\n" for letters in given for line in letters.lines())
            await trio.to_thread.run_sync(_append, self._file, data)
        if self.settings.topic is not None:
            by_nsqd: dict[str, list[bytes]] = {}
            for letters in given:
                by_nsqd.setdefault(letters.origin.nsqd, []).extend(letters.lines())
            for address, bodies in by_nsqd.items():
                producer = self._producers.get(address)
                if producer is None:
                    from nsqtools.producer import open_producer  # a start-up cost otherwise

                    producer = await producers.enter_async_context(
                        open_producer([address], self.config)
                    )
                    self._producers[address] = producer
                await producer.publish_many(self.settings.topic, bodies)

    def _fail(self, error: OSError | NsqError) -> None:
        if isinstance(error, OSError):
            reason = describe_file_error(error, self.settings.file)
        else:
            reason = str(error)
        self.failure = DeadLettersFailed(f"dead letters cannot be kept: {reason}")
        self.on_failure(self.failure)


def _open_for_append(path: Path) -> BinaryIO:
    """The file, for appending; when made now, its directory entry synced too."""
    made = not path.exists()
    file = path.open("ab")
    if made:
        fsync_directory(path.parent)
    return file


def _append(file: BinaryIO, data: bytes) -> None:
    file.write(data)
    file.flush()
    os.fsync(file.fileno())
