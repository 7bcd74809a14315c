"""nsq_to_nsq run as a user runs it: a source and a destination nsqd, exit status, logs.

Side by side with Go's nsq_to_nsq on the same messages and options: the same bodies at
the destination (JSON filters included).
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from nsqtools.testing import (
    LinkProxy,
    Nsqd,
    find_binary,
    holds_throughout,
    our_tool,
    running,
    wait_until,
)
from nsqtools.testing.faults.tap import MOST_NSQD_LOSES, NsqTap
from tests.conftest import DURABLE, LocalNsq

OURS = our_tool("nsq_to_nsq")
TOPIC = "source"


def go_tool() -> list[str]:
    return [str(find_binary("nsq_to_nsq"))]


def bodies(count: int) -> list[bytes]:
    return [b"%08d relayed" % index for index in range(count)]


def relay_with(
    tool: list[str], source: Nsqd | str, destination: Nsqd, channel: str, *args: str
) -> list[str]:
    """The relay's command line; `source`: an nsqd, or the TCP address to reach it by."""
    return [
        *tool,
        f"--nsqd-tcp-address={source if isinstance(source, str) else source.tcp_address}",
        f"--topic={TOPIC}",
        f"--channel={channel}",
        f"--destination-nsqd-tcp-address={destination.tcp_address}",
        *args,
    ]


def relay_until_drained(argv: list[str], source: Nsqd, channel: str, timeout: float = 30) -> str:
    """Run the relay until the source channel is drained; its stderr."""
    with running(argv) as tool:
        wait_until(lambda: source.drained(TOPIC, channel), timeout, f"{channel} drained")
    return tool.stderr


def both_relay(
    source: Nsqd, destination: Nsqd, messages: list[bytes], *args: str, expected: int
) -> dict[str, Counter[bytes]]:
    """Go's and ours relay the same messages (each to its own destination topic): what
    each destination topic got."""
    source.create_channels(TOPIC, "go", "ours")
    source.publish_many(TOPIC, messages)
    got = {}
    for name, tool in (("go", go_tool()), ("ours", OURS)):
        argv = relay_with(tool, source, destination, name, f"--destination-topic={name}", *args)
        relay_until_drained(argv, source, name)
        wait_until(lambda: topic_depth(destination, name) == expected, 10, f"{name} relayed")  # noqa: B023
        got[name] = Counter(destination.read(name, expected))
    return got


def topic_depth(nsqd: Nsqd, topic: str) -> int:
    try:
        return nsqd.topic_depth(topic)
    except KeyError:
        return 0


@pytest.fixture
def destination(local_nsq: LocalNsq) -> Nsqd:
    return local_nsq.nsqd("destination")


def test_relays_every_message_as_go(nsqd: Nsqd, destination: Nsqd) -> None:
    messages = bodies(2000)
    got = both_relay(nsqd, destination, messages, expected=len(messages))
    assert got["ours"] == got["go"] == Counter(messages)


def test_each_topic_goes_to_its_own_name_by_default(nsqd: Nsqd, destination: Nsqd) -> None:
    for topic in ("left", "right"):
        nsqd.publish_many(topic, [topic.encode()] * 10)
    argv = [
        *OURS,
        f"--nsqd-tcp-address={nsqd.tcp_address}",
        "--topic=left",
        "--topic=right",
        f"--destination-nsqd-tcp-address={destination.tcp_address}",
    ]
    with running(argv):
        for topic in ("left", "right"):
            wait_until(lambda: topic_depth(destination, topic) == 10, 20, topic)  # noqa: B023
    assert destination.read("left", 10) == [b"left"] * 10
    assert destination.read("right", 10) == [b"right"] * 10


JSON_BODIES = [
    b'{"kind": "a", "n": 1, "x": 1.5, "nested": {"f": 2.0}}',
    b'{"kind": "b", "n": "1", "big": 12345678901234567890, "html": "<a&b>"}',
    b'{"kind": "a", "n": 2.0, "tiny": 1e-7, "huge": 1e21, "uni": "caf\\u00e9 \xe2\x80\xa8"}',
    b'{"n": 1, "kind": "a", "kind": "c"}',
    b"not json",
    b"[1, 2]",
    b"null",
]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--whitelist-json-field=n", "--whitelist-json-field=big", "--whitelist-json-field=x"], 5),
        (["--require-json-field=kind", "--whitelist-json-field=kind"], 4),
        (["--require-json-field=n", "--require-json-value=1"], 3),  # null: requeued
        (["--require-json-field=kind", "--require-json-value=a"], 2),
    ],
)
def test_json_filters_as_go(
    nsqd: Nsqd, destination: Nsqd, options: list[str], expected: int
) -> None:
    got = both_relay(nsqd, destination, JSON_BODIES, *options, expected=expected)
    assert got["ours"] == got["go"]


