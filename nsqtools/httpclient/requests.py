"""nsq_to_http's requests as bytes, equal to what Go's nsq_to_http writes (pure, no IO).

Owns the addresses (--post URL, --get printf template), the --header parsing, and the
wire form Go's net/http gives them, so a server sees the same bytes from us as from Go
(only the User-Agent's version differs):

    POST /path?q HTTP/1.1          GET /path?data=a+b%26c HTTP/1.1
    Host: host:port                Host: host:port
    User-Agent: nsq_to_http v..    User-Agent: nsq_to_http v..
    Content-Length: N              <other headers, sorted by key>
    <other headers, sorted by key> Accept-Encoding: gzip
    Accept-Encoding: gzip
                                   (empty line; no body)
    <body>

"Other headers" are Content-Type (POST), the --header ones under their canonical key
(a --header wins over ours: User-Agent, Content-Type) and Authorization from
user:password@ in the URL. Go's Transport adds `Accept-Encoding: gzip` unless a
--header sets Accept-Encoding or Range; it never sends a --header Host,
Content-Length, Transfer-Encoding or Trailer. A --get's `%s` becomes Go's
url.QueryEscape of the body's bytes.

Addresses are http:// or https:// URLs ("http://host[:port][/path][?query]"); what Go
would reject, or rewrite before sending, is refused here with one line
(HttpOptionError) when the command starts, rather than failing every message. One
deliberate difference: in a --get template, `%` other than the one `%s` is kept as
written (`%20` stays `%20`), where Go's Sprintf would print `%!...(MISSING)`.

    target = PostTarget("http://127.0.0.1:8080/ingest", headers=parse_headers(["X-A: 1"]))
    request = target.request(b"body")          # a Request: origin, method, data
    check_get_template("http://h/?data=%s")    # Go's startup check of a --get
    GetTarget("http://h/?data=%s").request(b"a b")
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple
from urllib.parse import quote_plus, unquote_to_bytes

from nsqtools import __version__

USER_AGENT = f"nsq_to_http v{__version__}"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
GET_TEMPLATE_ERROR = "invalid GET address - must be a printf string"

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Headers Go's Request.write never takes from the header map (it writes its own Host,
# User-Agent and body framing).
_NOT_SENT = frozenset({"Host", "Content-Length", "Transfer-Encoding", "Trailer"})
# RFC 7230 token: Go refuses a request whose header name is anything else.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Control characters but tab: Go refuses a request whose header value holds one.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# What Go writes verbatim in a path (url.validEncoded); other bytes it would re-escape.
_RAW_PATH = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@\[\]/]|%[0-9A-Fa-f]{2})*")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+\-.]*):")
_PORT = re.compile(r"[0-9]*")


class HttpOptionError(ValueError):
    """An address or --header the requests cannot be built from; one line naming it."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class HttpOrigin(NamedTuple):
    """Where a request goes: connections are pooled per origin."""

    scheme: str  # "http" or "https"
    host: str  # as dialed (and checked against the certificate): no brackets, no port
    port: int


class Request(NamedTuple):
    """One request as it goes on the wire."""

    origin: HttpOrigin
    method: str  # how the answer is framed depends on it (h11 needs it)
    data: bytes  # head and body, exactly as written
    closes: bool  # the request says `Connection: close`: the connection is not reused


class Url(NamedTuple):
    """An address split as Go's net/http uses it."""

    origin: HttpOrigin
    host_header: str  # what Go writes in Host: the URL's host[:port] as given
    request_uri: str  # path (at least "/") and ?query, as written on the request line
    userinfo: str  # "user:password" (still %-escaped) or ""


def query_escape(data: bytes) -> bytes:
    """Go's url.QueryEscape: unreserved bytes kept, space as `+`, the rest %XX."""
    return quote_plus(data, safe="").encode("ascii")


def check_get_template(address: str) -> None:
    """Go's check of a --get address: exactly one `%s` (strings.Count)."""
    if address.count("%s") != 1:
        raise HttpOptionError(GET_TEMPLATE_ERROR)


