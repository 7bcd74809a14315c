"""Finding topics to consume: what the lookupds know, filtered by a pattern.

A LookupdTopics is the `find_topics` of run_consumers for tools that follow topics as
they appear (nsq_to_file with no --topic). Each call asks every lookupd for its topics
(a lookupd that fails is logged and skipped) and keeps those the pattern matches
anywhere in the name (Go's unanchored regexp.MatchString) and the tool accepts. Each
topic skipped is logged once, not at every refresh.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

import httpx

from nsqtools.httpapi import lookupd
from nsqtools.httpapi.call import HttpApiError, send

log = logging.getLogger("nsqtools.runtime")

# Why a tool will not consume a topic, or None when it will.
TopicCheck = Callable[[str], str | None]


class LookupdTopics:
    def __init__(
        self,
        addresses: Sequence[str],
        pattern: re.Pattern[str] | None,
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
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for address in self.addresses:
                try:
                    topics = await send(client, lookupd.topics(address))
                    found.update(topics)
                except HttpApiError as error:
                    log.error("could not retrieve topic list from %s: %s", address, error)
        return sorted(topic for topic in found if self._wanted(topic))

    def _wanted(self, topic: str) -> bool:
        if self.pattern is not None and not self.pattern.search(topic):
            self._skip(topic, f"doesn't match pattern {self.pattern.pattern}")
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
