"""Unit tests of the archive sink's decisions (archive/sink.py), without nsqd: when it
syncs, what it FINs (only what a sync made durable), rotation by interval (trio's mock
clock) and by size, and a failed write (nothing FIN'd, the file left for recovery).

Deliveries carry stand-in messages and a Settler that records what the sink settles;
tests/test_cli_to_file.py and the fault harness run the same sink against real nsqd."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqtools.archive.inprogress import MARKERS, recover_crashed_files
from nsqtools.archive.names import FilenameFormat
from nsqtools.archive.sink import ArchiveCounters, ArchiveSettings, TopicArchive
from nsqtools.protocol import Message
from nsqtools.runtime.sinks import Delivery, SinkFailed

TOPIC = "orders"


@dataclass
class _Received:
    """What a Delivery carries: a stand-in for the consumer's batch."""

    messages: list[Message]
    nsqd_address: str = "127.0.0.1:4150"

    @property
    def bodies(self) -> list[bytes]:
        return [message.body for message in self.messages]

    def __len__(self) -> int:
        return len(self.messages)


@dataclass
class _Settler:
    """The runtime's side, recording: the bodies FIN'd, in order."""

    finished: list[bytes] = field(default_factory=list)

    def finish(self, delivery: Delivery, messages: list[Message] | None) -> None:
        self.finished += [m.body for m in (delivery.messages if messages is None else messages)]

    def requeue(
        self, delivery: Delivery, messages: list[Message] | None, delay: float | None, backoff: bool
    ) -> None:
        raise AssertionError("the archive sink never requeues: a failure is final")

    def refuse(self, delivery: Delivery, messages: list[Message], reason: str) -> None:
        raise AssertionError("the archive sink never refuses")

    def touch(self, delivery: Delivery) -> None:
        raise AssertionError("the runtime TOUCHes, never the sink")


_ids = iter(range(10**9))


def _delivery(settler: _Settler, *bodies: bytes) -> Delivery:
    messages = [Message(b"%016d" % next(_ids), 0, 1, body) for body in bodies]
    return Delivery(TOPIC, _Received(messages), settler)


def _settings(tmp_path: Path, **changes: object) -> ArchiveSettings:
    gzip_on = changes.get("gzip_level") is not None
    values: dict[str, object] = {
        "channel": "archive",
        "output_dir": tmp_path / "out",
        "work_dir": tmp_path / "out",
        "names": FilenameFormat.build(
            "<TOPIC>.<HOST><REV>.<DATETIME>.log",
            datetime_format="day",  # no time in the name: no new file at midnight
            host_identifier="host",
            gzip=gzip_on,
            rev_required=True,
            hostname="host",
        ),
        "gzip_level": None,
        "rotate_size": 0,
        "rotate_interval": 0.0,
        "sync_interval": 30.0,
        "skip_empty_files": False,
        "max_in_flight": 100,
        "json": False,
    }
    values.update(changes)
    return ArchiveSettings(**values)  # type: ignore[arg-type]


def _files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*.log*") if MARKERS not in path.parts)


def _content(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in _files(directory))


async def test_nothing_is_finished_before_a_sync_made_it_durable(tmp_path: Path) -> None:
    settler = _Settler()
    sink = TopicArchive(TOPIC, _settings(tmp_path), ArchiveCounters())
    await sink.accept(_delivery(settler, b"one", b"two"))
    await sink.accept(_delivery(settler, b"three"))
    assert settler.finished == []
    assert _content(tmp_path / "out") == b""  # gathered, not yet written
    await sink.tick()  # the --sync-interval tick
    assert settler.finished == [b"one", b"two", b"three"]
    assert _content(tmp_path / "out") == b"one\ntwo\nthree\n"
    await sink.close()