def canonical_header_key(key: str) -> str:
    """Go's http.CanonicalHeaderKey: `x-my-key` -> `X-My-Key`; a key that is not a
    token is returned unchanged."""
    if not _HEADER_NAME.fullmatch(key):
        return key
    return "-".join(word[:1].upper() + word[1:].lower() for word in key.split("-"))


def parse_headers(texts: Iterable[str]) -> dict[str, str]:
    """--header values (`Key: Value`) by canonical key, the last one winning, as Go's
    parseCustomHeaders and Header.Set do. Go sends none of a request whose header name
    or value is invalid, so those are refused here."""
    headers: dict[str, str] = {}
    for text in texts:
        key, colon, value = text.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not key or not value:
            raise HttpOptionError(f"invalid header {text!r}: expected 'Key: Value'")
        if not _HEADER_NAME.fullmatch(key):
            raise HttpOptionError(f"invalid header {text!r}: {key!r} is not a header name")
        if _CONTROL.search(value):
            raise HttpOptionError(f"invalid header {text!r}: the value has a control character")
        headers[canonical_header_key(key)] = value
    return headers


def parse_url(address: str) -> Url:
    """An http(s) URL split into origin, Host header and request URI."""
    scheme_match = _SCHEME.match(address)
    if not scheme_match or not address[scheme_match.end() :].startswith("//"):
        raise _bad_url(address, "expected http://host[:port][/path]")
    scheme = scheme_match.group(1).lower()
    if scheme not in _DEFAULT_PORTS:
        raise _bad_url(address, f"unsupported scheme {scheme!r} (use http or https)")
    rest = address[scheme_match.end() + 2 :].partition("#")[0]
    if _CONTROL.search(rest) or " " in rest:
        raise _bad_url(address, "it has a space or a control character")
    authority_end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    userinfo, _, host_port = rest[:authority_end].rpartition("@")
    path, question, query = rest[authority_end:].partition("?")
    if not _RAW_PATH.fullmatch(path):
        raise _bad_url(address, "its path has characters to percent-encode")
    origin = _origin(address, scheme, host_port)
    return Url(origin, host_port, (path or "/") + question + query, userinfo)


def _origin(address: str, scheme: str, host_port: str) -> HttpOrigin:
    if host_port.startswith("["):
        host, bracket, port_text = host_port[1:].partition("]")
        if not bracket or (port_text and not port_text.startswith(":")):
            raise _bad_url(address, "expected [IPv6 host] or [IPv6 host]:port")
        port_text = port_text[1:]
    else:
        host, _, port_text = host_port.partition(":")
        if ":" in port_text:
            raise _bad_url(address, "put an IPv6 host in brackets")
    if not host:
        raise _bad_url(address, "no host")
    if not _PORT.fullmatch(port_text) or (port_text and not 0 < int(port_text) < 65536):
        raise _bad_url(address, f"invalid port {port_text!r}")
    if not host.isascii():
        raise _bad_url(address, "the host name must be ASCII (use its xn-- form)")
    return HttpOrigin(scheme, host, int(port_text) if port_text else _DEFAULT_PORTS[scheme])


def _bad_url(address: str, reason: str) -> HttpOptionError:
    return HttpOptionError(f"invalid URL {address!r}: {reason}", reason)


def _header_lines(
    url: Url, method: str, user_agent: str, headers: Mapping[str, str]
) -> tuple[bytes, bytes, bool]:
    """(request line + Host + User-Agent, the sorted headers + extras + end of head,
    whether the request closes the connection); Content-Length goes between them."""
    headers = dict(headers)
    user_agent = headers.pop("User-Agent", user_agent)
    if url.userinfo and "Authorization" not in headers:
        headers["Authorization"] = _basic_auth(url.userinfo)
    if "Accept-Encoding" not in headers and "Range" not in headers:
        extra = "Accept-Encoding: gzip\r\n"
    else:
        extra = ""
    sorted_lines = "".join(
        f"{key}: {value}\r\n" for key, value in sorted(headers.items()) if key not in _NOT_SENT
    )
    start = f"{method} {url.request_uri} HTTP/1.1\r\nHost: {url.host_header}\r\n"
    start += f"User-Agent: {user_agent}\r\n"
    closes = "close" in headers.get("Connection", "").lower().replace(" ", "").split(",")
    return _wire(start), _wire(sorted_lines + extra + "\r\n"), closes


