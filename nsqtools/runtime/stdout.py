"""The stdout sink: nsq_tail's output. Each delivery is rendered to its lines (by the
command: raw, JSON or a template, highlighted or not), written, and then done: written
is durable enough for a terminal or a pipe, so the sink holds nothing. A reader that
went away for good (`nsq_tail | head`) closes the sink: the write raises SinkClosed,
and the runtime stops every consumer and requeues what was not written.

A peeking sink (hold=True) writes the lines and settles nothing: the messages stay in
flight, so nsqd does not send them again, and the consumers' clean stop gives every one
back at once (REQ 0), none FIN'd; `held` counts them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nsqtools.runtime.sinks import Delivery

# The lines for a delivery's messages, as the output shows them.
Render = Callable[[Delivery], bytes]
# Writes all of the bytes; raises SinkClosed once the reader has gone.
Write = Callable[[bytes], Awaitable[None]]


class StdoutSink:
    """Each delivery rendered, written, then done (or held, to be given back)."""

    tick_interval: float | None = None

    def __init__(self, render: Render, write: Write, *, hold: bool = False) -> None:
        self.render = render
        self.write = write
        self.hold = hold
        self.held = 0  # messages written and left unsettled (hold)

    async def accept(self, delivery: Delivery) -> None:
        await self.write(self.render(delivery))
        if self.hold:
            self.held += delivery.count
        else:
            delivery.done()

    async def flush(self) -> None:
        """Nothing to make durable: a delivery is done once written (or held for good)."""

    tick = flush
