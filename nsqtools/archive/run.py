"""nsq_to_file's run: files a crash left repaired, then every topic archived until the
stop, and every archive closed, even after a failure.

Before consuming, the files a crash left in the work dir (their markers name them) are
cut back to what is whole and placed (inprogress.recover_crashed_files). Then each
topic, given or discovered through the lookupds (only those whose names make safe
file names), gets its TopicArchive, fed by the runtime's consumers. SIGHUP closes every
open file (the next message opens a new one). At the end, each archive is closed
(synced, FIN'd, moved to the output dir); the first failure (a sink's, a message
given up with no dead-letter destination, an nsqd --exit-at-end could not read) is
raised once all are closed.

The command draws the status line (StatusLine) from the counters, every second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from nsqtools.archive.inprogress import recover_crashed_files
from nsqtools.archive.names import BadName
from nsqtools.archive.sink import ArchiveCounters, ArchiveSettings, TopicArchive
from nsqtools.runtime.consuming import ConsumeSettings, RunCounters, Unreachable, run_consumers
from nsqtools.runtime.deadletters import GivenUp
from nsqtools.runtime.progress import measure_rate
from nsqtools.runtime.sinks import SinkFailed

if TYPE_CHECKING:
    from nsqtools.config import ClientConfig
    from nsqtools.runtime.deadletters import DeadLetterSettings
    from nsqtools.runtime.topics import LookupdTopics, TopicPattern

STATUS_INTERVAL = 1.0


@dataclass
class ArchiveRunSettings:
    """What to archive, from where (nsq_to_file's options, checked)."""

    topics: list[str]  # given with --topic (and matching --topic-pattern)
    pattern: TopicPattern | None
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    topic_refresh: float
    http_timeouts: tuple[float, float]  # connect, request
    config: ClientConfig
    archive: ArchiveSettings
    dead_letters: DeadLetterSettings
    exit_at_end: bool = False  # stop once nsqd has nothing more for any topic


class StatusLine(Protocol):
    """The status line the command draws while the run archives."""

    def show(self, counters: ArchiveCounters, per_second: float) -> None: ...

    def end(self) -> None: ...


async def run_archive(
    settings: ArchiveRunSettings,
    status: StatusLine | None = None,
    run_counters: RunCounters | None = None,
) -> None:
    """Repair what a crash left, archive until the stop, close every archive; raise the
    first failure (SinkFailed, GivenUp) once every archive is closed. run_counters, if
    given, is kept up to date as the run goes (the metrics)."""
    archive = settings.archive
    await trio.to_thread.run_sync(
        recover_crashed_files, archive.work_dir, archive.output_dir, archive.names
    )
    counters = ArchiveCounters()
    archives: dict[str, TopicArchive] = {}

    consume = ConsumeSettings(
        topics=settings.topics,
        channel=archive.channel,
        config=settings.config,
        nsqd_tcp_addresses=settings.nsqd_tcp_addresses,
        lookupd_http_addresses=settings.lookupd_http_addresses,
        topic_refresh=settings.topic_refresh,
        dead_letters=settings.dead_letters,
        exit_at_end=settings.exit_at_end,
    )
    failure: SinkFailed | GivenUp | Unreachable | None = None
    async with trio.open_nursery() as nursery:

        def sink_for(topic: str) -> TopicArchive:
            archives[topic] = TopicArchive(topic, archive, counters)
            return archives[topic]

        def close_all() -> None:
            for topic_archive in list(archives.values()):
                nursery.start_soon(_close, topic_archive)

        if status is not None:
            nursery.start_soon(_keep_status, counters, status)
        try:
            await run_consumers(
                consume,
                sink_for,
                _topic_finder(settings),
                on_hangup=close_all,
                counters=run_counters,
            )
        except (SinkFailed, GivenUp, Unreachable) as error:
            failure = error
        for topic_archive in archives.values():  # every one, even after a failure
            closing_failure = await _close(topic_archive)
            failure = failure or closing_failure
        nursery.cancel_scope.cancel()
    if status is not None:
        status.end()
    if failure is not None:
        raise failure


async def _close(archive: TopicArchive) -> SinkFailed | None:
    try:
        await archive.close()
    except SinkFailed as error:
        return error
    return None


def _topic_finder(settings: ArchiveRunSettings) -> LookupdTopics | None:
    """With no --topic: the lookupds' topics that match the pattern (Go's discovery)."""
    if settings.topics or not settings.lookupd_http_addresses:
        return None
    names = settings.archive.names

    def unsafe(topic: str) -> str | None:
        try:
            names.check_topic(topic)
        except BadName as error:
            return str(error)
        return None

    # Imported only here: it imports httpx (and httpx, rich), ~120 ms and ~10 MiB that a
    # run with --topic never needs.
    from nsqtools.runtime.topics import LookupdTopics

    connect_timeout, request_timeout = settings.http_timeouts
    return LookupdTopics(
        settings.lookupd_http_addresses,
        settings.pattern,
        connect_timeout=connect_timeout,
        request_timeout=request_timeout,
        check=unsafe,
    )


async def _keep_status(counters: ArchiveCounters, line: StatusLine) -> None:
    """The status line, redrawn every STATUS_INTERVAL until cancelled."""
    await measure_rate(
        lambda: counters.messages, STATUS_INTERVAL, lambda rate: line.show(counters, rate)
    )
