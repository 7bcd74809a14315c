"""Finding topics to consume: what the lookupds know, filtered by a pattern.

A LookupdTopics is the `find_topics` of run_consumers for tools that follow topics as
they appear (nsq_to_file with no --topic). Each call asks every lookupd for its topics
(a lookupd that fails is logged and skipped; if all fail, the call raises
NoTopicList) and keeps those the pattern matches
anywhere in the name (Go's unanchored regexp.MatchString) and the tool accepts. Each
topic skipped is logged once, not at every refresh.

A TopicPattern is a --topic-pattern: RE2's syntax, which is Go's, matched by RE2 in
time linear in the name's length. Anyone who can publish can name a topic, so a
backtracking engine (Python's re) could be frozen by a name built against the pattern
(`^(a+)+$` and 63 "a" then "b"). A pattern RE2 refuses (Python's lookarounds and
backreferences: Go refuses them too) is a BadTopicPattern, one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import httpx
import re2

from nsqtools.errors import NsqError
from nsqtools.httpapi import lookupd
from nsqtools.httpapi.call import HttpApiError, send
from nsqtools.httpapi.clients import async_client

log = logging.getLogger("nsqtools.runtime")

# Why a tool will not consume a topic, or None when it will.
TopicCheck = Callable[[str], str | None]


class BadTopicPattern(NsqError):
    """A pattern RE2 (Go's syntax) refuses; str() is RE2's reason."""


class TopicPattern:
    """A pattern matched anywhere in a topic name, in linear time."""

    def __init__(self, text: str) -> None:
        self.text = text
        options = re2.Options()
        options.log_errors = False  # RE2 would also log the error, on stderr
        try:
            self._regexp = re2.compile(text, options)
        except re2.error as error:
            reason = error.args[0]
            raise BadTopicPattern(
                reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
            ) from None

    def search(self, topic: str) -> bool:
        return self._regexp.search(topic) is not None


class NoTopicList(NsqError):
    """No lookupd answered: which topics there are is unknown."""


class LookupdTopics:
    def __init__(
        self,
        addresses: Sequence[str],
        pattern: TopicPattern | None,
        *,
        connect_timeout: float,
        request_timeout: float,
        check: TopicCheck | None = None,
    ) -> None:
        self.addresses = list(addresses)
        self.pattern = pattern
        self.timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        self.check = check
        self._skipped: set[str] = set()

    async def __call__(self) -> list[str]:
        found: set[str] = set()
        answered = False
        async with async_client(timeout=self.timeout) as client:
            for address in self.addresses:
                try:
                    topics = await send(client, lookupd.topics(address))
                    found.update(topics)
                    answered = True
                except HttpApiError as error:
                    log.error("could not retrieve topic list from %s: %s", address, error)
        if not answered:
            raise NoTopicList("no nsqlookupd answered with its topics")
        return sorted(topic for topic in found if self._wanted(topic))

    def _wanted(self, topic: str) -> bool:
        if self.pattern is not None and not self.pattern.search(topic):
            self._skip(topic, f"doesn't match pattern {self.pattern.text}")
            return False
        reason = self.check(topic) if self.check is not None else None
        if reason is not None:
            self._skip(topic, reason)
            return False
        return True

    def _skip(self, topic: str, reason: str) -> None:
        if topic not in self._skipped:
            self._skipped.add(topic)
            log.warning("skipping topic %s (%s)", topic, reason)
