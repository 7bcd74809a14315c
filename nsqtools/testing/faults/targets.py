"""Every tool as the fault harness drives it: its command line (ours and Go's), how the
numbered messages go in, where they come out and how that is read back, and the faults
only it has.

Consuming tools read the World's topic through the tap, on a durable channel created
before the first message goes in; the messages are published to nsqd over HTTP while
the faults strike (a publish that fails is sent again: it may then be in twice, counted
as an ambiguous publish). nsq_tail's output is its stdout, nsq_to_file's its files (on a
small filesystem the harness can fill), nsq_to_nsq's a destination nsqd's topic (no
channel on it until the end, so that nothing there is ever held in memory only), and
nsq_to_http's the requests a recording web server answered 2xx. to_nsq's records are
fed to its stdin (targets_pub.py).
"""

from __future__ import annotations

import base64
import errno
import json
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import httpx
import trio

from nsqtools.archive.reading import scan_file, whole_lines
from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi.call import send_sync
from nsqtools.httpapi.clients import sync_client
from nsqtools.testing.binaries import find_binary, our_tool
from nsqtools.testing.cluster import Nsqd
from nsqtools.testing.faults.harness import (
    CHANNEL,
    DURABLE,
    FINISH_DEADLINE,
    TOPIC,
    Harness,
    Target,
    World,
)
from nsqtools.testing.faults.runs import Run
from nsqtools.testing.faults.schedule import Fault, FaultKind, Schedule
from nsqtools.testing.filesystems import small_filesystem
from nsqtools.testing.webserver import Answer, WebServer

MESSAGES = 400  # a short schedule's
FEED_SHARE = 0.8  # messages go in over this share of the schedule's span
FEED_BATCH = 10
PUBLISH_RETRY = 0.05
# Requeues and backoff short enough that a run finishes in seconds, the same for Go's.
CONSUMER_OPTS = (
    "default_requeue_delay,100ms",
    "max_requeue_delay,1s",
    "max_backoff_duration,1s",
    "backoff_multiplier,100ms",
)
NSQD_FAULTS = (
    FaultKind.NSQD_KILL,
    FaultKind.NSQD_FREEZE,
    FaultKind.SLOW_LINK,
    FaultKind.LINK_CUT,
    FaultKind.TOOL_KILL,
    FaultKind.TOOL_STOP,
)
FILESYSTEM_SIZE = 4 * 1024 * 1024
DRAIN_QUIET = 0.5  # a destination is drained once nothing came for this long


def numbered(count: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}-{number:06d}".encode() for number in range(count)]


