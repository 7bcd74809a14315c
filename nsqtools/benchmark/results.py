"""What a benchmark run measured: each worker's report, and the run's figures (sans-IO).

Throughput is measured by the workers on the wall clock, which every process on the
machine shares: publishing from "go" until nsqd acknowledged the last MPUB (as
bench_writer), consuming from "go" until the last message arrived (or until the
duration was over, when consumers alone drain a channel for a duration, as
bench_reader). The run's window for a role spans its workers' windows.

BenchResults carries the figures in one shape for every output: `to_json()` for JSON,
`flat()` for one CSV row (the same numbers, the same names joined with "_").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsqtools.benchmark.latency import SUMMARY_NAMES, LatencyHistogram, LatencySummary
from nsqtools.benchmark.settings import BenchSettings, Role

MIB = 1024 * 1024  # bench_writer's and bench_reader's "mb/s" are MiB/s
NANOSECONDS = 1e9
MILLISECONDS = 1e6  # nanoseconds in a millisecond
THROUGHPUT_NAMES = ("messages", "seconds", "msg_per_s", "mib_per_s")


@dataclass
class WorkerReport:
    """What one worker process did, from "go" to the end of its window."""

    role: Role
    messages: int  # acknowledged by nsqd (publishers), received and FIN'd (consumers)
    bytes: int
    started_ns: int
    ended_ns: int
    latencies: LatencyHistogram  # consumers: receipt minus publication
    unstamped: int = 0  # consumers: bodies without a stamp of ours

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role.value,
            "messages": self.messages,
            "bytes": self.bytes,
            "started_ns": self.started_ns,
            "ended_ns": self.ended_ns,
            "latencies": self.latencies.to_json(),
            "unstamped": self.unstamped,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> WorkerReport:
        return cls(
            role=Role(document["role"]),
            messages=int(document["messages"]),
            bytes=int(document["bytes"]),
            started_ns=int(document["started_ns"]),
            ended_ns=int(document["ended_ns"]),
            latencies=LatencyHistogram.from_json(document["latencies"]),
            unstamped=int(document["unstamped"]),
        )


@dataclass(frozen=True)
class Throughput:
    messages: int
    bytes: int
    seconds: float

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mib_per_second(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The figures to the precision the summary table shows them."""
        return {
            "messages": self.messages,
            "seconds": round(self.seconds, 3),
            "msg_per_s": round(self.messages_per_second),
            "mib_per_s": round(self.mib_per_second, 2),
        }


def throughput(reports: list[WorkerReport]) -> Throughput:
    """The role's figures over the span of its workers' windows."""
    started = min(report.started_ns for report in reports)
    ended = max(report.ended_ns for report in reports)
    return Throughput(
        messages=sum(report.messages for report in reports),
        bytes=sum(report.bytes for report in reports),
        seconds=max(ended - started, 0) / NANOSECONDS,
    )


@dataclass(frozen=True)
class BenchResults:
    settings: BenchSettings
    publish: Throughput | None
    consume: Throughput | None
    latency: LatencySummary | None  # None: nothing consumed carried a stamp
    unstamped: int
    interrupted: bool  # stopped early (SIGINT/SIGTERM): the figures cover what was done

    @classmethod
    def from_reports(
        cls, settings: BenchSettings, reports: list[WorkerReport], interrupted: bool
    ) -> BenchResults:
        publishers = [report for report in reports if report.role is Role.PUBLISHER]
        consumers = [report for report in reports if report.role is Role.CONSUMER]
        latencies = LatencyHistogram()
        for report in consumers:
            latencies.merge(report.latencies)
        return cls(
            settings=settings,
            publish=throughput(publishers) if publishers else None,
            consume=throughput(consumers) if consumers else None,
            latency=latencies.summary(),
            unstamped=sum(report.unstamped for report in consumers),
            interrupted=interrupted,
        )

    def latency_ms(self) -> dict[str, float] | None:
        """p50, p90, p99, p99.9 and max, in milliseconds (to the microsecond)."""
        if self.latency is None:
            return None
        return {name: round(ns / MILLISECONDS, 3) for name, ns in self.latency.named().items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_json(),
            "publish": None if self.publish is None else self.publish.to_json(),
            "consume": None if self.consume is None else self.consume.to_json(),
            "latency_ms": self.latency_ms(),
            "unstamped": self.unstamped,
            "interrupted": self.interrupted,
        }

    def flat(self) -> dict[str, Any]:
        """to_json() as one row with the same columns in every mode: nested names joined
        with "_", lists joined with " ", booleans as JSON's, what was not measured ""."""
        document = self.to_json()
        for part, names in (
            ("publish", THROUGHPUT_NAMES),
            ("consume", THROUGHPUT_NAMES),
            ("latency_ms", SUMMARY_NAMES),
        ):
            document[part] = document[part] or dict.fromkeys(names)
        return dict(_flatten("", document))


def _flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [
            item
            for key, inner in value.items()
            for item in _flatten(f"{prefix}_{key}" if prefix else key, inner)
        ]
    if isinstance(value, list):
        return [(prefix, " ".join(map(str, value)))]
    if isinstance(value, bool):
        return [(prefix, "true" if value else "false")]  # as JSON spells them
    return [(prefix, "" if value is None else value)]
