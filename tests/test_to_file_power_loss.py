"""What of nsq_to_file's archive survives a power loss: the system calls of a real run,
recorded by strace, in the order they were made.

A power loss keeps what was fsynced: a file's data by fsync(file), its name (and a
new directory's) only by fsync of the directory holding it. So for every message
FIN'd, each directory entry its file depends on (the file's name in the work or
output dir, the directories made for it, its new name after a move, the removal of
the old one, the in-progress marker made before it) must have been followed by an
fsync of the directory holding that entry, before the FIN went to nsqd. And whatever
a start did before its first FIN (the repair and move of a crashed run's file) must be
synced before that FIN.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsqtools.archive.inprogress import MARKERS
from nsqtools.archive.placing import PARTIAL_PREFIX
from nsqtools.testing import Nsqd, other_filesystem, our_tool, wait_until

TOPIC = "durable"
CHANNEL = "nsq_to_file"
OURS = our_tool("nsq_to_file")
# A file event per few dozen messages: several files, each in a directory of its own.
OPTIONS = [
    "--host-identifier=host",
    "--filename-format=<TOPIC>/<HOST><REV>.log",
    "--format=json",
    "--rotate-size=3000",
    "--max-in-flight=20",
    "--sync-interval=200ms",
]
SYSCALLS = (
    "open,openat,creat,mkdir,mkdirat,link,linkat,unlink,unlinkat,rename,renameat,renameat2,"
    "fsync,fdatasync,sendto,sendmsg,write,writev"
)
DEADLINE = 30.0


@dataclass(frozen=True)
class Event:
    """One system call that succeeded, at its place in the trace."""

    at: int
    kind: str  # "new" (an entry made), "gone" (removed), "fsync", "fin"
    path: Path  # the entry, the fsynced file or directory; for "fin", nothing
    ids: tuple[str, ...] = ()  # the messages FIN'd


@contextmanager
def traced(argv: list[str], trace: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The tool run under strace -f for the block; then SIGTERM to the tool (not to
    strace), which must make it exit 0."""
    strace = [
        "strace", "-f", "-qq", "-y", "-s", "16384", "-e", f"trace={SYSCALLS}",
        "-e", "signal=none", "-o", str(trace),
    ]  # fmt: skip
    process = subprocess.Popen([*strace, *argv], stderr=subprocess.PIPE)
    try:
        wait_until(lambda: bool(children(process.pid)), DEADLINE, "the tool started")
        yield process
        os.kill(children(process.pid)[0], signal.SIGTERM)
        _, stderr = process.communicate(timeout=DEADLINE)
        assert process.returncode == 0, stderr.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


# -- reading the trace -----------------------------------------------------------------

_CALL = re.compile(r"^(\d+) +(\w+)\((.*)\) += (-?\d+)")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. (\w+) resumed>(.*)$")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_FD_PATH = re.compile(r"^-?\d+<(.*)>$")
_FIN = re.compile(r"FIN ([0-9a-zA-Z]{16})\\n")


def events(trace: Path) -> list[Event]:
    """The trace's successful calls as events; a call split by another thread's is put
    where it ended, but a FIN where it started (the stricter order either way)."""
    found: list[Event] = []
    started: dict[str, tuple[int, str]] = {}  # pid: where the unfinished call began, its text
    for at, line in enumerate(trace.read_text().splitlines()):
        if line.endswith("<unfinished ...>"):
            pid, _, text = line.partition(" ")
            started[pid] = (at, text.removesuffix("<unfinished ...>").strip())
            continue
        resumed = _RESUMED.match(line)
        began = at
        if resumed:
            pid, _, rest = resumed.groups()
            began, text = started.pop(pid)
            line = f"{pid} {text}{rest}"
        call = _CALL.match(line)
        if call is None or int(call[4]) < 0:
            continue
        found.extend(_events_of(at, began, call[2], call[3]))
    return found


def _events_of(at: int, began: int, name: str, arguments: str) -> list[Event]:
    strings = [Path(text) for text in _STRING.findall(arguments)]
    if name in ("sendto", "sendmsg", "write", "writev"):
        to_nsqd = re.match(r"\d+<(socket|TCP):", arguments)
        ids = tuple(_FIN.findall(arguments)) if to_nsqd else ()
        return [Event(began, "fin", Path(), ids)] if ids else []
    if name in ("fsync", "fdatasync"):
        fd_path = _FD_PATH.match(arguments.split(",")[0].strip())
        assert fd_path is not None, arguments
        return [Event(at, "fsync", Path(fd_path[1]))]
    assert all(path.is_absolute() for path in strings), arguments
    if name in ("open", "openat", "creat"):
        creates = name == "creat" or "O_CREAT" in arguments
        return [Event(at, "new", strings[0])] if creates else []
    if name in ("mkdir", "mkdirat"):
        return [Event(at, "new", strings[0])]
    if name in ("link", "linkat"):
        return [Event(at, "new", strings[1])]
    if name in ("unlink", "unlinkat"):
        return [Event(at, "gone", strings[0])]
    assert name.startswith("rename"), name
    return [Event(at, "gone", strings[0]), Event(at, "new", strings[1])]


# -- the check -------------------------------------------------------------------------