def _basic_auth(userinfo: str) -> str:
    """Go's basicAuth of the URL's unescaped user and password."""
    user, _, password = userinfo.partition(":")
    credentials = unquote_to_bytes(user) + b":" + unquote_to_bytes(password)
    return "Basic " + base64.b64encode(credentials).decode("ascii")


def _wire(text: str) -> bytes:
    """Command-line text as Go writes it: its bytes (undecodable ones kept as given)."""
    return text.encode("utf-8", "surrogateescape")


class PostTarget:
    """A --post address: each body is POSTed with a Content-Length, as Go does."""

    def __init__(
        self,
        address: str,
        content_type: str = DEFAULT_CONTENT_TYPE,
        headers: Mapping[str, str] | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        url = parse_url(address)
        self.address = address
        self.origin = url.origin
        self.content_type = content_type
        self.headers = dict(headers or {})  # the --header ones, for a redirect
        self.user_agent = user_agent
        all_headers = {"Content-Type": content_type, **self.headers}
        start, rest, self._closes = _header_lines(url, "POST", user_agent, all_headers)
        self._start = start + b"Content-Length: "
        self._rest = b"\r\n" + rest

    def request(self, body: bytes) -> Request:
        data = b"%s%d%s%s" % (self._start, len(body), self._rest, body)
        return Request(self.origin, "POST", data, self._closes)

    def url(self, body: bytes) -> str:
        """The URL the body's request goes to."""
        return self.address


class GetTarget:
    """A --get printf template: each body, query-escaped, replaces its `%s`."""

    def __init__(
        self,
        template: str,
        headers: Mapping[str, str] | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        check_get_template(template)
        before, _, after = template.partition("%s")
        url = _parse_get_template(template, before, after)
        self.address = template
        self.origin = url.origin
        self.headers = dict(headers or {})  # for a redirect
        self.user_agent = user_agent
        start, rest, self._closes = _header_lines(url, "GET", user_agent, self.headers)
        cut = start.index(b" HTTP/1.1\r\n") - len(_wire(after.partition("#")[0]))
        self._before, self._after = start[:cut], start[cut:] + rest
        self._url_before, self._url_after = before, after

    def request(self, body: bytes) -> Request:
        data = self._before + query_escape(body) + self._after
        return Request(self.origin, "GET", data, self._closes)

    def url(self, body: bytes) -> str:
        """The URL the body's request goes to."""
        return self._url_before + query_escape(body).decode("ascii") + self._url_after


class UrlGet:
    """A GET of one URL that already holds the message (where a redirect pointed)."""

    def __init__(
        self, address: str, headers: Mapping[str, str], user_agent: str = USER_AGENT
    ) -> None:
        url = parse_url(address)
        self.address = address
        self.origin = url.origin
        self.headers = dict(headers)
        self.user_agent = user_agent
        start, rest, closes = _header_lines(url, "GET", user_agent, self.headers)
        self._request = Request(url.origin, "GET", start + rest, closes)

    def request(self, body: bytes) -> Request:
        """The same request whatever the body: the URL holds it already."""
        return self._request

    def url(self, body: bytes) -> str:
        return self.address


def _parse_get_template(template: str, before: str, after: str) -> Url:
    """The template's URL without its `%s`. What a body can become (unreserved bytes,
    `+`, %XX) never moves where the URL's parts start, so one parse serves every body,
    provided the `%s` is in the path or query: a stand-in body must change nothing else."""
    try:
        url = parse_url(f"{before}{after}")
    except HttpOptionError as error:
        raise HttpOptionError(f"invalid GET address {template!r}: {error.reason}") from None
    try:
        same_origin = parse_url(f"{before}x{after}").origin == url.origin
    except HttpOptionError:
        same_origin = False
    if not same_origin or "#" in before:
        raise HttpOptionError(f"invalid GET address {template!r}: put %s in the path or query")
    return url
