"""`nsq pub TOPIC [BODY]` run as a user runs it, against real nsqds: a body template
published --count times, the topic as an argument, and `nsq pub --topic` still to_nsq.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from nsqtools.testing import Nsqd, our_tool, wait_until
from tests.conftest import Cluster

NSQ = our_tool("nsq")


def nsq_pub(*args: str, input: bytes = b"") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NSQ, "pub", *args], input=input.decode(), capture_output=True, text=True, timeout=60
    )


def test_a_template_published_count_times_in_order(nsqd: Nsqd) -> None:
    template = '{{"n": {seq:03d}, "of": {count}, "topic": "{topic}", "id": "{id}", "at": "{ts}"}}'
    address = f"--nsqd-tcp-address={nsqd.tcp_address}"
    result = nsq_pub(address, "--count=100", "made", template)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    bodies = [body.decode() for body in nsqd.read("made", 100)]
    assert [body[:9] for body in bodies] == [f'{{"n": {seq:03d}' for seq in range(1, 101)]
    assert all(', "of": 100, "topic": "made", "id": "' in body for body in bodies)
    ids = {re.findall(r'"id": "([0-9a-f]{32})"', body)[0] for body in bodies}
    assert len(ids) == 100  # a random id each
    stamps = [re.findall(r'"at": "(\d{4}-\d\d-\d\dT[\d:.]+Z)"', body)[0] for body in bodies]
    assert stamps == sorted(stamps)
    assert nsqd.topic_depth("made") == 0  # exactly 100


def test_a_body_without_fields_once_by_default(nsqd: Nsqd) -> None:
    result = nsq_pub(f"--nsqd-tcp-address={nsqd.tcp_address}", "once", "hello world")
    assert result.returncode == 0, result.stderr
    assert nsqd.read("once", 1) == [b"hello world"]
    assert nsqd.topic_depth("once") == 0


def test_every_body_goes_to_every_nsqd(cluster2: Cluster) -> None:
    addresses = [f"--nsqd-tcp-address={nsqd.tcp_address}" for nsqd in cluster2.nsqds]
    result = nsq_pub(*addresses, "--count=5", "--rate=1000", "fan", "m{seq}")
    assert result.returncode == 0, result.stderr
    for nsqd in cluster2.nsqds:
        assert nsqd.read("fan", 5) == [b"m1", b"m2", b"m3", b"m4", b"m5"]


def test_flags_may_follow_the_topic_and_body_as_with_nats_pub(nsqd: Nsqd) -> None:
    address = nsqd.tcp_address
    result = nsq_pub("after", "m{seq}", "--count", "2", f"-nsqd-tcp-address={address}")
    assert result.returncode == 0, result.stderr
    assert nsqd.read("after", 2) == [b"m1", b"m2"]
    dashed = nsq_pub("after", "--nsqd-tcp-address", address, "--", "-5")
    assert dashed.returncode == 0, dashed.stderr
    assert nsqd.read("after", 1) == [b"-5"]  # after --, an argument whatever it looks like
    assert nsqd.topic_depth("after") == 0
    unknown = nsq_pub("after", "-5", f"--nsqd-tcp-address={address}")
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "nsq: error: flag provided but not defined: -5 (see -help)\n",
    )


def test_the_topic_alone_reads_stdin_as_to_nsq(nsqd: Nsqd) -> None:
    result = nsq_pub(f"--nsqd-tcp-address={nsqd.tcp_address}", "lines", input=b"a\nb\n")
    assert result.returncode == 0, result.stderr
    assert nsqd.read("lines", 2) == [b"a", b"b"]


def test_with_topic_the_arguments_are_files_as_in_to_nsq(nsqd: Nsqd, tmp_path: Path) -> None:
    records = tmp_path / "records.txt"
    records.write_bytes(b"from a file\n")
    address = f"--nsqd-tcp-address={nsqd.tcp_address}"
    assert nsq_pub(address, "--topic=files", str(records)).returncode == 0
    assert nsqd.read("files", 1) == [b"from a file"]
    missing = nsq_pub(address, "--topic=files", "hello")
    assert missing.returncode == 2
    assert (
        missing.stderr
        == "nsq: error: Invalid value for '[FILES]...': File 'hello' does not exist.\n"
    )


def test_what_an_nsqd_did_not_acknowledge_is_in_the_failed_file(nsqd: Nsqd, tmp_path: Path) -> None:
    failed = tmp_path / "failed.txt"
    result = nsq_pub(
        f"--nsqd-tcp-address={nsqd.tcp_address}", "--nsqd-tcp-address=127.0.0.1:1",
        f"--failed-file={failed}", "--count=3", "half", "r{seq}",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith("nsq: error: 3 of 3 records were not published to every")
    assert failed.read_bytes() == b"r1\nr2\nr3\n"
    assert nsqd.topic_depth("half") == 3  # the live nsqd still has them


def test_a_signal_stops_the_count_and_says_how_far_it_got(nsqd: Nsqd) -> None:
    argv = [*NSQ, "pub", f"--nsqd-tcp-address={nsqd.tcp_address}", "--rate=200"]
    process = subprocess.Popen(
        [*argv, "--count=1000000", "stopped", "{seq}"], stderr=subprocess.PIPE, text=True
    )
    wait_until(lambda: depth_or_zero(nsqd, "stopped") >= 100, 30, "100 published")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    published = nsqd.topic_depth("stopped")
    assert f"INFO: interrupted: {published} of 1000000 published" in stderr
    assert nsqd.read("stopped", published)[-1] == b"%d" % published  # none skipped


def depth_or_zero(nsqd: Nsqd, topic: str) -> int:
    try:
        return nsqd.topic_depth(topic)
    except KeyError:  # not created yet
        return 0


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 1, "a TOPIC is required: nsq pub TOPIC [BODY]"),
        (["t", "a", "b"], 1, "nsq pub takes a TOPIC and at most one BODY"),
        (["--count=2", "t"], 1, "--count needs a BODY"),
        (["--count=2", "--topic=t"], 1, "--count needs a BODY"),
        (["--count=0", "t", "x"], 2, "--count"),
        (["t", '{"n": {seq}}'], 1, 'unknown template field {"n"}'),
        (["t", "{seq"], 1, "BODY: invalid template '{seq'"),
        (["t", "{ts:d}"], 1, "Unknown format code 'd'"),
        (["t", ""], 1, "BODY is empty"),
        (["bad topic", "x"], 1, "invalid topic name"),
    ],
)
def test_bad_input_is_one_line(args: list[str], code: int, message: str) -> None:
    result = nsq_pub("--nsqd-tcp-address=127.0.0.1:1", *args)
    lines = result.stderr.splitlines()
    assert result.returncode == code, lines
    assert len(lines) == 1 and lines[0].startswith("nsq: error: "), lines
    assert message in lines[0]


def test_to_nsq_takes_no_topic_argument() -> None:
    """A forgotten --topic stays an error, not a topic named after a file."""
    result = subprocess.run(
        [*our_tool("to_nsq"), "--nsqd-tcp-address=127.0.0.1:1", "-"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (1, "to_nsq: error: --topic required\n")
