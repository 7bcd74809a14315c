"""nsq_tail --peek: print N messages of a durable channel and give them all back.

Against real nsqd: what is printed, then nsqd's /stats (channel depth back to every
message, requeue_count N, nothing FIN'd), the attempts a second read shows, the
refusals, and a stop at any moment (SIGINT: requeued at once; SIGKILL: back after
msg_timeout, never FIN'd).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from nsqtools.testing import Nsqd, our_tool, wait_until
from tests.conftest import LocalNsq

TAIL = our_tool("nsq_tail")
TOPIC = "peeked"
TIMEOUT = 60


def tail(nsqd: Nsqd, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*TAIL, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", *args],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


def start_tail(nsqd: Nsqd, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*TAIL, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def all_back(nsqd: Nsqd, channel: str, count: int) -> bool:
    """Every one of `count` messages is back in the channel: none in flight, none FIN'd."""
    stats = nsqd.channel_stats(TOPIC, channel)
    return stats.depth == count and stats.in_flight_count == 0


def test_peek_prints_n_and_gives_them_back_with_one_more_attempt(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, [b"%d" % index for index in range(10)])
    result = tail(nsqd, "--channel=look", "--peek", "-n", "4", "--format=json")
    assert result.returncode == 0, result.stderr
    peeked = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["body"], e["attempts"]) for e in peeked] == [(str(i), 1) for i in range(4)]
    last = result.stderr.decode().splitlines()[-1]
    assert last.startswith("nsq_tail: gave back 4 messages"), last
    assert "attempts" in last
    # Requeued at once (REQ 0): back long before nsqd's msg_timeout (60s).
    wait_until(lambda: all_back(nsqd, "look", 10), 10, "the 4 given back")
    stats = nsqd.channel_stats(TOPIC, "look")
    assert (stats.message_count, stats.requeue_count, stats.timeout_count) == (10, 4, 0)
    again = tail(nsqd, "--channel=look", "-n", "10", "--format={attempts} {body}")
    assert sorted(again.stdout.splitlines()) == sorted(
        [b"2 %d" % i for i in range(4)] + [b"1 %d" % i for i in range(4, 10)]
    )


def test_peek_at_the_end_prints_fewer_and_exits_0(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, [b"a", b"b", b"c"])
    result = tail(nsqd, "--channel=few", "--peek", "-n", "10", "--exit-at-end")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"a\nb\nc\n"
    assert b"gave back 3 messages" in result.stderr
    wait_until(lambda: all_back(nsqd, "few", 3), 10, "the 3 given back")
    assert nsqd.channel_stats(TOPIC, "few").requeue_count == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--channel=durable"], "--peek needs -n N (N >= 1)"),
        (["--channel=durable", "-n", "0"], "--peek needs -n N (N >= 1)"),
        (["-n", "3"], "--peek needs a durable --channel"),
        (["--channel=gone#ephemeral", "-n", "3"], "an ephemeral channel is deleted"),
    ],
)
def test_peek_refuses_without_n_or_a_durable_channel(args: list[str], message: str) -> None:
    result = subprocess.run(
        [*TAIL, "--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--peek", *args],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1, lines
    assert len(lines) == 1 and lines[0].startswith("nsq_tail: error: "), lines
    assert message in lines[0]


def test_sigint_while_peeking_gives_everything_back(nsqd: Nsqd) -> None:
    """Waiting for a 6th message that does not come: SIGINT, and the 5 go back at once."""
    nsqd.publish_many(TOPIC, [b"%d" % index for index in range(5)])
    process = start_tail(nsqd, "--channel=sigint", "--peek", "-n", "6")
    assert process.stdout is not None
    printed = [process.stdout.readline() for _ in range(5)]
    assert all(printed)
    wait_until(lambda: nsqd.channel_stats(TOPIC, "sigint").in_flight_count == 5, 10, "held")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 0, stderr
    assert b"gave back 5 messages" in stderr
    wait_until(lambda: all_back(nsqd, "sigint", 5), 10, "the 5 given back")
    stats = nsqd.channel_stats(TOPIC, "sigint")
    assert (stats.requeue_count, stats.timeout_count) == (5, 0)


@pytest.fixture
def short_timeout_nsqd(local_nsq: LocalNsq) -> Nsqd:
    """msg_timeout 1s: what is held and not TOUCHed comes back within seconds."""
    return local_nsq.nsqd("short", extra_args=["--msg-timeout=1s"])


def test_held_messages_are_touched_then_a_kill_finishes_none(short_timeout_nsqd: Nsqd) -> None:
    """A peek waiting past msg_timeout keeps what it printed (TOUCH), so nsqd sends none
    of it again; SIGKILL then, and nsqd takes everything back after msg_timeout: none
    FIN'd."""
    nsqd = short_timeout_nsqd
    nsqd.publish_many(TOPIC, [b"%d" % index for index in range(3)])
    process = start_tail(nsqd, "--channel=held", "--peek", "-n", "4")
    assert process.stdout is not None
    printed = [process.stdout.readline() for _ in range(3)]
    assert all(printed)
    time.sleep(3)  # three msg_timeouts: not a synchronisation, the time held is the test
    stats = nsqd.channel_stats(TOPIC, "held")
    assert (stats.in_flight_count, stats.timeout_count) == (3, 0)
    process.kill()
    process.wait()
    wait_until(lambda: all_back(nsqd, "held", 3), 10, "the 3 timed out")
    stats = nsqd.channel_stats(TOPIC, "held")
    assert (stats.message_count, stats.timeout_count) == (3, 3)
