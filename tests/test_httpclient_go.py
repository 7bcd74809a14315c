"""Our requests equal Go's nsq_to_http's, byte for byte but the User-Agent's version:
Go's tool reads a message from a real nsqd and sends it to the recording server; ours
is built by nsqtools.httpclient.requests from the same message and options."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Sequence

import pytest

from nsqtools.httpclient.requests import GetTarget, PostTarget, parse_headers
from nsqtools.testing import Nsqd, find_binary
from nsqtools.testing.webserver import ReceivedRequest, WebServer

BODY = "a b&c=d/é\x01~".encode()
HEADERS = ["x-trace-id: 42", "Accept-Language: en"]
_USER_AGENT = re.compile(rb"\r\nUser-Agent: nsq_to_http v[^\r]*\r\n")


@pytest.fixture
def server() -> Iterator[WebServer]:
    with WebServer() as web:
        yield web


def sent_by_go(nsqd: Nsqd, server: WebServer, options: Sequence[str]) -> ReceivedRequest:
    """The request Go's nsq_to_http makes for one message, as the server got it."""
    nsqd.publish("http", BODY)
    command = [str(find_binary("nsq_to_http")), "--topic=http"]
    command += [f"--nsqd-tcp-address={nsqd.tcp_address}", *options]
    go = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        received = server.wait_for_requests(1)
    finally:
        go.terminate()
        go.communicate(timeout=10)
    return received[0]


def without_user_agent_version(data: bytes) -> bytes:
    return _USER_AGENT.sub(b"\r\nUser-Agent: nsq_to_http\r\n", data)


def test_post_with_headers_and_content_type(nsqd: Nsqd, server: WebServer) -> None:
    address = f"{server.url}/in?topic=http"
    options = [f"--post={address}", "--content-type=text/plain; charset=utf-8"]
    go = sent_by_go(nsqd, server, [*options, *(f"--header={h}" for h in HEADERS)])
    ours = PostTarget(
        address, content_type="text/plain; charset=utf-8", headers=parse_headers(HEADERS)
    )
    assert without_user_agent_version(ours.request(BODY).data) == without_user_agent_version(go.raw)
    assert go.header("User-Agent") == "nsq_to_http v1.3.0"


def test_get_with_headers(nsqd: Nsqd, server: WebServer) -> None:
    template = f"{server.url}/in/%s?topic=http"
    go = sent_by_go(nsqd, server, [f"--get={template}", *(f"--header={h}" for h in HEADERS)])
    ours = GetTarget(template, headers=parse_headers(HEADERS))
    assert without_user_agent_version(ours.request(BODY).data) == without_user_agent_version(go.raw)
    assert go.request_line == b"GET /in/a+b%26c%3Dd%2F%C3%A9%01~?topic=http HTTP/1.1"
