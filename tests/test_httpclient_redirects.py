"""Which redirects nsq_to_http follows, where to, and with which headers (pure)."""

from __future__ import annotations

import pytest

from nsqtools.httpclient.redirects import redirection
from nsqtools.httpclient.requests import GetTarget, PostTarget, UrlGet

SECRET = {"Authorization": "Bearer t", "X-Trace": "abc"}
POST = PostTarget("http://h:8080/in/x?q=1", "application/json", SECRET)
GET = GetTarget("http://h:8080/in?d=%s", SECRET)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_get_follows_every_redirect_with_the_message_in_its_url(status: int) -> None:
    redirect = redirection(GET, b"a b", status, "https://h/moved?d=a+b")
    assert redirect is not None
    assert isinstance(redirect.target, UrlGet)
    request = redirect.target.request(b"ignored: the URL holds the message")
    assert request.data.startswith(b"GET /moved?d=a+b HTTP/1.1\r\nHost: h\r\n")
    assert b"Authorization: Bearer t\r\n" in request.data  # the same host
    expected = f"{GET.address}: got status code {status} to https://h/moved?...: followed"
    assert redirect.why == expected


@pytest.mark.parametrize("status", [307, 308])
def test_a_post_follows_307_and_308_with_its_body(status: int) -> None:
    redirect = redirection(POST, b"{}", status, "../new")
    assert redirect is not None
    assert isinstance(redirect.target, PostTarget)
    request = redirect.target.request(b"{}")
    assert request.data.startswith(b"POST /new HTTP/1.1\r\nHost: h:8080\r\n")
    assert b"Content-Type: application/json\r\n" in request.data
    assert request.data.endswith(b"\r\n\r\n{}")


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_post_does_not_follow_what_would_drop_its_body(status: int) -> None:
    redirect = redirection(POST, b"{}", status, "http://h:8080/new?secret=1")
    assert redirect is not None
    assert redirect.target is None
    assert redirect.why == (
        f"{POST.address}: got status code {status} to http://h:8080/new?...: not followed "
        "(a POST redirected so would lose its body): requeued until the address is changed"
    )


def test_credentials_go_to_the_same_domain_or_a_subdomain_only() -> None:
    for location, kept in [("http://api.h/", True), ("http://H:9/", True), ("http://evil/", False)]:
        redirect = redirection(POST, b"", 307, location)
        assert redirect is not None and redirect.target is not None
        assert redirect.target.headers == (SECRET if kept else {"X-Trace": "abc"}), location


@pytest.mark.parametrize(("status", "location"), [(200, "/"), (304, "/"), (300, "/"), (301, None)])
def test_other_answers_are_no_redirect_to_follow(status: int, location: str | None) -> None:
    assert redirection(POST, b"", status, location) is None


def test_a_location_we_cannot_send_to_is_not_followed() -> None:
    redirect = redirection(GET, b"", 302, "ftp://h/file")
    assert redirect is not None
    assert redirect.target is None
    assert redirect.why.endswith("not followed (unsupported scheme 'ftp' (use http or https))")
