"""Files a crash left behind, cut back to whole records or gzip members (archive.recovery);
on files of our making, and on gzip files written by Go's nsq_to_file against a real nsqd."""

from __future__ import annotations

import gzip
import random
import signal
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqtools.archive import recovery
from nsqtools.archive.recovery import Recovered, cut_back
from nsqtools.testing import AllocationMeter, Nsqd, find_binary, wait_until

# The header Go's compress/gzip writes: no name, mtime 0, OS 255 (unknown).
GO_GZIP_HEADER = bytes.fromhex("1f8b08000000000000ff")


GZIP_MAGIC = b"\x1f\x8b"


def member(content: bytes) -> bytes:
    return gzip.compress(content, mtime=0)


def recovered(path: Path, data: bytes, *, gzipped: bool | None = None) -> tuple[Recovered, bytes]:
    """cut_back on a file holding `data` (gzip unless told otherwise when it begins like
    one): its answer and what the file then holds."""
    path.write_bytes(data)
    if gzipped is None:
        gzipped = data.startswith(GZIP_MAGIC)
    return cut_back(path, gzip=gzipped), path.read_bytes()


# Plain files


@pytest.mark.parametrize(
    ("data", "kept"),
    [
        (b"one\ntwo\nthr", b"one\ntwo\n"),
        (b"one\ntwo\n", b"one\ntwo\n"),
        (b"no newline at all", b""),
        (b"", b""),
        (b"\n", b"\n"),
        (b"one\n\x00\x00\x00\x00", b"one\n"),  # a power loss may leave zeros at the end
    ],
)
def test_a_plain_file_keeps_up_to_its_last_newline(
    tmp_path: Path, data: bytes, kept: bytes
) -> None:
    answer, left = recovered(tmp_path / "topic.log", data)
    assert left == kept
    assert answer == Recovered(tmp_path / "topic.log", len(kept), len(data) - len(kept))


@pytest.mark.parametrize("block_size", [1, 2, 3, 5, 64 * 1024])
def test_a_plain_file_is_scanned_back_block_by_block(tmp_path: Path, block_size: int) -> None:
    data = b"first\n" + b"x" * 200_000 + b"\nsecond\n" + b"torn" * 3
    with mock.patch.object(recovery, "_BLOCK_SIZE", block_size):
        for end in (len(data), len(data) - 1, len(data) - 12, len(data) - 13, 7, 6, 5):
            _, left = recovered(tmp_path / "topic.log", data[:end])
            assert left == data[: data.rfind(b"\n", 0, end) + 1]


def test_a_plain_file_whose_first_body_is_gzip_is_cut_as_plain(tmp_path: Path) -> None:
    """Publishers may send gzip bodies: the caller, not the first bytes, says gzip."""
    body = member(b"payload")
    _, left = recovered(tmp_path / "topic.log", body + b"\n" + body[:5], gzipped=False)
    assert left == body + b"\n"


# Gzip files


def test_a_whole_multi_member_file_with_a_trailing_empty_member_is_kept(tmp_path: Path) -> None:
    data = member(b"a\nb\n") + member(b"") + member(b"c\n") + member(b"")
    answer, left = recovered(tmp_path / "topic.log.gz", data)
    assert left == data
    assert answer.cut == 0


