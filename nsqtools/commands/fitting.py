"""Tables that fit the terminal: which columns a table keeps, and how wide each is.

A column that does not fit gives way whole, in the order its table ranks its columns
(sparklines and the like first); one that never gives way (a name, a count) is never cut:
numbers stay whole. A column of words (a list of addresses, a user agent) may wrap
between its words, down to its longest word: an address keeps its port.
Widths are in terminal cells (rich's count: a wide character is two).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len


@dataclass(frozen=True)
class Space:
    """What a column needs: `natural`, its widest cell (or header), on one line; `least`,
    its longest word if it may wrap, else `natural`; `gives_way`: 0 never, else the
    highest gives way first (the rightmost of a rank first)."""

    natural: int
    least: int
    gives_way: int = 0


def space(cells: Sequence[str], gives_way: int = 0, wraps: bool = False) -> Space:
    """The Space of a column of these cells (its header among them); with `wraps`, a
    column that may wrap between its words."""
    natural = max(map(cell_len, cells), default=0)
    if not wraps:
        return Space(natural, natural, gives_way)
    longest_word = max((cell_len(word) for cell in cells for word in cell.split()), default=0)
    return Space(natural, longest_word, gives_way)


def layout(spaces: Sequence[Space], room: int, gap: int, edges: int = 0) -> list[int | None]:
    """Each column's width, or None for a column left out, for the table to fit `room`
    cells: `gap` between two columns, `edges` at its sides. Columns give way until the
    rest fit at their least; then the columns of words wrap, the widest first, as far as
    they must. With too little room even for the columns that never give way, they are
    all kept, at their least."""
    kept = list(range(len(spaces)))

    def needed(widths: Sequence[int]) -> int:
        return sum(widths) + gap * (len(widths) - 1) + edges

    while needed([spaces[index].least for index in kept]) > room:
        yielding = [index for index in kept if spaces[index].gives_way]
        if not yielding:
            break
        kept.remove(max(yielding, key=lambda index: (spaces[index].gives_way, index)))
    widths = {index: spaces[index].natural for index in kept}
    excess = needed(list(widths.values())) - room
    while excess > 0:
        wrapping = [index for index in kept if widths[index] > spaces[index].least]
        if not wrapping:
            break
        widest = max(wrapping, key=lambda index: widths[index])
        widths[widest] -= 1
        excess -= 1
    return [widths.get(index) for index in range(len(spaces))]