class ConsumingTarget(Target):
    """A tool that consumes the World's topic: messages published to nsqd as faults
    strike; done once nsqd's channel holds nothing more."""

    program = ""  # our entry point and Go's binary: nsq_tail, nsq_to_file, ...
    dead_letters = True  # ours keeps given-up messages in --dead-letter-file

    def __init__(self, messages: int = MESSAGES, max_attempts: int = 0) -> None:
        self.bodies = numbered(messages)
        self.go_program = self.program or None
        # Given: messages past it are given up (ours: dead letters; Go's: FIN'd, lost).
        self.max_attempts = max_attempts
        if max_attempts:
            self.name = f"{self.name} max_attempts={max_attempts}"
        self._dead_so_far = 0
        self._fed = threading.Event()
        self._retries = 0
        self._feeder: threading.Thread | None = None

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        super().prepare(world, directory, schedule)
        world.nsqd.create_channels(TOPIC, CHANNEL)

    def argv(self, implementation: str, run: int) -> list[str]:
        common = [
            f"--nsqd-tcp-address={self.world.address}",
            f"--topic={TOPIC}",
            f"--channel={CHANNEL}",
            *(f"--consumer-opt={option}" for option in CONSUMER_OPTS),
            f"--consumer-opt=max_attempts,{self.max_attempts}",
            *self.options(implementation),
        ]
        if implementation == "go":
            return [str(find_binary(self.program)), *common]
        dead = [f"--dead-letter-file={self.dead_letter_file}"] if self.dead_letters else []
        return [*our_tool(self.program), *common, *dead]

    def options(self, implementation: str) -> list[str]:
        """The tool's own options (its output, its destination)."""
        return []

    @property
    def dead_letter_file(self) -> Path:
        return self.directory / "dead-letters.jsonl"

    # -- messages in -------------------------------------------------------------------

    def start_feeding(self, started: float) -> None:
        self._feeder = threading.Thread(target=self._feed, args=(started,), daemon=True)
        self._feeder.start()

    def _feed(self, started: float) -> None:
        batches = [
            self.bodies[index : index + FEED_BATCH]
            for index in range(0, len(self.bodies), FEED_BATCH)
        ]
        spacing = self.schedule.span * FEED_SHARE / len(batches)
        with sync_client(timeout=30) as client:
            for number, batch in enumerate(batches):
                time.sleep(max(0.0, started + number * spacing - time.monotonic()))  # pacing
                self._publish(client, batch)
        self._fed.set()

    def _publish(self, client: httpx.Client, batch: list[bytes]) -> None:
        """Until nsqd takes it: a failed attempt may have gone in all the same."""
        while True:
            try:
                send_sync(client, nsqd_api.mpub(self.world.nsqd.http_address, TOPIC, batch))
                return
            except Exception:  # nsqd killed, stopped or restarting: any failure, again
                self._retries += 1
                time.sleep(PUBLISH_RETRY)

    def feeding_done(self) -> bool:
        return self._fed.is_set()

    @property
    def published(self) -> set[bytes]:
        return set(self.bodies)

    @property
    def ambiguous_publishes(self) -> int:
        return self._retries

    # -- the end -----------------------------------------------------------------------

    def finish(self, harness: Harness) -> None:
        """Keep the tool running until it has FIN'd every message delivered and nsqd's
        channel holds nothing more, twice in a row (a message timing out passes through
        a moment where nsqd counts it nowhere), then SIGTERM."""
        quiet_checks = 0

        def done() -> bool:
            nonlocal quiet_checks
            quiet = self.feeding_done() and self._all_answered() and self._emptied()
            quiet_checks = quiet_checks + 1 if quiet else 0
            return quiet_checks >= 2

        harness.supervise_until(done, FINISH_DEADLINE, "the channel to be emptied")
        if harness.notes:
            harness.notes.append(f"then: {self._state()}")
        harness.stop_tool()

    def _state(self) -> str:
        """What the finish waited on, for a report."""
        ledger = self.world.tap.ledger if self.world.tap is not None else None
        unfinished = sorted(ledger.body_of[i] for i in ledger.unfinished) if ledger else []
        try:
            topic = self.world.nsqd.stats(topic=TOPIC).topic(TOPIC)
            channel = topic.channel(CHANNEL)
            stats = (
                f"topic depth {topic.depth}, channel depth {channel.depth}, in flight "
                f"{channel.in_flight_count}, deferred {channel.deferred_count}"
            )
        except Exception as error:  # what nsqd says is what is reported, even a failure
            stats = f"no stats: {error}"
        return f"{stats}; delivered, not FIN'd: {len(unfinished)} {unfinished[:5]}"

    def _all_answered(self) -> bool:
        ledger = self.world.tap.ledger if self.world.tap is not None else None
        return ledger is not None and not ledger.unfinished

    def _emptied(self) -> bool:
        try:
            return self.world.nsqd.emptied(TOPIC, CHANNEL)
        except Exception:  # nsqd busy restarting: not yet
            return False

    def kept(self) -> Counter[bytes]:
        return Counter(dead_letter_bodies(self.dead_letter_file))

    def run_ended(self, run: Run) -> None:
        """How many messages the run gave up (the dead letters it added)."""
        dead = len(dead_letter_bodies(self.dead_letter_file))
        run.kept, self._dead_so_far = dead - self._dead_so_far, dead


def dead_letter_bodies(path: Path) -> list[bytes]:
    """The bodies of a dead-letter file's JSON envelopes."""
    if not path.exists():
        return []
    bodies = []
    for line in path.read_bytes().splitlines():
        envelope = json.loads(line)
        body = envelope["body"]
        encoding = envelope.get("encoding", "utf-8")
        bodies.append(base64.b64decode(body) if encoding == "base64" else body.encode())
    return bodies


class TailTarget(ConsumingTarget):
    name = "nsq_tail"
    program = "nsq_tail"
    kinds = NSQD_FAULTS

    def output(self) -> Counter[bytes]:
        lines: Counter[bytes] = Counter()
        for stdout in sorted((self.directory / "runs").glob("run*.out")):
            lines.update(stdout.read_bytes().splitlines())
        return lines


class ToFileTarget(ConsumingTarget):
    """nsq_to_file writing `variant` files ("plain", "gzip", "work dir", "--exit-at-end")
    onto a small filesystem of its own, which DISK_FULL fills (a ballast file) and mends
    (deleted). With a work dir, the work dir is on that filesystem and the output dir
    elsewhere: finished files move across filesystems. With --exit-at-end (ours only:
    Go has no such flag), each run ends by itself once nsqd has nothing more for it, and
    the harness starts the next, as a cron job would."""

    program = "nsq_to_file"
    kinds = (*NSQD_FAULTS, FaultKind.DISK_FULL)

    def __init__(self, variant: str, messages: int = MESSAGES) -> None:
        if variant not in ("plain", "gzip", "work dir", "--exit-at-end"):
            raise ValueError(f"no such nsq_to_file variant: {variant}")
        self.variant = variant
        self.name = f"nsq_to_file {variant}"
        super().__init__(messages)
        if variant == "--exit-at-end":
            self.go_program = None
        self._stack = ExitStack()
        self.filesystem = Path()

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        super().prepare(world, directory, schedule)
        mounted = self._stack.enter_context(small_filesystem(directory, FILESYSTEM_SIZE))
        if mounted is None:
            raise RuntimeError("the fault harness needs to mount a tmpfs (run it as root)")
        self.filesystem = mounted
        for folder in self.folders:
            folder.mkdir(parents=True, exist_ok=True)

    @property
    def output_dir(self) -> Path:
        base = self.directory if self.variant == "work dir" else self.filesystem
        return base / "out"

    @property
    def folders(self) -> list[Path]:
        if self.variant == "work dir":
            return [self.output_dir, self.filesystem / "work"]
        return [self.output_dir]

    def options(self, implementation: str) -> list[str]:
        options = [f"--output-dir={self.output_dir}"]
        if self.variant == "gzip":
            options.append("--gzip")
        if self.variant == "work dir":
            options.append(f"--work-dir={self.filesystem / 'work'}")
        if self.variant == "--exit-at-end":
            options.append("--exit-at-end")
        return options

    def break_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DISK_FULL:
            fill(self.filesystem / "ballast")

    def mend_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DISK_FULL:
            (self.filesystem / "ballast").unlink(missing_ok=True)

    def _files(self) -> list[Path]:
        return [
            path
            for folder in self.folders
            for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != "ballast"
        ]

    def output(self) -> Counter[bytes]:
        lines: Counter[bytes] = Counter()
        for path in self._files():
            with path.open("rb") as file:
                lines.update(whole_lines(file))
        return lines

    def damaged(self) -> list[str]:
        reports = (scan_file(str(path)) for path in self._files())
        return [f"{report.path}: {report.damage}" for report in reports if report.damage]

    def close(self) -> None:
        self._stack.close()


