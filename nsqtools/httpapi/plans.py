"""Plans: what to ask several servers at once, and what their answers mean, written once
for every way of sending (sans-IO).

A Plan is a generator that yields a CallBatch (Calls to send at once), is sent back each
Call's typed answer or HttpApiError in the Calls' order, and returns what it makes of
them; it may ask several batches in turn, and a plan built of plans asks theirs with
`yield from`. Who runs it owns the exchange: nsqtools.discovery.run_plan on trio and
httpx, nsqtools.httpapi.blocking.BlockingClient.run on threads.

    def producers(lookupds: Sequence[str], topic: str) -> Plan[list[NsqdNode]]:
        results = yield from each([lookupd.lookup(address, topic) for address in lookupds])
        return [node for result in results if not isinstance(result, HttpApiError)
                for node in result]
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nsqtools.httpapi.call import Call, HttpApiError

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class CallBatch:
    """Calls to send at once; `timeout_option` names the setting of their timeout in
    the message of one that times out."""

    calls: Sequence[Call[Any]]
    timeout_option: str = ""


# Yields batches, is sent each batch's results, returns R.
Plan = Generator[CallBatch, list[Any], R]


def each(calls: Sequence[Call[T]], *, timeout_option: str = "") -> Plan[list[T | HttpApiError]]:
    """In a plan: every call sent at once; each one's answer or failure, in order."""
    results = yield CallBatch(calls, timeout_option)
    return results
