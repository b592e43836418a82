"""Items, dummy keys and the fixed total order of the universe.

Lebeda–Tětek Alg. 1 evicts the *smallest* zero-count key under a total order of the universe that
does not depend on the stream (§5: "the order of removal must be independent of the stream so that
it is consistent between neighboring datasets"); releases list keys in the same order so the output
order leaks nothing. privstream's universe and its order:

* items are Python ``int`` in the signed 64-bit range (numpy integer scalars are normalised to
  ``int``) or ``str`` (any Unicode string); ``bool`` and every other type are rejected;
* all ints, in numeric order  <  all strs, in code-point order (Python's ``str`` comparison)
  <  the dummy keys ``Dummy(0) < Dummy(1) < …`` that Alg. 1 starts with (the paper's d+1, …, d+k).

:func:`item_order_key` maps a key to a tuple that sorts in this order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

Item: TypeAlias = int | str

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Dummy:
    """Dummy key number ``index`` of Alg. 1 (the paper's d+1+index); never a real item."""

    index: int

    def __repr__(self) -> str:
        return f"Dummy({self.index})"


Key: TypeAlias = int | str | Dummy


def item_order_key(key: Key) -> tuple[int, int | str]:
    """Sort key of ``key`` in the universe's total order: ints < strs < dummies."""
    if type(key) is int:  # exact types: a bool or a numpy int is normalised first
        return (0, key)
    if type(key) is str:
        return (1, key)
    if type(key) is Dummy:
        return (2, key.index)
    return item_order_key(normalize_item(key))


def normalize_item(item: object) -> Item:
    """Return ``item`` as a plain ``int`` or ``str``; raise TypeError/ValueError otherwise.

    numpy integer scalars become ``int``; ``bool`` (and numpy bools) are rejected because
    ``True == 1`` would silently merge two different items; ints must fit in signed 64 bits
    (the binary format and the vectorised paths store them as int64).
    """
    if type(item) is str:
        return item
    if type(item) is int:
        if INT64_MIN <= item <= INT64_MAX:
            return item
        raise ValueError("item: int outside the signed 64-bit range")
    if isinstance(item, bool | np.bool_):
        raise TypeError("item must be an int or a str, not a bool")
    if isinstance(item, int | np.integer):
        return normalize_item(int(item))
    if isinstance(item, str):
        return str(item)
    raise TypeError(f"item must be an int or a str, not {type(item).__name__}")


def sorted_items(keys: Iterable[Key]) -> list[Key]:
    """``keys`` sorted in the universe's total order."""
    return sorted(keys, key=item_order_key)
