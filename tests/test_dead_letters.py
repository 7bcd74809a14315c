"""Messages given up are never silent: every consuming tool, as a user runs it.

A message that has been delivered many times is still output (max_attempts is 0 by
default: never give up). Past a max_attempts the user set, it goes to the dead letters
(--dead-letter-file: appended, synced; --dead-letter-topic: published, acknowledged)
before its FIN, or, with neither, in full in a warning; and the run ends with exit
status 1 and a line that counts it. Real nsqd; a message's attempts are raised first
by requeueing it with our consumer.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.consumer import ConsumerOptions, open_consumer
from nsqtools.testing import Nsqd, our_tool, wait_until
from nsqtools.testing.webserver import WebServer
from tests.conftest import LocalNsq

TOPIC = "letters"
CHANNEL = "tool"
DEADLINE = 20.0


def delivered_before(nsqd: Nsqd, body: bytes, times: int) -> None:
    """Publish body and have it delivered (and requeued) `times` times on CHANNEL: its
    next delivery is attempt times + 1."""
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish(TOPIC, body)

    async def requeue() -> None:
        config = ClientConfig(max_in_flight=1, max_attempts=0)  # never give it up
        address = [nsqd.tcp_address]
        async with open_consumer(
            TOPIC, CHANNEL, config, ConsumerOptions(nsqd_tcp_addresses=address)
        ) as consumer:
            with trio.fail_after(DEADLINE):
                async for batch in consumer:
                    if batch.messages[0].attempts == times:
                        break  # requeued by the consumer's stop, once RDY is 0
                    batch.requeue(delay=0, backoff=False)

    trio.run(requeue)


# Each tool's command line, but for the dead-letter and consumer options.
ToolArgs = Callable[[Nsqd, Path], list[str]]


def tail(nsqd: Nsqd, tmp_path: Path) -> list[str]:
    return [*our_tool("nsq_tail"), f"--channel={CHANNEL}"]


def to_file(nsqd: Nsqd, tmp_path: Path) -> list[str]:
    return [
        *our_tool("nsq_to_file"), f"--channel={CHANNEL}", f"--output-dir={tmp_path / 'out'}",
        "--sync-interval=100ms",  # one message does not starve it: synced on the tick
    ]  # fmt: skip


@pytest.fixture
def tools(local_nsq: LocalNsq) -> Iterator[dict[str, ToolArgs]]:
    destination = local_nsq.nsqd("destination")
    with WebServer() as web:

        def to_nsq(nsqd: Nsqd, tmp_path: Path) -> list[str]:
            return [
                *our_tool("nsq_to_nsq"), f"--channel={CHANNEL}",
                f"--destination-nsqd-tcp-address={destination.tcp_address}",
            ]  # fmt: skip

        def to_http(nsqd: Nsqd, tmp_path: Path) -> list[str]:
            return [*our_tool("nsq_to_http"), f"--channel={CHANNEL}", f"--post={web.url}/in"]

        yield {
            "nsq_tail": tail,
            "nsq_to_file": to_file,
            "nsq_to_nsq": to_nsq,
            "nsq_to_http": to_http,
        }


def run_until_drained(argv: list[str], nsqd: Nsqd) -> subprocess.CompletedProcess[str]:
    """Run the tool until the channel holds nothing more, then SIGTERM it."""
    process = subprocess.Popen(
        [*argv, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: nsqd.emptied(TOPIC, CHANNEL), DEADLINE, "the channel emptied")
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.splitlines()[-1]


def test_a_message_delivered_many_times_is_archived_not_given_up(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    """go-nsq gives a message up on its 6th delivery and FINs it unwritten; ours never
    gives up unless asked to (the message here is on its 7th delivery)."""
    delivered_before(nsqd, b"survivor", 6)
    result = run_until_drained(to_file(nsqd, tmp_path), nsqd)
    assert result.returncode == 0, result.stderr
    [archive] = (path for path in (tmp_path / "out").iterdir() if path.is_file())
    assert archive.read_bytes() == b"survivor\n"


@pytest.mark.parametrize("tool", ["nsq_tail", "nsq_to_file", "nsq_to_nsq", "nsq_to_http"])
def test_past_max_attempts_a_message_goes_to_the_dead_letter_file_then_is_fin_d(
    nsqd: Nsqd, tmp_path: Path, tools: dict[str, ToolArgs], tool: str
) -> None:
    delivered_before(nsqd, "poisön".encode(), 3)
    dead = tmp_path / "dead.jsonl"
    dead.write_text('{"from": "an earlier run"}\n')  # appended to, never truncated
    argv = [
        *tools[tool](nsqd, tmp_path), f"--dead-letter-file={dead}",
        "--consumer-opt=max_attempts,3",
    ]  # fmt: skip
    result = run_until_drained(argv, nsqd)
    assert result.returncode == 1, result.stderr
    assert last_line(result.stderr) == (
        f"{tool}: error: 1 message was given up after max_attempts; it is in {dead}"
    )
    earlier, line = dead.read_text().splitlines()
    assert earlier == '{"from": "an earlier run"}'
    envelope = json.loads(line)
    assert list(envelope) == [
        "id", "timestamp", "timestamp_ns", "attempts", "topic", "channel", "nsqd", "body",
        "encoding", "reason",
    ]  # fmt: skip
    assert envelope["body"] == "poisön" and envelope["encoding"] == "utf-8"
    assert (envelope["topic"], envelope["channel"], envelope["attempts"]) == (TOPIC, CHANNEL, 4)
    assert envelope["nsqd"] == nsqd.tcp_address
    assert envelope["reason"] == "past max_attempts (3)"
    assert nsqd.channel_stats(TOPIC, CHANNEL).requeue_count == 3  # FIN'd, not requeued


def test_without_a_destination_a_message_given_up_is_in_full_on_stderr(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    delivered_before(nsqd, b"\xff binary", 2)
    argv = [*to_file(nsqd, tmp_path), "--consumer-opt=max_attempts,2"]
    result = run_until_drained(argv, nsqd)
    assert result.returncode == 1, result.stderr
    assert last_line(result.stderr) == (
        "nsq_to_file: error: 1 message was given up after max_attempts; "
        "it is in the warnings on stderr"
    )
    [warning] = [line for line in result.stderr.splitlines() if "giving up" in line]
    envelope = json.loads(warning[warning.index("{") :])
    assert envelope["encoding"] == "base64"
    assert base64.b64decode(envelope["body"]) == b"\xff binary"
    assert envelope["reason"] == "past max_attempts (2)"


def test_a_dead_letter_topic_gets_the_envelope_on_the_nsqd_that_delivered_it(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    delivered_before(nsqd, b"poison", 1)
    argv = [*tail(nsqd, tmp_path), "--dead-letter-topic=dead", "--consumer-opt=max_attempts,1"]
    result = run_until_drained(argv, nsqd)
    assert result.returncode == 1, result.stderr
    assert last_line(result.stderr) == (
        "nsq_tail: error: 1 message was given up after max_attempts; "
        "it is in topic dead on the nsqd that delivered each"
    )
    [published] = nsqd.read("dead", 1)
    envelope = json.loads(published)
    assert (envelope["body"], envelope["reason"]) == ("poison", "past max_attempts (1)")


def test_a_dead_letter_file_that_cannot_be_opened_stops_at_start(
    nsqd: Nsqd, tmp_path: Path
) -> None:
    dead = tmp_path / "no such dir" / "dead.jsonl"
    nsqd.publish(TOPIC, b"kept")
    argv = [*to_file(nsqd, tmp_path), f"--dead-letter-file={dead}"]
    result = subprocess.run(
        [*argv, f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert result.returncode == 1
    assert last_line(result.stderr) == f"nsq_to_file: error: {dead}: no such file or directory"