def unsynced_before_fins(
    trace: list[Event], places: dict[str, Path], roots: list[Path]
) -> list[str]:
    """Each entry a FIN depended on that no fsync of its directory made durable before
    the FIN. places: each message's archive path relative to the work and output dirs
    (`roots`)."""
    fins = [event for event in trace if event.kind == "fin"]
    assert fins, "no FIN seen in the trace"
    first_fin = fins[0].at
    problems = []
    for fin in fins:
        for message in fin.ids:
            for entry in depended_on(trace, places[message], roots, fin.at, first_fin):
                if not synced_between(trace, entry.path.parent, entry.at, fin.at):
                    problems.append(f"FIN {message} (line {fin.at}): {entry}")
    return problems


def depended_on(
    trace: list[Event], relative: Path, roots: list[Path], before: int, first_fin: int
) -> Iterator[Event]:
    """The entries made or removed before `before` that a message in `relative`
    depends on: its file's name and directories under each root, the markers made
    before the file, and whatever the start did before its first FIN."""
    paths = {root / relative for root in roots}
    paths |= {parent for path in paths for parent in path.parents if parent not in roots}
    paths -= {parent for root in roots for parent in root.parents}
    created = min(e.at for e in trace if e.kind == "new" and e.path in paths)
    for event in trace:
        if event.at >= before or event.kind not in ("new", "gone"):
            continue
        name = event.path.name
        a_marker = event.path.parent.name == MARKERS or name == MARKERS
        if name.startswith(PARTIAL_PREFIX) or (a_marker and event.kind == "gone"):
            continue  # a temporary, or a marker removed: nothing durable depends on them
        if event.path in paths or (a_marker and event.at < created) or event.at < first_fin:
            yield event


def synced_between(trace: list[Event], directory: Path, start: int, end: int) -> bool:
    return any(
        event.kind == "fsync" and event.path == directory and start < event.at < end
        for event in trace
    )


def archived_ids(output_dir: Path) -> dict[str, Path]:
    """Each message id in the archives: the file's path relative to the output dir."""
    places = {}
    for path in output_dir.rglob("*.log*"):
        data = path.read_bytes()
        text = gzip.decompress(data) if path.suffix == ".gz" else data
        for line in text.splitlines():
            places[json.loads(line)["id"]] = path.relative_to(output_dir)
    return places


def fin_d(nsqd: Nsqd, count: int, by_this_run: int) -> bool:
    """`count` messages came to the channel, and the run connected now FIN'd
    `by_this_run` of them (the rest: runs before it)."""
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    return (
        nsqd.drained(TOPIC, CHANNEL)
        and stats.message_count == count
        and nsqd.finished_by_clients(TOPIC, CHANNEL) == by_this_run
    )


def archive_run(nsqd: Nsqd, trace: Path, out: Path, work: Path, *args: str) -> list[Event]:
    """Publish 300 messages, archive them all under strace, stop; the trace."""
    nsqd.create_channels(TOPIC, CHANNEL)
    before = nsqd.channel_stats(TOPIC, CHANNEL).message_count
    nsqd.publish_many(TOPIC, [b"message %d" % index for index in range(300)])
    argv = [
        *OURS, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}",
        f"--output-dir={out}", f"--work-dir={work}", *OPTIONS, *args,
    ]  # fmt: skip
    with traced(argv, trace):
        wait_until(lambda: fin_d(nsqd, before + 300, 300), DEADLINE, "every message FIN'd")
    return events(trace)


@pytest.mark.parametrize("where", ["no work dir", "work dir", "work dir on another filesystem"])
def test_every_entry_a_fin_depends_on_is_synced_before_it(
    nsqd: Nsqd, tmp_path: Path, where: str
) -> None:
    with other_filesystem(tmp_path) as elsewhere:
        out = (elsewhere or tmp_path) / "out" if where.endswith("filesystem") else tmp_path / "out"
        work = out if where == "no work dir" else tmp_path / "work"
        gzip_option = ["--gzip"] if where == "work dir" else []
        trace = archive_run(nsqd, tmp_path / "trace", out, work, *gzip_option)
        places = archived_ids(out)
        assert len(places) == 300
        assert unsynced_before_fins(trace, places, sorted({work, out})) == []


def test_a_crashed_run_s_file_is_moved_durably_before_the_next_fin(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    """A run killed with a file open (its messages FIN'd): the next start repairs it
    and moves it out, synced before it FINs anything."""
    out, work = tmp_path / "out", tmp_path / "work"
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, [b"before the crash %d" % index for index in range(10)])
    argv = [
        *OURS, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}",
        f"--output-dir={out}", f"--work-dir={work}", *OPTIONS,
    ]  # fmt: skip
    crashed = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: fin_d(nsqd, 10, 10), DEADLINE, "the first run FIN'd all")
    finally:
        crashed.kill()
        crashed.wait()
    assert list((work / MARKERS).iterdir())  # its file was open
    trace = archive_run(nsqd, tmp_path / "trace", out, work)
    recovered = [e for e in trace if e.kind == "new" and e.path.is_relative_to(out)]
    assert recovered and recovered[0].at < next(e.at for e in trace if e.kind == "fin")
    places = archived_ids(out)
    assert len(places) == 310
    assert unsynced_before_fins(trace, places, [out, work]) == []
