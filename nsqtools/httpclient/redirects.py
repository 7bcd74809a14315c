"""What nsq_to_http does with a redirect (pure, no IO): follow it, or not, and why.

A redirect is followed only where the message reaches the new address whole, as Go's
http.Client would send it there: a GET (the message is in its URL) after a 301, 302,
303, 307 or 308, a POST (method and body kept) after a 307 or 308. A POST answered 301,
302 or 303 is not followed: Go's client resends it as a GET without its body and, if
that GET succeeds, the message is FIN'd and lost. So it is a failed request (the message
requeued) and the redirect is named in the log, for the address to be corrected. At most
MAX_REDIRECTS are followed per message (Go's limit). The headers follow as Go copies
them: all of them, but Authorization and cookies only to the same host or a subdomain.

    redirect = redirection(target, body, 307, "/elsewhere")
    redirect.target        # where to send the message next; None: not followed
    redirect.why           # one line: what the endpoint answered, and what we do
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

from nsqtools.httpclient.requests import GetTarget, HttpOptionError, PostTarget, UrlGet

Target = PostTarget | GetTarget | UrlGet

MAX_REDIRECTS = 10  # Go's http.Client: "stopped after 10 redirects"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_KEEPING_THE_METHOD = frozenset({307, 308})
# Go's shouldCopyHeaderOnRedirect: sent on to the same domain or a subdomain only.
_SENSITIVE = frozenset({"Authorization", "Www-Authenticate", "Cookie", "Cookie2"})


class Redirect(NamedTuple):
    """A redirect answer to one request."""

    target: Target | None  # where to send the message next; None: not followed
    # One line: the address, the status, the Location without its query (it may hold the
    # message), what we do. The same for every message redirected alike: logged once.
    why: str


def redirection(target: Target, body: bytes, status: int, location: str | None) -> Redirect | None:
    """What to do after the answer `status` (Location `location`) to the message `body`
    sent to `target`; None when the status is no redirect to follow."""
    if status not in _REDIRECTS or location is None:
        return None
    current = target.url(body)
    resolved = urljoin(current, location.strip())
    shown = resolved.partition("?")[0] + ("?..." if "?" in resolved else "")
    answered = f"{target.address}: got status code {status} to {shown}"
    if isinstance(target, PostTarget) and status not in _KEEPING_THE_METHOD:
        why = (
            f"{answered}: not followed (a POST redirected so would lose its body): "
            "requeued until the address is changed"
        )
        return Redirect(None, why)
    try:
        following = _target_at(target, current, resolved)
    except HttpOptionError as error:
        return Redirect(None, f"{answered}: not followed ({error.reason})")
    return Redirect(following, f"{answered}: followed")


def _target_at(target: Target, current: str, address: str) -> Target:
    headers = _headers_on(target.headers, current, address)
    if isinstance(target, PostTarget):
        return PostTarget(address, target.content_type, headers, target.user_agent)
    return UrlGet(address, headers, target.user_agent)


def _headers_on(headers: dict[str, str], origin: str, destination: str) -> dict[str, str]:
    """The headers Go copies from a request at `origin` to the next at `destination`."""
    if _same_domain_or_subdomain(destination, origin):
        return dict(headers)
    return {key: value for key, value in headers.items() if key not in _SENSITIVE}


def _same_domain_or_subdomain(destination: str, origin: str) -> bool:
    """Go's isDomainOrSubdomain on the two URLs' host names."""
    child = (urlsplit(destination).hostname or "").lower()
    parent = (urlsplit(origin).hostname or "").lower()
    return child == parent or child.endswith("." + parent)