def fill(path: Path) -> None:
    """Write zeros to `path` until its filesystem is full."""
    block = bytes(64 * 1024)
    with path.open("wb", buffering=0) as ballast:
        while True:
            try:
                ballast.write(block)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return
                block = block[: len(block) // 2]


class RelayNsqTarget(ConsumingTarget):
    """nsq_to_nsq from the World's nsqd to a destination nsqd of its own, which
    DESTINATION_DOWN stops (connections refused) and DESTINATION_KILL kills."""

    name = "nsq_to_nsq"
    program = "nsq_to_nsq"
    kinds = (*NSQD_FAULTS, FaultKind.DESTINATION_DOWN, FaultKind.DESTINATION_KILL)

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        super().prepare(world, directory, schedule)
        self.destination = Nsqd(world.root / "destination", "destination", extra_args=DURABLE)
        self.destination.start()

    def options(self, implementation: str) -> list[str]:
        return [f"--destination-nsqd-tcp-address={self.destination.tcp_address}"]

    def break_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DESTINATION_DOWN:
            self.destination.stop()
        elif fault.kind is FaultKind.DESTINATION_KILL:
            self.destination.kill()

    def mend_fault(self, fault: Fault) -> None:
        if fault.kind in (FaultKind.DESTINATION_DOWN, FaultKind.DESTINATION_KILL):
            self.destination.start()

    def output(self) -> Counter[bytes]:
        return drain(self.destination, TOPIC)

    def close(self) -> None:
        self.destination.stop()


class RelayHttpTarget(ConsumingTarget):
    """nsq_to_http posting to a recording web server; DESTINATION_DOWN makes it answer
    503 (one fault in two) or reset every request (the other)."""

    name = "nsq_to_http"
    program = "nsq_to_http"
    kinds = (*NSQD_FAULTS, FaultKind.DESTINATION_DOWN)

    def prepare(self, world: World, directory: Path, schedule: Schedule) -> None:
        super().prepare(world, directory, schedule)
        self.server = WebServer()
        self.server.start()

    def options(self, implementation: str) -> list[str]:
        return [f"--post={self.server.url}/messages"]

    def break_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DESTINATION_DOWN:
            failing = self.schedule.faults.index(fault) % 2 == 0
            self.server.default = Answer(status=503) if failing else Answer(reset=True)

    def mend_fault(self, fault: Fault) -> None:
        if fault.kind is FaultKind.DESTINATION_DOWN:
            self.server.default = Answer()

    def output(self) -> Counter[bytes]:
        return Counter(request.body for request in self.server.accepted)

    def close(self) -> None:
        self.server.stop()


def drain(nsqd: Nsqd, topic: str, channel: str = "drain") -> Counter[bytes]:
    """Every message of the topic, with its copies: a new channel read until nsqd holds
    nothing more for it."""
    nsqd.create_channels(topic, channel)
    return trio.run(_drain, nsqd, topic, channel)


async def _drain(nsqd: Nsqd, topic: str, channel: str) -> Counter[bytes]:
    from nsqtools.config import ClientConfig
    from nsqtools.consumer import ConsumerOptions, open_consumer

    bodies: Counter[bytes] = Counter()
    config = ClientConfig(max_in_flight=1000)
    async with open_consumer(
        topic, channel, config, ConsumerOptions(nsqd_tcp_addresses=[nsqd.tcp_address])
    ) as consumer:
        while True:
            with trio.move_on_after(DRAIN_QUIET):
                batch = await anext(consumer)
                bodies.update(batch.bodies)
                batch.finish()
                continue
            emptied = await trio.to_thread.run_sync(nsqd.emptied, topic, channel)
            if emptied:
                return bodies