def test_round_robin_spreads_over_the_destinations(nsqd: Nsqd, local_nsq: LocalNsq) -> None:
    destinations = [local_nsq.nsqd(f"destination-{index}") for index in range(2)]
    nsqd.publish_many(TOPIC, bodies(5000))
    argv = [
        *OURS,
        f"--nsqd-tcp-address={nsqd.tcp_address}",
        f"--topic={TOPIC}",
        "--mode=round-robin",
        "--max-in-flight=50",  # several batches, so both get some
        *(f"--destination-nsqd-tcp-address={d.tcp_address}" for d in destinations),
    ]
    relay_until_drained(argv, nsqd, "nsq_to_nsq")
    depths = [topic_depth(destination, TOPIC) for destination in destinations]
    assert sum(depths) == 5000
    assert min(depths) > 0


def test_status_lines_as_go_with_a_rate(nsqd: Nsqd, destination: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies(450))
    argv = relay_with(OURS, nsqd, destination, "status", "--status-every=200")
    stderr = relay_until_drained(argv, nsqd, "status")
    lines = [line for line in stderr.splitlines() if "[aggregate]" in line]
    assert len(lines) == 2, stderr  # at the 201st and the 401st
    for line in lines:
        assert line[:20].count("/") == 2  # Go's log date, then the line
        assert " [aggregate]: finished 200 - 99th: " in line
        assert line.endswith("/s")


def test_a_destination_killed_and_restarted_loses_nothing(
    nsqd: Nsqd, durable_nsq: LocalNsq
) -> None:
    """Every source message reaches the destination at least once, and the source FINs
    nothing the destination did not acknowledge (its channel drains only at the end)."""
    destination = durable_nsq.nsqd("destination", extra_args=DURABLE)
    messages = bodies(20_000)
    nsqd.publish_many(TOPIC, messages)
    argv = relay_with(OURS, nsqd, destination, "relay", "--max-in-flight=500")
    with running(argv):
        wait_until(lambda: topic_depth(destination, TOPIC) >= 5000, 60, "5000 relayed")
        destination.kill()
        destination.start()
        wait_until(lambda: nsqd.drained(TOPIC, "relay"), 120, "the source drained")
    assert destination.missing(TOPIC, set(messages)) == set()


def holds_a_full_window(nsqd: Nsqd, channel: str, window: int) -> bool:
    """The relay holds `window` messages unanswered: it waits on its destination."""
    return nsqd.channel_stats(TOPIC, channel).in_flight_count == window


def test_a_destination_on_a_slow_link_then_frozen_loses_nothing(
    nsqd: Nsqd, destination: Nsqd
) -> None:
    """Publishing through a 100 KB/s link (LinkProxy), then the destination frozen
    (SIGSTOP): nothing is acknowledged, so nothing is FIN'd and the source's window stays
    full; once thawed, everything arrives."""
    messages = bodies(20_000)  # 20k x ~26 B of MPUB: about 5 s at 100 KB/s
    nsqd.publish_many(TOPIC, messages)
    with LinkProxy(destination.tcp_address, upstream_rate=100_000) as proxy:
        argv = [
            *OURS,
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--topic={TOPIC}",
            "--channel=frozen",
            f"--destination-nsqd-tcp-address={proxy.address}",
            "--max-in-flight=100",
        ]
        with running(argv) as tool:
            wait_until(lambda: topic_depth(destination, TOPIC) >= 500, 30, "500 relayed")
            with destination.frozen():
                wait_until(lambda: holds_a_full_window(nsqd, "frozen", 100), 30, "a full window")
            wait_until(lambda: nsqd.drained(TOPIC, "frozen"), 120, "the source drained")
    assert destination.missing(TOPIC, set(messages)) == set()
    assert "Traceback" not in tool.stderr


def test_the_source_restarted_loses_nothing(durable_nsq: LocalNsq, destination: Nsqd) -> None:
    """The relay reconnects to a source nsqd that went away, and gets what it held in
    flight again. (A clean stop: a kill -9 loses nsqd's own in-flight messages, whatever
    the client; the destination's kill is tested above.) Through a tap: a message
    missing must be one nsqd never delivered, lost by nsqd as it stopped."""
    source = durable_nsq.nsqd("source", extra_args=DURABLE)
    messages = bodies(20_000)
    source.publish_many(TOPIC, messages)
    with NsqTap(source.tcp_address) as tap:
        argv = relay_with(OURS, tap.address, destination, "restarted", "--max-in-flight=500")
        with running(argv):
            wait_until(lambda: topic_depth(destination, TOPIC) >= 5000, 60, "5000 relayed")
            source.restart()
            wait_until(lambda: source.emptied(TOPIC, "restarted"), 120, "the source drained")
    lost_by_nsqd = tap.ledger.never_delivered(set(messages))
    assert destination.missing(TOPIC, set(messages)) <= lost_by_nsqd
    assert len(lost_by_nsqd) <= MOST_NSQD_LOSES


