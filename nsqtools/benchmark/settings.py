"""What a benchmark run is asked to do, and each worker process's share of it (sans-IO).

A run has publishers, consumers or both (Mode); each role's connections are spread
over `processes` worker processes, and so are the message count and the rate. A
WorkerJob is one process's part, sent to it as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from nsqtools.benchmark.stamps import STAMP_SIZE


class Mode(StrEnum):
    BOTH = "both"  # consume while publishing: the latency of a live flow
    PUBLISH = "publish"
    CONSUME = "consume"  # an existing channel, filled beforehand

    @property
    def publishes(self) -> bool:
        return self is not Mode.CONSUME

    @property
    def consumes(self) -> bool:
        return self is not Mode.PUBLISH


class Role(StrEnum):
    PUBLISHER = "publisher"
    CONSUMER = "consumer"


@dataclass(frozen=True)
class BenchSettings:
    mode: Mode
    nsqd_tcp_address: str
    topic: str
    channel: str
    size: int  # bytes per message, the stamp included
    batch_size: int  # messages per MPUB
    count: int | None  # messages to publish (to consume, in Mode.CONSUME); or duration
    duration: float | None  # seconds of publishing (of consuming, in Mode.CONSUME)
    publishers: int  # connections
    consumers: int  # connections
    processes: int  # worker processes per role
    in_flight: int  # MPUBs awaiting nsqd's answer, per publisher connection
    rdy: int  # RDY per consumer connection
    rate: int = 0  # messages per second over all publishers; 0: as fast as nsqd takes them
    lookupd_http_addresses: tuple[str, ...] = ()  # consumers find nsqd through these
    # go-nsq options ("key,value") of each role's connections, e.g. snappy, or
    # output_buffer_timeout for the consumers (nsqd holds their messages up to 250ms).
    producer_options: tuple[str, ...] = ()
    consumer_options: tuple[str, ...] = ()
    # nsqd's HTTP API, when the run needs it: to delete the topic it made up, or to
    # create topic and channel before consumers look them up in nsqlookupd.
    nsqd_http_address: str | None = None
    delete_topic: bool = False  # the topic was made up for this run: delete it after

    def __post_init__(self) -> None:
        if self.size < STAMP_SIZE:
            raise ValueError(
                f"--size must be at least {STAMP_SIZE} bytes: each message starts with its "
                f"{STAMP_SIZE}-byte publication time"
            )
        if (self.count is None) == (self.duration is None):
            raise ValueError("give --count or --duration, not both")
        for name in ("batch_size", "publishers", "consumers", "processes", "in_flight", "rdy"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.count is not None and self.count < 1:
            raise ValueError("--count must be at least 1")
        if self.duration is not None and self.duration <= 0:
            raise ValueError("--duration must be positive")
        if self.rate < 0:
            raise ValueError("--rate must not be negative")

    def jobs(self, role: Role) -> list[WorkerJob]:
        """Each worker process's share of the role's connections, count and rate."""
        connections = self.publishers if role is Role.PUBLISHER else self.consumers
        per_process = shares(connections, min(self.processes, connections))
        counts = self._counts(role, connections)
        jobs, first = [], 0
        for share in per_process:
            mine = None if counts is None else counts[first : first + share]
            jobs.append(self._job(role, share, mine))
            first += share
        return jobs

    def _counts(self, role: Role, connections: int) -> list[int] | None:
        """Each connection's message count: publishers split the count; consumers split
        it only when they alone drain a channel (with publishers they stop when every
        message published has been consumed, whoever consumed it)."""
        owns_count = role is Role.PUBLISHER or self.mode is Mode.CONSUME
        if self.count is None or not owns_count:
            return None
        return shares(self.count, connections)

    def _job(self, role: Role, connections: int, counts: list[int] | None) -> WorkerJob:
        total_connections = self.publishers if role is Role.PUBLISHER else self.consumers
        own_duration = role is Role.PUBLISHER or self.mode is Mode.CONSUME
        return WorkerJob(
            role=role,
            nsqd_tcp_address=self.nsqd_tcp_address,
            lookupd_http_addresses=self.lookupd_http_addresses,
            client_options=(
                self.producer_options if role is Role.PUBLISHER else self.consumer_options
            ),
            topic=self.topic,
            channel=self.channel,
            connections=connections,
            counts=counts,
            duration=self.duration if own_duration else None,
            size=self.size,
            batch_size=self.batch_size,
            in_flight=self.in_flight,
            rdy=self.rdy,
            rate_per_connection=self.rate / total_connections,
            subscribe_at_go=self.mode is Mode.CONSUME,
        )

    def to_json(self) -> dict[str, Any]:
        """The settings a report names (addresses and figures, not the HTTP plumbing)."""
        return {
            "mode": self.mode.value,
            "nsqd_tcp_address": self.nsqd_tcp_address,
            "lookupd_http_addresses": list(self.lookupd_http_addresses),
            "topic": self.topic,
            "channel": self.channel,
            "size": self.size,
            "batch_size": self.batch_size,
            "count": self.count,
            "duration_s": self.duration,
            "publishers": self.publishers if self.mode.publishes else 0,
            "consumers": self.consumers if self.mode.consumes else 0,
            "processes": self.processes,
            "in_flight": self.in_flight,
            "rdy": self.rdy,
            "rate": self.rate,
            "producer_options": list(self.producer_options),
            "consumer_options": list(self.consumer_options),
        }


def shares(total: int, parts: int) -> list[int]:
    """total split in `parts` whole shares differing by at most one, larger first."""
    base, extra = divmod(total, parts)
    return [base + 1] * extra + [base] * (parts - extra)


@dataclass(frozen=True)
class WorkerJob:
    """One worker process's part of a run."""

    role: Role
    nsqd_tcp_address: str
    lookupd_http_addresses: tuple[str, ...]
    client_options: tuple[str, ...]  # go-nsq options of its connections
    topic: str
    channel: str
    connections: int
    # Messages for each connection to publish (or consume); None: until told to stop
    # or the duration is over.
    counts: list[int] | None
    duration: float | None  # seconds from "go" until the worker stops by itself
    size: int
    batch_size: int
    in_flight: int
    rdy: int
    rate_per_connection: float  # 0: no limit
    # Consumers of a channel filled beforehand subscribe only at "go" (bench_reader
    # sends RDY then too): what arrives before "go" would not be measured.
    subscribe_at_go: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"role": self.role.value}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> WorkerJob:
        fields = dict(document)
        fields["role"] = Role(fields["role"])
        for name in ("lookupd_http_addresses", "client_options"):
            fields[name] = tuple(fields[name])
        return cls(**fields)