def test_a_torn_last_member_is_cut(tmp_path: Path) -> None:
    whole = member(b"a\n") + member(b"b\n")
    last = member(b"c\n" * 100)
    for end in (1, 2, 9, 10, 11, len(last) // 2, len(last) - 8, len(last) - 4, len(last) - 1):
        _, left = recovered(tmp_path / "topic.log.gz", whole + last[:end])
        assert left == whole, end


def test_a_member_failing_its_checks_is_cut_with_all_after_it(tmp_path: Path) -> None:
    whole = member(b"a\n")
    bad = bytearray(member(b"b\n"))
    for offset, what in [(-8, "CRC32"), (-1, "length"), (0, "magic"), (2, "method")]:
        broken = bytearray(bad)
        broken[offset] ^= 0xFF
        _, left = recovered(tmp_path / "topic.log.gz", whole + bytes(broken) + member(b"c\n"))
        assert left == whole, what


def test_a_corrupt_first_member_leaves_nothing(tmp_path: Path) -> None:
    broken = bytearray(member(b"a\nb\n"))
    broken[-5] ^= 0xFF  # its CRC32
    answer, left = recovered(tmp_path / "topic.log.gz", bytes(broken))
    assert (left, answer.kept, answer.cut) == (b"", 0, len(broken))


def test_zeros_after_the_last_member_are_cut(tmp_path: Path) -> None:
    whole = member(b"a\n") + member(b"")
    _, left = recovered(tmp_path / "topic.log.gz", whole + bytes(4096))
    assert left == whole


def test_trailing_members_not_ending_in_a_newline_are_cut(tmp_path: Path) -> None:
    whole = member(b"a\n") + member(b"")
    _, left = recovered(tmp_path / "topic.log.gz", whole + member(b"half") + member(b""))
    assert left == whole


def whole_prefix_length(members: list[bytes], end: int) -> int:
    """What cut_back must keep of the members joined and cut at `end`, found the slow
    way: the longest run of members within `end` whose content ends in whole lines."""
    kept = 0
    for count in range(1, len(members) + 1):
        joined = b"".join(members[:count])
        content = gzip.decompress(joined)
        if len(joined) <= end and content[-1:] in (b"", b"\n"):
            kept = len(joined)
    return kept


@settings(max_examples=150, deadline=None)
@given(
    contents=st.lists(st.lists(st.binary(max_size=40), max_size=4), min_size=1, max_size=5),
    end_fraction=st.floats(0, 1),
    block_size=st.sampled_from([1, 2, 3, 7, 10, 11, 23, 64, 64 * 1024]),
)
def test_any_cut_at_any_read_block_size_keeps_the_whole_members(
    tmp_path_factory: pytest.TempPathFactory,
    contents: list[list[bytes]],
    end_fraction: float,
    block_size: int,
) -> None:
    """Member ends fall on, before and after read-block ends (the header is 10 bytes,
    an empty member 20 with Python's zlib, the trailer 8)."""
    members = [
        member(b"".join(line.replace(b"\n", b"") + b"\n" for line in lines)) for lines in contents
    ]
    data = b"".join(members)
    end = round(len(data) * end_fraction)
    path = tmp_path_factory.mktemp("cut") / "topic.log.gz"
    with mock.patch.object(recovery, "_BLOCK_SIZE", block_size):
        _, left = recovered(path, data[:end])
    assert left == data[: whole_prefix_length(members, end)]


def test_member_ends_exactly_at_read_block_ends(tmp_path: Path) -> None:
    first, second = member(b"a\n" * 3), member(b"b\n")
    cases = [
        (first + second, first + second),
        (first + second[:5], first),
        (first + second[:-1], first),
        (first + second + b"\x1f", first + second),
    ]
    for block_size in (len(first), len(first) + len(second)):
        with mock.patch.object(recovery, "_BLOCK_SIZE", block_size):
            for data, kept in cases:
                _, left = recovered(tmp_path / "topic.log.gz", data)
                assert left == kept, (block_size, data)


def compressed_in_pieces(pieces: Iterator[bytes], level: int = 6) -> bytes:
    """One gzip member of content given piece by piece (never held whole)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return b"".join(compressor.compress(piece) for piece in pieces) + compressor.flush()


def test_a_large_file_is_recovered_in_bounded_memory(tmp_path: Path) -> None:
    """64 MiB of content in one small member, then 4 MiB of members of random lines
    and a torn one: held at once, either would cost megabytes, not kilobytes."""
    random_lines = random.Random(7)
    huge = compressed_in_pieces(b"the same line\n" * 4096 for _ in range(1200))
    members = [huge] + [
        compressed_in_pieces(iter([random_lines.randbytes(32 * 1024).hex().encode() + b"\n"]))
        for _ in range(64)
    ]
    path = tmp_path / "topic.log.gz"
    path.write_bytes(b"".join(members) + members[1][:-1])
    with AllocationMeter() as meter:
        answer = cut_back(path, gzip=True)
    assert answer.kept == sum(map(len, members))
    assert meter.allocated < 1024 * 1024


# Files written by Go's nsq_to_file


def go_gzip_file(nsqd: Nsqd, folder: Path, bodies: list[bytes]) -> bytes:
    """What Go's nsq_to_file --gzip writes for `bodies`, synced every 25 messages, whenever
    the consumer is starved and every 200 ms (for the last few), then closed by SIGTERM."""
    topic = "archived"
    nsqd.create_channels(topic, "nsq_to_file")
    nsqd.publish_many(topic, bodies)
    process = subprocess.Popen(
        [
            str(find_binary("nsq_to_file")),
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--topic={topic}",
            f"--output-dir={folder}",
            "--gzip",
            "--max-in-flight=25",
            "--sync-interval=200ms",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def all_finished() -> bool:
            channel = nsqd.channel_stats(topic, "nsq_to_file")
            return channel.depth == channel.in_flight_count == 0

        wait_until(all_finished, 30, "Go's nsq_to_file to finish every message")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    (written,) = folder.glob(f"{topic}.*.gz")
    return written.read_bytes()


def test_go_written_gzip_files_cut_anywhere_give_whole_lines(nsqd: Nsqd, tmp_path: Path) -> None:
    choose = random.Random(10)
    bodies = [b"message %d %s" % (index, b"x" * choose.randrange(200)) for index in range(600)]
    data = go_gzip_file(nsqd, tmp_path / "go", bodies)
    full = gzip.decompress(data)
    assert sorted(full.splitlines()) == sorted(bodies)
    assert data.startswith(GO_GZIP_HEADER)
    assert data[-23:].startswith(GO_GZIP_HEADER) and gzip.decompress(data[-23:]) == b""
    starts = [offset for offset in range(len(data)) if data.startswith(GO_GZIP_HEADER, offset)]
    assert len(starts) > 10  # a sync per 25 messages at least

    answer, left = recovered(tmp_path / "whole.gz", data)
    assert (left, answer.cut) == (data, 0)

    near_ends = {start + step for start in starts for step in range(-9, 12)}
    sample = set(choose.sample(range(len(data)), 300))
    for end in sorted(near_ends & set(range(len(data))) | sample):
        _, left = recovered(tmp_path / "cut.gz", data[:end])
        ends = [start for start in [*starts, len(data)] if start <= end]
        assert len(left) == max(ends), end
        content = gzip.decompress(left)
        assert full.startswith(content) and content[-1:] in (b"", b"\n"), end