async def test_max_in_flight_messages_waiting_sync_at_once(tmp_path: Path) -> None:
    settler = _Settler()
    counters = ArchiveCounters()
    sink = TopicArchive(TOPIC, _settings(tmp_path, max_in_flight=3), counters)
    await sink.accept(_delivery(settler, b"a", b"b"))
    assert settler.finished == []
    await sink.accept(_delivery(settler, b"c"))
    assert settler.finished == [b"a", b"b", b"c"]
    assert (counters.messages, counters.syncs) == (3, 1)
    await sink.close()


async def test_a_flush_settles_everything_accepted(tmp_path: Path) -> None:
    settler = _Settler()
    sink = TopicArchive(TOPIC, _settings(tmp_path), ArchiveCounters())
    await sink.accept(_delivery(settler, b"a"))
    await sink.flush()  # the runtime's, when the consumer is starved
    assert settler.finished == [b"a"]
    await sink.close()


async def test_close_places_the_file_in_the_output_dir_and_removes_its_marker(
    tmp_path: Path,
) -> None:
    settler = _Settler()
    settings = _settings(tmp_path, work_dir=tmp_path / "work", gzip_level=6)
    sink = TopicArchive(TOPIC, settings, ArchiveCounters())
    await sink.accept(_delivery(settler, b"a"))
    await sink.close()
    assert settler.finished == [b"a"]
    [placed] = _files(tmp_path / "out")
    assert "-000000." in placed.name and placed.name.endswith(".log.gz")
    assert _files(tmp_path / "work") == []
    assert not (tmp_path / "work" / MARKERS).exists()  # nor their directory, empty


async def test_the_rotate_interval_starts_the_next_revision(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    settler = _Settler()
    sink = TopicArchive(TOPIC, _settings(tmp_path, rotate_interval=60.0), ArchiveCounters())
    await sink.accept(_delivery(settler, b"first"))
    mock_clock.jump(60)
    await sink.tick()  # not strictly longer than the interval yet: Go's rule
    assert len(_files(tmp_path / "out")) == 1
    mock_clock.jump(1)
    await sink.tick()
    await sink.accept(_delivery(settler, b"second"))
    await sink.close()
    first, second = _files(tmp_path / "out")
    assert "-000000." in first.name and "-000001." in second.name
    assert (first.read_bytes(), second.read_bytes()) == (b"first\n", b"second\n")
    assert settler.finished == [b"first", b"second"]


async def test_a_file_passes_the_rotate_size_by_at_most_one_record(tmp_path: Path) -> None:
    settler = _Settler()
    sink = TopicArchive(TOPIC, _settings(tmp_path, rotate_size=10), ArchiveCounters())
    await sink.accept(_delivery(settler, b"12345", b"12345", b"12345", b"x"))
    await sink.close()
    sizes = [path.read_bytes() for path in _files(tmp_path / "out")]
    assert sizes == [b"12345\n12345\n", b"12345\nx\n"]  # checked before each record
    assert settler.finished == [b"12345", b"12345", b"12345", b"x"]


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Writes past 64 KiB fail with EFBIG in this process (SIGXFSZ ignored meanwhile):
    a disk that refuses a write, without a filesystem of its own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65_536, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


async def test_a_failed_write_finishes_nothing_and_leaves_the_file_for_recovery(
    tmp_path: Path, file_size_limit: None
) -> None:
    settler = _Settler()
    settings = _settings(tmp_path)
    sink = TopicArchive(TOPIC, settings, ArchiveCounters())
    await sink.accept(_delivery(settler, b"kept"))
    await sink.flush()
    await sink.accept(_delivery(settler, b"y" * 100_000))
    with pytest.raises(SinkFailed, match="file too large"):
        await sink.flush()
    assert settler.finished == [b"kept"]
    with pytest.raises(SinkFailed):  # for good: it settles nothing more
        await sink.accept(_delivery(settler, b"later"))
    assert settler.finished == [b"kept"]
    # The marker stays for the next start, which keeps what was synced.
    placed = recover_crashed_files(settings.work_dir, settings.output_dir, settings.names)
    assert [path.read_bytes() for path in placed] == [b"kept\n"]
