"""Our JsonFilter against Go's nsq_to_nsq v1.3.0 itself, between two real nsqds.

A corpus of bodies goes through Go's nsq_to_nsq, one process per option set: what
arrives at the destination topic must be exactly the bodies our filter publishes (as a
multiset: one message per body), the messages Go requeues must be those we requeue
(deferred by nsqd: go-nsq's first requeue delay is 90s), and Go's error log lines
must be ours.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter

import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.consumer import ConsumerOptions, open_consumer
from nsqtools.jsonfilter import Action, JsonFilter, Verdict
from nsqtools.testing import Nsqd, find_binary, wait_until
from tests.conftest import LocalNsq

TOPIC = "events"
CHANNEL = "nsq_to_nsq"  # Go's default channel

CORPUS: list[bytes] = [
    b'{"a":"x","b":1}',
    b'{"a":1000,"b":"y"}',
    b'{"a":1e3}',
    b'{"a":"1000"}',
    b'{"a":true,"b":null}',
    b'{"a":null}',
    b'{"a":[1,"x"]}',
    b'{"b":1}',
    b"{}",
    b"null",
    b"[1,2]",
    b'"a string"',
    b"42",
    b"true",
    b"not json",
    b'{"a":1,}',
    b'{"a":"x"} trailing',
    b'{"a":NaN}',
    b'{"a":"\x01"}',
    b"\xef\xbb\xbf{}",
    b'{"a":{"z":{"y":[1.5,{"x":-0.0}]},"b":[]},"b":{"c":1e21}}',
    b'{"a":12345678901234567890,"b":9007199254740993}',
    b'{"a":1e21,"b":1e-7}',
    b'{"a":-0.0,"b":0.000001}',
    b'{"a":9223372036854775808,"b":-9223372036854775808}',
    b'{"a":1e400}',
    b'{"b":[1e-400,5e-324,1.7976931348623157e308]}',
    b'{"a":0.1,"b":-2.5e-10}',
    b'{"a":"x","a":"dup","b":1,"b":2}',
    b'{"a":"\xc3\xa9\xf0\x9f\x98\x80","\xc3\xa9":"\\ud83d\\ude00"}',
    b'{"a":"\xff\xe2\x82","b":"\xed\xa0\x80\xc0\x80"}',
    b'{"a":"\\ud800","b":"\\udc00x\\ud800\\ud800\\udc00"}',
    b'{"\\ud800":1,"\\udc00":2,"b":{"\xff":1,"\\ud800":3}}',
    b'{"a":"<script>&amp;</script>","<":">"}',
    b'{"a":"\\u0000\\u001f\\b\\f\\n\\r\\t\\"\\\\\\/\x7f","b":"\\u007f"}',
    b'{"a":"\xe2\x80\xa8\\u2029"}',
    b' \t\r\n{"a" : "x" ,\n"b":1}\n',
    b'{"a":"x"}\xff',
    b"\xff\xfe",
    b'{"a":"x',
    b'{"a":' + b"[" * 5000 + b"]" * 5000 + b',"b":[1.0]}',  # deeper than Python's json goes
    b'{"a":' + b"[" * 10000 + b"]" * 10000 + b"}",  # one more than Go's limit
]

OPTION_SETS = {
    "whitelist": JsonFilter(whitelist=("a", "b", "\u00e9", "<", "\ufffd")),
    "require-field": JsonFilter(require_field="a"),
    "require-string": JsonFilter(require_field="a", require_value="x", whitelist=("b",)),
    "require-number": JsonFilter(require_field="a", require_value="1e3"),
}

# Where each of Go's log lines begins (log.LstdFlags).
_LOG_PREFIX = re.compile(rb"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ", re.MULTILINE)


def go_arguments(json_filter: JsonFilter) -> list[str]:
    arguments = [f"--whitelist-json-field={field}" for field in json_filter.whitelist]
    if json_filter.require_field:
        arguments.append(f"--require-json-field={json_filter.require_field}")
    if json_filter.require_value:
        arguments.append(f"--require-json-value={json_filter.require_value}")
    return arguments


def run_go(source: Nsqd, destination: Nsqd, json_filter: JsonFilter) -> list[str]:
    """Go's nsq_to_nsq until it has answered every message; returns its error lines."""
    process = subprocess.Popen(
        [
            str(find_binary("nsq_to_nsq")),
            f"--nsqd-tcp-address={source.tcp_address}",
            f"--destination-nsqd-tcp-address={destination.tcp_address}",
            f"--topic={TOPIC}",
            # No pause after a requeue: the same verdicts, sooner.
            "--consumer-opt=max_backoff_duration,0",
            *go_arguments(json_filter),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: all_answered(source), 15, "Go to answer every message")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr.decode(errors="replace")
    return error_lines(stderr)


def all_answered(source: Nsqd) -> bool:
    """Every message of the corpus FIN'd or requeued: Go FINs a published one only
    once the destination nsqd has acknowledged it."""
    try:
        stats = source.channel_stats(TOPIC, CHANNEL)
    except KeyError:
        return False
    return stats.message_count == len(CORPUS) and stats.depth == stats.in_flight_count == 0


def error_lines(stderr: bytes) -> list[str]:
    """Go's ERROR lines, without the timestamp; a body's bytes as our log shows them."""
    entries = (entry.removesuffix(b"\n") for entry in _LOG_PREFIX.split(stderr))
    return [entry.decode(errors="backslashreplace") for entry in entries if b"ERROR" in entry]


async def bodies_arrived(destination: Nsqd, channel: str) -> Counter[bytes]:
    count = destination.channel_stats(TOPIC, channel).depth
    arrived: Counter[bytes] = Counter()
    if count == 0:
        return arrived
    with trio.fail_after(15):
        async with open_consumer(
            TOPIC,
            channel,
            ClientConfig(),
            ConsumerOptions(nsqd_tcp_addresses=[destination.tcp_address]),
        ) as consumer:
            async for batch in consumer:
                arrived.update(batch.bodies)
                batch.finish()
                if arrived.total() == count:
                    break
    return arrived


def test_the_corpus_exercises_every_verdict() -> None:
    actions = {verdict.action for f in OPTION_SETS.values() for verdict in map(f.apply, CORPUS)}
    assert actions == set(Action)


@pytest.mark.parametrize("option_set", sorted(OPTION_SETS))
async def test_same_bodies_published_dropped_and_requeued_as_go(
    local_nsq: LocalNsq, option_set: str
) -> None:
    json_filter = OPTION_SETS[option_set]
    source, destination = local_nsq.nsqd("source"), local_nsq.nsqd("destination")
    destination.create_channels(TOPIC, "check")
    for body in CORPUS:  # one /pub each: bodies may hold newlines
        source.publish(TOPIC, body)

    go_errors = run_go(source, destination, json_filter)

    verdicts = [json_filter.apply(body) for body in CORPUS]
    assert await bodies_arrived(destination, "check") == published(verdicts)
    requeued = sum(verdict.action is Action.REQUEUE for verdict in verdicts)
    assert source.channel_stats(TOPIC, CHANNEL).deferred_count == requeued
    ours = [verdict.log.removesuffix("\n") for verdict in verdicts if verdict.log]
    assert Counter(go_errors) == Counter(ours)


def published(verdicts: list[Verdict]) -> Counter[bytes]:
    return Counter(verdict.body for verdict in verdicts if verdict.action is Action.PUBLISH)