@pytest.mark.parametrize("dead_letters", [False, True], ids=["requeued", "dead-lettered"])
def test_a_message_too_big_for_the_destination_fails_alone(
    nsqd: Nsqd, local_nsq: LocalNsq, tmp_path: Path, dead_letters: bool
) -> None:
    """The destination refuses one message of 31 (over its --max-msg-size): each of the
    30 others reaches it exactly once and is FIN'd once; the refused one is kept as a
    dead letter (then FIN'd, exit 1 saying so), or, with none set, requeued alone with
    backoff and kept in nsqd (exit 0: nothing lost)."""
    small = local_nsq.nsqd("small", extra_args=["--max-msg-size=1024"])
    good, too_big = bodies(30), b"x" * 2000
    nsqd.create_channels(TOPIC, "big")
    nsqd.publish_many(TOPIC, [*good[:15], too_big, *good[15:]])
    dead = tmp_path / "dead.jsonl"
    options = [f"--dead-letter-file={dead}"] if dead_letters else []
    argv = relay_with(OURS, nsqd, small, "big", "--destination-topic=relayed", *options)

    def source_holds_only_the_refused_one() -> bool:
        stats = nsqd.channel_stats(TOPIC, "big")
        return (stats.depth, stats.in_flight_count, stats.deferred_count) == (0, 0, 1)

    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        if dead_letters:
            wait_until(lambda: nsqd.emptied(TOPIC, "big"), 30, "the source emptied")
        else:
            wait_until(source_holds_only_the_refused_one, 30, "the refused one requeued")
        wait_until(lambda: topic_depth(small, "relayed") == 30, 30, "30 relayed")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "Traceback" not in stderr
    assert small.stats(topic="relayed").topic("relayed").message_count == 30  # once each
    assert sorted(small.read("relayed", 30)) == good
    # Only the refused one was ever requeued at the source, and only when not kept.
    assert nsqd.channel_stats(TOPIC, "big").requeue_count == (0 if dead_letters else 1)
    if dead_letters:
        assert process.returncode == 1, stderr
        assert stderr.splitlines()[-1] == (
            f"nsq_to_nsq: error: 1 message was refused by the destination; it is in {dead}"
        )
        [envelope] = map(json.loads, dead.read_text().splitlines())
        assert envelope["body"] == too_big.decode()
        assert "E_BAD_MESSAGE" in envelope["reason"]
    else:
        assert process.returncode == 0, stderr
        assert "E_BAD_MESSAGE" in stderr


SOURCE = "--nsqd-tcp-address=127.0.0.1:1"
DESTINATION = "--destination-nsqd-tcp-address=127.0.0.1:2"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--channel=c", SOURCE, DESTINATION], "--topic and --channel are required"),
        (["--topic=t", SOURCE], "--destination-nsqd-tcp-address required"),
        (["--topic=bad topic", SOURCE, DESTINATION], "topic"),
        (["--topic=t", "--destination-topic=a/b", SOURCE, DESTINATION], "topic"),
        (["--topic=t", "--mode=random", SOURCE, DESTINATION], "--mode 'random' is unknown"),
        (["--topic=t", "--lookupd-http-address=127.0.0.1:1", SOURCE, DESTINATION], "both"),
    ],
)
def test_bad_options_stop_with_one_line(args: list[str], message: str) -> None:
    result = subprocess.run([*OURS, *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("nsq_to_nsq: error: ")
    assert message in result.stderr


def test_what_waits_on_a_destination_down_is_touched_not_sent_again(
    local_nsq: LocalNsq, destination: Nsqd
) -> None:
    """The destination down for four of the source's msg_timeouts (1 s): the relay holds
    the messages while it redials and TOUCHes them, so nsqd times none out and each
    arrives once when the destination is back (a3a5299: every one timed out and sent
    again, twice or more each)."""
    source = local_nsq.nsqd("source", extra_args=["--msg-timeout=1s"])
    argv = relay_with(OURS, source, destination, "touched")
    source.publish(TOPIC, b"first")
    with running(argv):
        wait_until(lambda: topic_depth(destination, TOPIC) == 1, 30, "the first relayed")
        destination.stop()
        messages = bodies(10)
        source.publish_many(TOPIC, messages)
        wait_until(lambda: holds_a_full_window(source, "touched", 10), 30, "10 held")
        # The fault: the destination down for 4 s.
        holds_throughout(
            lambda: source.channel_stats(TOPIC, "touched").timeout_count == 0, 4.0, "no timeout"
        )
        destination.start()
        wait_until(lambda: source.drained(TOPIC, "touched"), 60, "the source drained")
    assert source.channel_stats(TOPIC, "touched").timeout_count == 0
    assert Counter(destination.read(TOPIC, 11)) == Counter([b"first", *messages])
    assert topic_depth(destination, TOPIC) == 0
