"""Work bounds for tests, without a timer: the bytes code allocates, step by step.

Every copy of bytes in Python allocates its destination, so an algorithm that copies a
growing buffer on every chunk (the quadratic kind) allocates that buffer on every step.
AllocationMeter adds up, over the steps of a run, the most memory each step held above
what it started with (tracemalloc's peak, reset at every step): a figure that grows
with the square of the input for such code and linearly for code that copies each byte
a bounded number of times, on a loaded machine as on an idle one.
"""

from __future__ import annotations

import tracemalloc
from types import TracebackType


class AllocationMeter:
    """`with AllocationMeter() as meter:` then `meter.step()` after each step; read
    `meter.allocated` (bytes) once the block has ended."""

    def __init__(self) -> None:
        self.allocated = 0
        self._base = 0

    def __enter__(self) -> AllocationMeter:
        tracemalloc.start()
        self._base = tracemalloc.get_traced_memory()[0]
        return self

    def step(self) -> None:
        """End a step: count its peak above where it started, and start the next."""
        current, peak = tracemalloc.get_traced_memory()
        self.allocated += max(0, peak - self._base)
        tracemalloc.reset_peak()
        self._base = current

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.step()
        tracemalloc.stop()
