"""nsq_stat's text outputs, sans-IO: Go's plain layout, JSON lines, and the notices
(an nsqd failing or answering again, the topic or channel missing or found).

Go's layout, byte for byte as v1.3.0 prints it: two header lines on polls 0, 25, 50...,
then one row per poll but the first (a silent baseline), rates truncated toward zero:

    ------rate------+----------------depth----------------+--------------metadata---------------
    ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients
        120     118 |      35      35       0    12     0 |       3       0        48211       4

Without a channel (Go refuses that), each poll prints the topic's row then each
channel's, in the same columns, named at the end of the line (`topic`,
`topic/channel`); a topic has no in-flight, deferred, requeued, timed-out messages or
clients: `-` there.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from nsqtools.stats.counters import Counters, Rates
from nsqtools.stats.tracking import Failure, NodeRow, Report, Row

HEADER_EVERY = 25  # polls

HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n"
)
NAMED_HEADER = HEADER[:-1] + " name\n"

_ROW = "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}"
_NOT_A_TOPIC_COUNT = "-"


def plain_lines(report: Report) -> str:
    """What Go's layout prints for this poll (maybe nothing), as one string."""
    named = report.channel is None
    header = (NAMED_HEADER if named else HEADER) if report.poll % HEADER_EVERY == 0 else ""
    rows = [row for row in report.rows if row.rates is not None]
    if named:
        return header + "".join(f"{_columns(row)} {_name(report, row)}\n" for row in rows)
    return header + "".join(f"{_columns(row)}\n" for row in rows)


def _columns(row: Row) -> str:
    assert row.rates is not None  # a row without rates is a baseline: not printed
    counters = row.counters
    per_channel: tuple[int | str, ...] = (
        counters.in_flight_count,
        counters.deferred_count,
        counters.requeue_count,
        counters.timeout_count,
    )
    clients: int | str = counters.client_count
    if row.channel is None:
        per_channel = (_NOT_A_TOPIC_COUNT,) * len(per_channel)
        clients = _NOT_A_TOPIC_COUNT
    in_flight, deferred, requeued, timed_out = per_channel
    return _ROW.format(
        int(row.rates.ingress),  # Go's int64(): toward zero
        int(row.rates.egress),
        counters.depth,
        counters.memory_depth,
        counters.backend_depth,
        in_flight,
        deferred,
        requeued,
        timed_out,
        counters.message_count,
        clients,
    )


def _name(report: Report, row: Row) -> str:
    return report.topic if row.channel is None else f"{report.topic}/{row.channel}"


def json_record(report: Report) -> dict[str, Any]:
    """One poll as a JSON object: nsqd's names for the counters, rates per second over
    the measured interval (null until known), each nsqd's own counters under "nodes"."""
    return {
        "time": datetime.fromtimestamp(report.wall_time, UTC).isoformat(),
        "topic": report.topic,
        "channel": report.channel,
        "interval": report.elapsed,
        "found": report.found,
        "rows": [_row_record(row) for row in report.rows],
        "failures": [_failure_record(failure) for failure in report.failures],
    }


def json_line(report: Report) -> str:
    return json.dumps(json_record(report), separators=(",", ":")) + "\n"


def _row_record(row: Row) -> dict[str, Any]:
    return {
        "channel": row.channel,
        **_counters_record(row.counters),
        **_rates_record(row.rates),
        "e2e_processing_latency": [
            {"quantile": percentile.quantile, "value": percentile.value} for percentile in row.e2e
        ],
        "nodes": [_node_record(node) for node in row.nodes],
    }


def _node_record(node: NodeRow) -> dict[str, Any]:
    percentiles = node.e2e.percentiles if node.e2e else ()
    return {
        "address": node.address,
        **({} if node.partition is None else {"partition": node.partition}),
        **_counters_record(node.counters),
        **_rates_record(node.rates),
        "e2e_processing_latency": [
            {"quantile": percentile.quantile, "value": percentile.value}
            for percentile in percentiles
        ],
    }


def _counters_record(counters: Counters) -> dict[str, Any]:
    return {
        "depth": counters.depth,
        "memory_depth": counters.memory_depth,
        "backend_depth": counters.backend_depth,
        "in_flight_count": counters.in_flight_count,
        "deferred_count": counters.deferred_count,
        "requeue_count": counters.requeue_count,
        "timeout_count": counters.timeout_count,
        "message_count": counters.message_count,
        "client_count": counters.client_count,
        "paused": counters.paused,
    }


def _rates_record(rates: Rates | None) -> dict[str, float | None]:
    return {
        "ingress_rate": None if rates is None else rates.ingress,
        "egress_rate": None if rates is None else rates.egress,
    }


def _failure_record(failure: Failure) -> dict[str, str]:
    return {"server": failure.server, "address": failure.address, "error": failure.reason}


def notices(previous: Report | None, report: Report) -> list[str]:
    """What changed since the previous poll that the rows cannot say: a server that
    failed (or failed differently), one that answers again, the topic or channel
    missing or found. Said once, when it changes, not every poll."""
    before = {(f.server, f.address): f.reason for f in previous.failures} if previous else {}
    now = {(f.server, f.address): f.reason for f in report.failures}
    lines = [
        f"{server} {address}: {reason}"
        for (server, address), reason in now.items()
        if before.get((server, address)) != reason
    ]
    lines += [f"{server} {address} answers again" for server, address in before.keys() - now]
    what = _what(report)
    if not report.found and (previous is None or previous.found):
        lines.append(f"{what} not found on any nsqd that answered, polling again")
    elif report.found and previous is not None and not previous.found:
        lines.append(f"{what} found")
    return lines


def _what(report: Report) -> str:
    if report.channel is None:
        return f"topic({report.topic})"
    return f"channel({report.channel}) of topic({report.topic})"
