"""`with thing:` for what tests start: start on entry, always stop on exit."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartsAndStops:
    """Subclasses define start() and stop(); stop() must be safe to call twice."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
