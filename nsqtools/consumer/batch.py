"""ReceivedBatch: the messages one connection delivered in one read, as the application
takes them from a Consumer, answered as a whole or message by message (FIN, REQ, TOUCH).

A batch tracks which of its messages were answered, so that each is answered once; the
answers go to the link (the connection) that delivered it, which drops them once that
connection has closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqtools.consumer.link import Link
    from nsqtools.protocol import Message, MessageBatch


class ReceivedBatch:
    """Messages from one connection's read, answered together or one by one.

    They belong to that connection: once it has closed, an answer is dropped (nsqd takes
    the messages back itself), never written on the connection that replaced it."""

    __slots__ = ("_answered", "_done", "_link", "_received")

    def __init__(self, link: Link, received: MessageBatch) -> None:
        self._link = link
        self._received = received
        self._answered: set[bytes] | None = None  # ids answered one by one, if any
        self._done = False  # every message answered

    def __len__(self) -> int:
        return len(self._received)

    @property
    def messages(self) -> list[Message]:
        return self._received.messages

    @property
    def bodies(self) -> list[bytes]:
        """The bodies alone: cheaper than `messages` when that is all you need."""
        return self._received.bodies

    @property
    def nsqd_address(self) -> str:
        return self._link.address

    def unanswered(self) -> list[Message]:
        if self._done:
            return []
        if self._answered is None:
            return self.messages
        return [message for message in self.messages if message.id not in self._answered]

    def finish(self, messages: Sequence[Message] | None = None) -> None:
        """FIN these messages of this batch (default: every one not yet answered).

        Each is answered once, however often it is listed; one answered before is skipped."""
        ids = self._take(messages)
        if ids:
            self._link.finish(ids)

    def requeue(
        self,
        messages: Sequence[Message] | None = None,
        *,
        delay: float | None = None,
        backoff: bool = True,
    ) -> None:
        """REQ these messages (default: every one not yet answered).

        Without a delay each gets go-nsq's default, growing with its attempts. With
        backoff, the consumer slows down as go-nsq's does after a failure.
        """
        ids = self._take(messages)
        if ids:
            self._link.requeue(self.messages, ids, delay, backoff)

    def touch(self, messages: Sequence[Message] | None = None) -> None:
        """Reset nsqd's timeout for these unanswered messages (default: all unanswered)."""
        chosen = self.unanswered() if messages is None else messages
        self._link.touch([message.id for message in chosen])

    def _take(self, messages: Sequence[Message] | None) -> list[bytes]:
        """Mark messages answered and return the ids not answered before, each once."""
        if self._done:
            return []
        if messages is None:
            if self._answered is None:
                ids = self._received.ids  # the usual case: no Message objects, no set
            else:
                ids = [message.id for message in self.unanswered()]
            self._done = True
        else:
            ids = self._take_some(messages)
        if self._done:
            self._link.open_batches.discard(self)
        return ids

    def _take_some(self, messages: Sequence[Message]) -> list[bytes]:
        given = list(dict.fromkeys(message.id for message in messages))  # each once, in order
        if not set(self._received.ids).issuperset(given):
            raise ValueError("a batch answers only its own messages")
        answered = self._answered if self._answered is not None else set()
        ids = [message_id for message_id in given if message_id not in answered]
        answered.update(ids)
        self._answered = answered
        self._done = len(answered) == len(self)
        return ids
