"""Prometheus's text exposition format, version 0.0.4, written: what the tools serve on
--metrics-address (nsqtools.runtime.metrics) and what `nsq_stat --format=prometheus`
prints. Sans-IO.

A Family is one metric: its name (`nsqtools_` first, `_total` last for a counter, the
unit in it: `_seconds`), its type, a help line and its samples (label values, a value);
exposition() writes families as HELP, TYPE and sample lines, label values escaped
(backslash, double quote, newline) and help texts too (backslash, newline).

Written here in a few lines, not with prometheus_client: its HTTP server runs in
threads and its registry is process-global, while our counters live in one trio event
loop, already counted, and need only be read when scraped; it would also be one more
dependency for every tool to load at start-up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Family:
    """One metric: a counter or a gauge, and its samples, one per set of labels."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)


def counter(name: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> Family:
    return Family(name, "counter", help_text, list(samples))


def gauge(name: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> Family:
    return Family(name, "gauge", help_text, list(samples))


def exposition(families: Iterable[Family]) -> str:
    """The families as Prometheus reads them: each one's HELP and TYPE lines, then its
    samples, one a line."""
    lines: list[str] = []
    for family in families:
        help_text = family.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {family.name} {help_text}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        lines.extend(
            f"{family.name}{_labels(labels)} {_value(value)}" for labels, value in family.samples
        )
    return "".join(line + "\n" for line in lines)


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    pairs = ",".join(f'{name}="{_escaped(value)}"' for name, value in labels.items())
    return "{" + pairs + "}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(value: float) -> str:
    if isinstance(value, bool | int):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)
