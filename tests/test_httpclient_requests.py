"""nsq_to_http's requests built as Go's net/http writes them (pure: no server).

Byte-exact against Go itself: tests/test_httpclient_go.py.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqtools.httpclient.requests import (
    GET_TEMPLATE_ERROR,
    USER_AGENT,
    GetTarget,
    HttpOptionError,
    HttpOrigin,
    PostTarget,
    canonical_header_key,
    check_get_template,
    parse_headers,
    parse_url,
    query_escape,
)


@pytest.mark.parametrize(
    ("body", "escaped"),
    [
        ("a b&c=d/é".encode(), b"a+b%26c%3Dd%2F%C3%A9"),
        (b"AZaz09-_.~", b"AZaz09-_.~"),
        (b"+%#?", b"%2B%25%23%3F"),
        (b"\x00\xff\n", b"%00%FF%0A"),
        (b"", b""),
    ],
)
def test_query_escape_is_gos(body: bytes, escaped: bytes) -> None:
    assert query_escape(body) == escaped


@given(st.binary())
def test_query_escape_round_trips_through_unreserved_bytes(body: bytes) -> None:
    escaped = query_escape(body)
    assert set(escaped) <= set(
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~%+"
    )
    assert unquote_to_bytes(escaped.replace(b"+", b" ")) == body


@pytest.mark.parametrize(
    "template", ["http://h/", "http://h/?a=%s&b=%s", "http://h/%%s%s", "http://h/%S"]
)
def test_a_get_needs_exactly_one_percent_s(template: str) -> None:
    with pytest.raises(HttpOptionError, match=f"^{GET_TEMPLATE_ERROR}$"):
        check_get_template(template)


def test_get_puts_the_escaped_body_in_the_path_or_the_query() -> None:
    target = GetTarget("http://127.0.0.1:8080/in/%s/x?topic=t#fragment")
    request = target.request(b"a b")
    assert request.origin == HttpOrigin("http", "127.0.0.1", 8080)
    assert request.data == (
        b"GET /in/a+b/x?topic=t HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        + f"User-Agent: {USER_AGENT}\r\n".encode()
        + b"Accept-Encoding: gzip\r\n\r\n"
    )
    query = GetTarget("http://h?data=%s").request(b"x=1")
    assert query.data.startswith(b"GET /?data=x%3D1 HTTP/1.1\r\nHost: h\r\n")


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("http://%s/", "no host"),
        ("http://h:8%s/", "put %s in the path or query"),
        ("http://h/#%s", "put %s in the path or query"),
        ("h:80/?q=%s", "expected http://host"),
    ],
)
def test_a_get_template_with_the_body_elsewhere_is_refused(template: str, reason: str) -> None:
    with pytest.raises(HttpOptionError, match=f"^invalid (GET address|URL) .*{reason}"):
        GetTarget(template)


def test_post_sends_the_body_with_its_length_and_content_type() -> None:
    request = PostTarget("https://example.com/in", content_type="text/plain").request(b"hi")
    assert request.origin == HttpOrigin("https", "example.com", 443)
    assert request.method == "POST"
    assert request.data == (
        b"POST /in HTTP/1.1\r\nHost: example.com\r\n"
        + f"User-Agent: {USER_AGENT}\r\n".encode()
        + b"Content-Length: 2\r\nContent-Type: text/plain\r\n"
        b"Accept-Encoding: gzip\r\n\r\nhi"
    )
    assert not request.closes


def test_headers_sorted_by_key_after_content_length_then_gzip() -> None:
    headers = parse_headers(["x-b: 2", "  accept-LANGUAGE :  en ", "X-A: 1: one"])
    assert headers == {"X-B": "2", "Accept-Language": "en", "X-A": "1: one"}
    data = PostTarget("http://h/", headers=headers).request(b"").data
    assert data.endswith(
        b"Content-Length: 0\r\nAccept-Language: en\r\nContent-Type: application/octet-stream\r\n"
        b"X-A: 1: one\r\nX-B: 2\r\nAccept-Encoding: gzip\r\n\r\n"
    )


def test_headers_replace_go_s_own_and_some_are_never_sent() -> None:
    given = ["User-Agent: mine", "Content-Type: a/b", "Host: other", "Content-Length: 9"]
    headers = parse_headers([*given, "Accept-Encoding: br", "Connection: keep-alive, close"])
    request = PostTarget("http://u%3A:p@h:81", headers=headers).request(b"x")
    assert request.data == (
        b"POST / HTTP/1.1\r\nHost: h:81\r\nUser-Agent: mine\r\nContent-Length: 1\r\n"
        b"Accept-Encoding: br\r\nAuthorization: Basic dTo6cA==\r\nConnection: keep-alive, close"
        b"\r\nContent-Type: a/b\r\n\r\nx"
    )
    assert request.closes


@pytest.mark.parametrize(
    ("key", "canonical"),
    [("x-my-KEY", "X-My-Key"), ("content-md5", "Content-Md5"), ("a--b", "A--B"), ("x y", "x y")],
)
def test_canonical_header_keys_are_gos(key: str, canonical: str) -> None:
    assert canonical_header_key(key) == canonical


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("X-Key", "expected 'Key: Value'"),
        ("X-Key=value", "expected 'Key: Value'"),
        (": value", "expected 'Key: Value'"),
        ("X-Key:   ", "expected 'Key: Value'"),
        ("X Key: value", "'X Key' is not a header name"),
        ("X-Key: a\x01b", "the value has a control character"),
    ],
)
def test_bad_headers_are_refused_in_one_line(text: str, problem: str) -> None:
    with pytest.raises(HttpOptionError) as raised:
        parse_headers([text])
    assert str(raised.value) == f"invalid header {text!r}: {problem}"


@pytest.mark.parametrize(
    ("url", "origin", "host_header", "request_uri"),
    [
        ("http://h", HttpOrigin("http", "h", 80), "h", "/"),
        ("HTTP://h:/p", HttpOrigin("http", "h", 80), "h:", "/p"),
        ("https://[::1]:8443?x=1", HttpOrigin("https", "::1", 8443), "[::1]:8443", "/?x=1"),
        ("http://h/a%2Fb;c=d@e?q=é", HttpOrigin("http", "h", 80), "h", "/a%2Fb;c=d@e?q=é"),
    ],
)
def test_urls_split_as_go_sends_them(
    url: str, origin: HttpOrigin, host_header: str, request_uri: str
) -> None:
    parsed = parse_url(url)
    assert (parsed.origin, parsed.host_header, parsed.request_uri) == (
        origin,
        host_header,
        request_uri,
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("127.0.0.1:8080/in", "expected http://host[:port][/path]"),
        ("ftp://h/", "unsupported scheme 'ftp' (use http or https)"),
        ("http:///in", "no host"),
        ("http://h:0/", "invalid port '0'"),
        ("http://h:x/", "invalid port 'x'"),
        ("http://::1/", "put an IPv6 host in brackets"),
        ("http://h/a b", "it has a space or a control character"),
        ("http://h/é", "its path has characters to percent-encode"),
        ("http://h/%zz", "its path has characters to percent-encode"),
        ("http://hé/", "the host name must be ASCII (use its xn-- form)"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, reason: str) -> None:
    with pytest.raises(HttpOptionError) as raised:
        parse_url(url)
    assert str(raised.value) == f"invalid URL {url!r}: {reason}"
