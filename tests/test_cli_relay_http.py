"""nsq_to_http run as a user runs it: a real nsqd, local HTTP servers that record and
fail on demand (nsqtools.testing.webserver), exit status, logs.

Side by side with Go's nsq_to_http: the same requests on the wire (User-Agent aside).
Failures (500, 429 with Retry-After, a reset, an answer too slow, a refused connect)
requeue the message and lose nothing.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nsqtools.testing import Nsqd, find_binary, holds_throughout, our_tool, running, wait_until
from nsqtools.testing.faults.tap import MOST_NSQD_LOSES, NsqTap
from nsqtools.testing.webserver import Answer, ReceivedRequest, WebServer
from tests.conftest import DURABLE, LocalNsq

OURS = our_tool("nsq_to_http")
TOPIC = "web"


@pytest.fixture
def server() -> Iterator[WebServer]:
    with WebServer() as web:
        yield web


def bodies(count: int) -> list[bytes]:
    return [b"%06d message" % index for index in range(count)]


def relay_argv(tool: list[str], nsqd: Nsqd, channel: str, *args: str) -> list[str]:
    return [
        *tool,
        f"--nsqd-tcp-address={nsqd.tcp_address}",
        f"--topic={TOPIC}",
        f"--channel={channel}",
        *args,
    ]


def relay_until_drained(argv: list[str], nsqd: Nsqd, channel: str, timeout: float = 30) -> str:
    """Run until the channel is drained (every message FIN'd); the tool's stderr."""
    with running(argv) as tool:
        wait_until(lambda: nsqd.drained(TOPIC, channel), timeout, f"{channel} drained")
    return tool.stderr


def posted(requests: list[ReceivedRequest]) -> Counter[bytes]:
    return Counter(request.body for request in requests)


def test_posts_every_message_and_fins_it(nsqd: Nsqd, server: WebServer) -> None:
    messages = bodies(500)
    nsqd.publish_many(TOPIC, messages)
    argv = relay_argv(OURS, nsqd, "post", f"--post={server.url}/in")
    stderr = relay_until_drained(argv, nsqd, "post")
    assert posted(server.received) == Counter(messages)
    # Kept alive: -n requests at once, and a dial that lost to a connection freed first
    # is kept idle (as Go's http.Transport), so fewer than 2 x -n, not one per message.
    assert server.connections < 200
    assert "[summary]: 500 sent, 0 requeued after a failed request, 0 sampled out" in stderr


def test_a_burst_of_dials_against_a_small_accept_backlog_is_not_waited_out(nsqd: Nsqd) -> None:
    """The -n 100 senders start at once, each with no connection to take, so each dials;
    with a backlog of 5, dials wait on the server (SYNs dropped, sent again after a
    second). A request takes whichever comes first, a connection another one is done
    with or its own dial's: none waits out a timeout, none is requeued, none posted
    twice. (Tied to its dial, requests timed out: 500 messages took minutes.)"""
    messages = bodies(500)
    nsqd.publish_many(TOPIC, messages)
    with WebServer(backlog=5) as server:
        argv = relay_argv(OURS, nsqd, "burst", f"--post={server.url}/in")
        stderr = relay_until_drained(argv, nsqd, "burst")
    assert posted(server.received) == Counter(messages)
    assert "[summary]: 500 sent, 0 requeued after a failed request" in stderr


def normalised(request: ReceivedRequest) -> bytes:
    return re.sub(rb"User-Agent: nsq_to_http v[^\r]*", b"User-Agent: -", request.raw)


@pytest.mark.parametrize(
    "options",
    [
        ["--post={url}/in?x=1", "--header=X-Trace: abc", "--content-type=application/json"],
        ["--get={url}/in?data=%s", "--header=Authorization: Bearer t"],
    ],
)
def test_requests_on_the_wire_as_go(nsqd: Nsqd, server: WebServer, options: list[str]) -> None:
    messages = [b"a b&c=d/\xc3\xa9", b'{"json": [1, 2]}', b"plain"]
    nsqd.create_channels(TOPIC, "go", "ours")
    nsqd.publish_many(TOPIC, messages)
    given = [option.replace("{url}", server.url) for option in options]
    sent = {}
    for name, tool in (("go", [str(find_binary("nsq_to_http"))]), ("ours", OURS)):
        before = len(server.received)
        relay_until_drained(relay_argv(tool, nsqd, name, *given), nsqd, name)
        sent[name] = sorted(normalised(request) for request in server.received[before:])
    assert sent["ours"] == sent["go"]
    assert len(sent["ours"]) == len(messages)


@pytest.mark.parametrize(
    "failure",
    [
        Answer(status=500),
        Answer(status=503),
        Answer(reset=True),
        Answer(raw=b"this is no HTTP\r\n\r\n"),
        Answer(content_length=100, body=b"short"),
    ],
    ids=["500", "503", "reset", "not-http", "short-body"],
)
def test_a_failed_request_requeues_and_nothing_is_lost(
    nsqd: Nsqd, server: WebServer, failure: Answer
) -> None:
    messages = bodies(50)
    nsqd.publish_many(TOPIC, messages)
    server.script(*[failure] * 5)
    retry_fast = ["--consumer-opt=default_requeue_delay,0", "--consumer-opt=backoff_multiplier,0"]
    timeout = "--http-client-request-timeout=1s"  # a short body: waited for until then
    argv = relay_argv(OURS, nsqd, "fail", f"--post={server.url}/in", timeout, *retry_fast)
    stderr = relay_until_drained(argv, nsqd, "fail")
    accepted = [request for request in server.received[5:]]
    assert set(posted(accepted)) == set(messages)  # each at least once, after the failures
    assert "requeued" in stderr
    assert "Traceback" not in stderr


def peak_memory(pid: int) -> int:
    """The most memory (resident, bytes) the process has held so far: VmHWM."""
    status = Path(f"/proc/{pid}/status").read_text()
    (kilobytes,) = re.findall(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    return int(kilobytes) * 1024


def test_huge_answers_cost_bounded_memory(nsqd: Nsqd, server: WebServer) -> None:
    """An endpoint answering 300 MB bodies: each is read to its end and dropped (the
    connection stays alive), and the relay's memory stays near its usual size: 33 MB
    measured (reading whole answers, it peaked at 1.1 GB)."""
    nsqd.publish_many(TOPIC, bodies(2))
    server.script(*[Answer(filler=300_000_000)] * 2)
    argv = relay_argv(OURS, nsqd, "huge", f"--post={server.url}/in")
    with running(argv) as tool:
        wait_until(lambda: nsqd.drained(TOPIC, "huge"), 60, "huge drained")
        peak = peak_memory(tool.process.pid)
    assert peak < 100_000_000, f"{peak:,} bytes"
    assert "[summary]: 2 sent, 0 requeued" in tool.stderr


def test_an_answer_slower_than_the_request_timeout_is_a_failure(
    nsqd: Nsqd, server: WebServer
) -> None:
    held = threading.Event()
    nsqd.publish(TOPIC, b"slow")
    server.script(Answer(hold=held))
    argv = relay_argv(
        OURS,
        nsqd,
        "slow",
        f"--post={server.url}/in",
        "--http-client-request-timeout=200ms",
        "--consumer-opt=default_requeue_delay,0",
    )
    try:
        stderr = relay_until_drained(argv, nsqd, "slow")
    finally:
        held.set()
    assert [request.body for request in server.received] == [b"slow", b"slow"]
    assert "no complete answer within 200ms" in stderr


def test_retry_after_defers_the_message_for_that_long(nsqd: Nsqd, server: WebServer) -> None:
    nsqd.publish(TOPIC, b"later")
    server.script(Answer(status=429, headers=(("Retry-After", "30"),)))
    argv = relay_argv(OURS, nsqd, "later", f"--post={server.url}/in")
    with running(argv) as tool:
        server.wait_for_requests(1)

        def deferred() -> bool:
            return nsqd.channel_stats(TOPIC, "later").deferred_count == 1

        wait_until(deferred, 10, "the message deferred")
        assert len(server.received) == 1  # not sent again before the 30 s
    assert "requeued for 30s (Retry-After)" in tool.stderr


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("method", ["get", "post"])
def test_redirects_followed_where_the_message_arrives_whole(
    nsqd: Nsqd, server: WebServer, method: str, status: int
) -> None:
    """A GET follows any redirect (the message is in its URL), a POST a 307 or 308 (body
    kept): the message is FIN'd once the new address took it. A POST answered 301 or
    302 is requeued, not resent as a GET without its body (Go's, which loses it), and
    the redirect is logged once, not at every attempt."""
    with WebServer() as moved:
        nsqd.publish(TOPIC, b"one")
        location = f"{moved.url}/moved?d=one"
        server.default = Answer(status=status, headers=(("Location", location),))
        option = f"--get={server.url}/in?d=%s" if method == "get" else f"--post={server.url}/in"
        retry_fast = "--consumer-opt=default_requeue_delay,0"
        argv = relay_argv(OURS, nsqd, method, option, retry_fast)
        followed = method == "get" or status in (307, 308)
        if followed:
            stderr = relay_until_drained(argv, nsqd, method)
            (request,) = moved.received
            expected = b"GET /moved?d=one" if method == "get" else b"POST /moved?d=one"
            assert request.request_line == expected + b" HTTP/1.1"
            assert request.body == (b"" if method == "get" else b"one")
            assert f"got status code {status} to {moved.url}/moved?...: followed" in stderr
        else:
            with running(argv) as tool:
                server.wait_for_requests(3)  # sent, redirected, requeued, sent again...
            assert moved.received == []
            assert not nsqd.drained(TOPIC, method)
            why = f"got status code {status} to {moved.url}/moved?...: not followed"
            assert tool.stderr.count(why) == 1, tool.stderr


def test_a_redirect_loop_is_a_failure_after_ten(nsqd: Nsqd, server: WebServer) -> None:
    nsqd.publish(TOPIC, b"loop")
    server.default = Answer(status=307, headers=(("Location", "/in"),))
    retry_fast = "--consumer-opt=default_requeue_delay,0"
    with running(relay_argv(OURS, nsqd, "loop", f"--post={server.url}/in", retry_fast)) as tool:
        server.wait_for_requests(2 * 11)  # twice: the request and 10 redirects
    assert "stopped after 10 redirects: 1 requeued" in tool.stderr
    assert tool.stderr.count("got status code 307") == 1  # the redirect, logged once


def test_get_succeeds_on_200_only_post_on_any_2xx(nsqd: Nsqd, server: WebServer) -> None:
    nsqd.create_channels(TOPIC, "get", "post")
    nsqd.publish(TOPIC, b"one")
    retry_fast = "--consumer-opt=default_requeue_delay,0"
    server.script(Answer(status=201))
    relay_until_drained(relay_argv(OURS, nsqd, "post", f"--post={server.url}/"), nsqd, "post")
    assert len(server.received) == 1
    server.script(Answer(status=201))
    get = relay_argv(OURS, nsqd, "get", f"--get={server.url}/?d=%s", retry_fast)
    relay_until_drained(get, nsqd, "get")
    assert len(server.received) == 3  # the GET answered 201 was sent again


def test_sample_zero_fins_everything_unsent(nsqd: Nsqd, server: WebServer) -> None:
    nsqd.publish_many(TOPIC, bodies(100))
    argv = relay_argv(OURS, nsqd, "none", f"--post={server.url}/", "--sample=0")
    stderr = relay_until_drained(argv, nsqd, "none")
    assert server.received == []
    assert "0 sent, 0 requeued after a failed request, 100 sampled out" in stderr


def test_mode_all_sends_each_message_to_every_address(nsqd: Nsqd, server: WebServer) -> None:
    with WebServer() as other:
        nsqd.publish_many(TOPIC, bodies(20))
        argv = relay_argv(
            OURS, nsqd, "all", f"--post={server.url}/", f"--post={other.url}/", "--mode=all"
        )
        relay_until_drained(argv, nsqd, "all")
        assert posted(server.received) == posted(other.received) == Counter(bodies(20))


def test_round_robin_spreads_over_the_addresses(nsqd: Nsqd, server: WebServer) -> None:
    with WebServer() as other:
        nsqd.publish_many(TOPIC, bodies(20))
        argv = relay_argv(
            OURS, nsqd, "rr", f"--post={server.url}/", f"--post={other.url}/", "--mode=round-robin"
        )
        relay_until_drained(argv, nsqd, "rr")
        assert len(server.received) == len(other.received) == 10


def test_batches_post_many_messages_in_one_body(nsqd: Nsqd, server: WebServer) -> None:
    messages = bodies(100)
    nsqd.publish_many(TOPIC, messages)
    argv = relay_argv(OURS, nsqd, "batch", f"--post={server.url}/", "--batch-size=25")
    relay_until_drained(argv, nsqd, "batch")
    lines = [line for request in server.received for line in request.body.splitlines()]
    assert Counter(lines) == Counter(messages)
    assert len(server.received) < len(messages)
    assert all(request.body.endswith(b"\n") for request in server.received)


def test_status_lines_per_address_and_aggregate(nsqd: Nsqd, server: WebServer) -> None:
    with WebServer() as other:
        nsqd.publish_many(TOPIC, bodies(250))
        argv = relay_argv(
            OURS,
            nsqd,
            "status",
            f"--post={server.url}/",
            f"--post={other.url}/",
            "--mode=round-robin",
            "--status-every=100",
        )
        stderr = relay_until_drained(argv, nsqd, "status")
    prefixes = Counter(
        line.split(" ")[2] for line in stderr.splitlines() if " finished 100 - 99th: " in line
    )
    assert prefixes == {"[aggregate]:": 2, f"[{server.url}/]:": 1, f"[{other.url}/]:": 1}


def test_the_source_frozen_then_restarted_loses_nothing(
    durable_nsq: LocalNsq, server: WebServer
) -> None:
    """The source nsqd frozen (SIGSTOP) a while, then stopped and started again: every
    message nsqd delivered reaches the endpoint at least once, and the channel drains.

    Through a tap (the fault harness's), which sees what nsqd delivered: a message missing
    here must be one nsqd never delivered, lost by nsqd as it stopped (Ledger.
    never_delivered; a CI run once missed one)."""
    source = durable_nsq.nsqd("source", extra_args=DURABLE)
    messages = bodies(3000)
    source.publish_many(TOPIC, messages)
    with NsqTap(source.tcp_address) as tap:
        argv = [*OURS, f"--nsqd-tcp-address={tap.address}", f"--topic={TOPIC}"]
        with running([*argv, "--channel=faults", f"--post={server.url}/"]) as tool:
            server.wait_for_requests(500)
            with source.frozen():
                # nsqd silent (its stats cannot be read either): the relay posts at most
                # the window it held, and keeps running.
                seen = len(server.received)
                wait_until(lambda: tool.process.poll() is None, 10, "still running")
                assert len(server.received) <= seen + 200
            server.wait_for_requests(1500, timeout=30)
            source.restart()
            wait_until(lambda: source.emptied(TOPIC, "faults"), 60, "the source drained")
    lost_by_nsqd = tap.ledger.never_delivered(set(messages))
    assert set(messages) - set(posted(server.received)) <= lost_by_nsqd
    assert len(lost_by_nsqd) <= MOST_NSQD_LOSES
    assert "Traceback" not in tool.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--post=http://h/"], "--topic and --channel are required"),
        (["--topic=t"], "--get or --post required"),
        (["--topic=t", "--post=http://h/", "--get=http://h/%s"], "use --get or --post not both"),
        (["--topic=t", "--get=http://h/"], "invalid GET address - must be a printf string"),
        (["--topic=t", "--get=http://h/%s", "--content-type=a/b"], "only used with --post"),
        (["--topic=t", "--post=http://h/", "--content-type="], "requires a value when used"),
        (["--topic=t", "--post=http://h/", "--mode=random"], "--mode 'random' is unknown"),
        (["--topic=t", "--post=http://h/", "--sample=1.5"], "--sample must be between"),
        (["--topic=t", "--post=http://h/", "--header=k=v"], "header"),
        (["--topic=t", "--post=ftp://h/"], "ftp"),
        (["--topic=t", "--get=http://h/%s", "--batch-size=2"], "--batch-size"),
        (["--topic=t", "--post=http://h/", "-n", "0"], "-n must be at least 1"),
    ],
)
def test_bad_options_stop_with_one_line(args: list[str], message: str) -> None:
    argv = [*OURS, "--nsqd-tcp-address=127.0.0.1:1", *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("nsq_to_http: error: ")
    assert message in result.stderr


def timed_out_when_due(nsqd: Nsqd, channel: str) -> bytes:
    """Make nsqd time out the channel's messages as soon as they are due; the body of
    the message this published to it.

    nsqd looks for messages to time out only in the channels it listed at its last
    refresh (every 5 s): a new channel's may stay in flight seconds past their timeout.
    A deferred message is made ready by the same look: once it is, the channel is
    listed."""
    nsqd.create_channels(TOPIC, channel)
    probe = b"probe"
    httpx.post(
        f"http://{nsqd.http_address}/pub", params={"topic": TOPIC, "defer": "1"}, content=probe
    ).raise_for_status()

    def listed() -> bool:
        stats = nsqd.channel_stats(TOPIC, channel)
        return stats.deferred_count == 0 and stats.depth == 1

    wait_until(listed, 10, "the deferred probe ready")
    return probe


@contextlib.contextmanager
def answers_held(server: WebServer) -> Iterator[threading.Event]:
    """The server holds every answer until the event is set (at the latest when the
    block ends: a tool stopped while a request is held must not wait for it)."""
    answer = threading.Event()
    server.default = Answer(hold=answer)
    try:
        yield answer
    finally:
        answer.set()


def test_messages_waiting_on_a_slow_endpoint_are_touched_not_sent_again(
    local_nsq: LocalNsq, server: WebServer
) -> None:
    """nsqio/nsq#681: an endpoint that answers after three of nsqd's msg_timeouts (1 s),
    within --http-client-request-timeout (10 s). The relay TOUCHes the messages of the
    requests still running, so nsqd times none out: each reaches the endpoint once and
    is FIN'd when it answers."""
    source = local_nsq.nsqd("slow", extra_args=["--msg-timeout=1s"])
    messages = [timed_out_when_due(source, "slow"), *bodies(9)]
    source.publish_many(TOPIC, messages[1:])
    argv = relay_argv(
        OURS, source, "slow", f"--post={server.url}/", "--http-client-request-timeout=10s"
    )
    with answers_held(server) as answer, running(argv) as tool:
        server.wait_for_requests(len(messages))
        # The fault: the endpoint answers after 3 s.
        holds_throughout(
            lambda: source.channel_stats(TOPIC, "slow").timeout_count == 0, 3.0, "no timeout"
        )
        answer.set()
        wait_until(lambda: source.drained(TOPIC, "slow"), 30, "drained")
    assert source.channel_stats(TOPIC, "slow").timeout_count == 0
    assert posted(server.received) == Counter(messages)  # each once
    assert f"[summary]: {len(messages)} sent, 0 requeued" in tool.stderr


def test_touches_end_at_nsqds_max_msg_timeout(local_nsq: LocalNsq, server: WebServer) -> None:
    """A request longer than nsqd's --max-msg-timeout (3 s here; 15 min by default): the
    message is TOUCHed until then (no timeout at its msg_timeout, 1 s), then nsqd takes it
    back, a warning says so, and it is delivered again. The first answer's FIN then
    fails (nsqd no longer holds that delivery); the second is FIN'd."""
    source = local_nsq.nsqd("capped", extra_args=["--msg-timeout=1s", "--max-msg-timeout=3s"])
    probe = timed_out_when_due(source, "capped")
    argv = relay_argv(
        OURS, source, "capped", f"--post={server.url}/", "--http-client-request-timeout=1m"
    )
    with answers_held(server) as answer, running(argv) as tool:
        server.wait_for_requests(1)
        first = time.monotonic()
        server.wait_for_requests(2)
        assert time.monotonic() - first > 2.0  # TOUCHed past its msg_timeout
        assert source.channel_stats(TOPIC, "capped").timeout_count == 1
        answer.set()
        wait_until(lambda: source.drained(TOPIC, "capped"), 30, "drained")
    assert [request.body for request in server.received] == [probe, probe]
    assert "1 messages held unsettled for nsqd's max_msg_timeout (3s)" in tool.stderr
    assert "E_FIN_FAILED" in tool.stderr


def test_a_request_timeout_past_nsqds_default_max_msg_timeout_is_warned(
    nsqd: Nsqd, server: WebServer
) -> None:
    nsqd.publish(TOPIC, b"one")
    argv = relay_argv(
        OURS, nsqd, "long", f"--post={server.url}/", "--http-client-request-timeout=20m"
    )
    stderr = relay_until_drained(argv, nsqd, "long")
    assert (
        "WARNING: --http-client-request-timeout=20m0s is longer than nsqd's default "
        "--max-msg-timeout (15m0s)" in stderr
    )
