"""The exact histogram: the reference that every sketch-based release is measured against.

:class:`ExactHistogram` counts every distinct item exactly (memory grows with the number of distinct
items, so it is for small universes or when memory allows). Its neighbour structure is the simplest
one: adding or removing one event changes exactly one count by exactly 1 and leaves every other
count alone (ℓ1 = ℓ∞ = 1, one key at most appears or disappears). That is the setting of the
classic stability-based sparse histogram, which :mod:`privstream.mechanisms.exact_threshold`
releases with discrete Laplace(1/ε) noise and a threshold; Lebeda–Tětek §1 compare their sketches
against exactly this "non-streaming" baseline (error O(log(1/δ)/ε), no n/(k+1) term).

``k`` is 1: at most one counter differs between neighbours. The Misra–Gries mechanisms that read
``k`` as "stored keys" for their union bounds refuse this build (its guarantees set ``exact``).
Batches go through :func:`~privstream.sketches.histogram.exact_histogram` (``np.bincount`` for int
arrays); counting is order-free, so batch boundaries cannot matter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Self

import numpy as np

from privstream.privacy import Condition, ConditionKind, NeighbourRelation, Unit
from privstream.sketches.binary_format import (
    decode,
    decode_build,
    decode_counters,
    encode,
    encode_counters,
    register_sketch,
    require,
)
from privstream.sketches.build import Build, BuildGuarantees, register_build
from privstream.sketches.histogram import Counts, exact_histogram
from privstream.sketches.order import Dummy, Item, item_order_key, normalize_item
from privstream.sketches.protocol import KeyedSketch, Sketch

EXACT = register_build(
    "EXACT",
    6,
    BuildGuarantees(
        relation=NeighbourRelation(
            Unit.EVENT,
            references=("Lebeda-Tetek Def. 1",),
            conditions=(Condition(ConditionKind.BATCHING, "exact counts do not depend on batching"),),
        ),
        structure="one count differs by exactly 1, all others are equal (l1 = l_inf = 1)",
        reference="exact histogram (sensitivity 1)",
        sketch_term="0 (exact counts)",
        exact=True,
    ),
)


@register_sketch(6)
class ExactHistogram(KeyedSketch):
    """Exact counts of every item seen (module docstring); build ``EXACT``, ``k`` = 1."""

    def __init__(self) -> None:
        self._counts = Counts()
        self._n = 0

    @property
    def k(self) -> int:
        """1: neighbouring inputs differ on one counter (the size parameter of the release layer)."""
        return 1

    @property
    def n(self) -> int:
        return self._n

    @property
    def build(self) -> Build:
        return EXACT

    def update(self, element: object) -> None:
        self.update_batch([normalize_item(element)])

    def update_batch(self, elements: Iterable[object] | np.ndarray) -> None:
        """Count a batch (vectorised; the same counts as item by item)."""
        batch = exact_histogram(elements)
        self._counts = self._counts.plus(batch)
        self._n += batch.total()

    def merge(self, other: Sketch) -> None:
        """In place: the per-key sum (exact, so any merge order gives the same histogram)."""
        if not isinstance(other, ExactHistogram):
            raise TypeError(f"cannot merge {type(other).__name__} into ExactHistogram")
        self._counts = self._counts.plus(other._counts)
        self._n += other.n

    def merge_accumulator(self, k: int) -> ExactHistogram:
        """An empty histogram; ``k`` must be 1 (merges keep exact counts: k cannot change)."""
        if k != 1:
            raise ValueError(f"k: an exact histogram merge keeps k = 1, got k={k}")
        return ExactHistogram()

    def counters(self) -> dict[Item, int]:
        pairs = sorted(self._counts.to_dict().items(), key=lambda p: item_order_key(p[0]))
        return dict(pairs)

    def estimate(self, item: object) -> int:
        return self._counts.to_dict().get(normalize_item(item), 0)

    def distinct(self) -> int:
        """Number of distinct items stored (the memory this histogram needs)."""
        return len(self._counts)

    def to_bytes(self) -> bytes:
        return encode(type(self), [self._n, EXACT.code], encode_counters(self._counts.to_dict()))

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        (n, build_code), payload = decode(data, cls, 2)
        require(decode_build(build_code) is EXACT, "an ExactHistogram must have build EXACT")
        counters = decode_counters(payload)
        require(not any(type(x) is Dummy for x in counters), "dummy keys in an exact histogram")
        require(all(c > 0 for c in counters.values()), "exact counts must be > 0")
        require(sum(counters.values()) == n, "exact counts must sum to n")
        sketch = cls()
        sketch._counts = Counts.from_mapping(counters)
        sketch._n = n
        return sketch

    def __repr__(self) -> str:
        return f"ExactHistogram(n={self._n}, distinct={self.distinct()})"
