"""Count-Min sketch (Cormode–Muthukrishnan 2005) with stable seeded hashing.

``depth`` rows of ``width`` int64 counters; item x adds its count to bucket h_j(x) of every row j
and is estimated by the minimum over rows. One-sided error: estimate >= f(x) always, and with the
row hashes behaving as independent random functions, estimate <= f(x) + e·n/width except with
probability <= e^(-depth) per query (Markov per row, independent rows).

Hashes come from :mod:`privstream.sketches.hashing` (SplitMix64 for ints, xxh3 for strs), so equal
``(width, depth, seed)`` give identical sketches on every machine and sketches merge by adding
tables. ``update(item)`` adds one occurrence (the stream element is one item, unit weight). Batches
are vectorised: the batch's exact histogram is hashed, so each distinct item is hashed once per
batch; the table is a sum over items, so this is exactly ``update`` item by item (the protocol's
batch semantics, :mod:`privstream.sketches.protocol`).

In the sketch protocol ``k`` is the width (the error bound e·n/k has the MG shape n/k) and
``build`` is None: Count-Min has no private release path, and the release layer refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from privstream.sketches.binary_format import decode, decode_array, encode, register_sketch, require
from privstream.sketches.build import Build
from privstream.sketches.hashing import (
    MAX_WIDTH,
    bucket_indices,
    hash_int_array,
    hash_str_list,
    item_hashes,
    min_over_rows,
    row_salts,
)
from privstream.sketches.histogram import Counts, exact_histogram
from privstream.sketches.order import normalize_item
from privstream.sketches.protocol import Sketch
from privstream.validation import check_int


@register_sketch(5)
class CountMinSketch(Sketch):
    """Count-Min sketch; ``seed`` in [0, 2**64) fixes the hash functions."""

    def __init__(self, width: int, depth: int, seed: int) -> None:
        self._width = check_int("width", width, below=MAX_WIDTH + 1, allow_numpy=True)
        self._depth = check_int("depth", depth, allow_numpy=True)
        self._seed = check_int("seed", seed, minimum=0, below=2**64, allow_numpy=True)
        self._salts = row_salts(self._seed, self._depth)
        self._table = np.zeros((self._depth, self._width), dtype=np.int64)
        self._n = 0

    @classmethod
    def from_error(cls, epsilon: float, delta: float, seed: int) -> CountMinSketch:
        """width = ⌈e/epsilon⌉, depth = ⌈ln(1/delta)⌉: overestimate <= epsilon·n w.p. >= 1-delta."""
        if not 0 < epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        return cls(math.ceil(math.e / epsilon), max(1, math.ceil(math.log(1 / delta))), seed)

    @property
    def width(self) -> int:
        return self._width

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def n(self) -> int:
        return self._n

    @property
    def k(self) -> int:
        """The protocol's size parameter: the width (counters per row)."""
        return self._width

    @property
    def build(self) -> Build | None:
        """None: Count-Min has no private release path (the release layer refuses it)."""
        return None

    @property
    def table(self) -> np.ndarray:
        """A read-only view of the counters, shape (depth, width)."""
        view = self._table.view()
        view.flags.writeable = False
        return view

    def error_bound(self) -> tuple[float, float]:
        """(e·n/width, e^-depth): overestimate bound and its per-query failure probability."""
        return math.e * self._n / self._width, math.exp(-self._depth)

    def _buckets(self, counts: Counts) -> np.ndarray:
        hashes = [hash_int_array(counts.int_keys, self._seed)]
        if counts.str_counts:
            hashes.append(hash_str_list(list(counts.str_counts), self._seed))
        return bucket_indices(np.concatenate(hashes), self._salts, self._width)

    def _add(self, counts: Counts) -> None:
        weights = counts.all_counts()
        buckets = self._buckets(counts)
        for row, idx in zip(self._table, buckets, strict=True):
            np.add.at(row, idx, weights)
        self._n += int(weights.sum())

    def update(self, item: object) -> None:
        """Add one occurrence of ``item`` (the stream element; unit weight)."""
        self._add(Counts.from_mapping({normalize_item(item): 1}))

    def update_batch(self, items: Iterable[Any]) -> None:
        """Exactly ``update`` for each item (an int/str array or sequence), vectorised over the
        batch's exact histogram (the table is a sum over items, so batching cannot change it)."""
        self._add(exact_histogram(items))

    def estimate(self, item: object) -> int:
        return int(self.estimate_batch([item])[0])

    def estimate_batch(self, items: object) -> np.ndarray:
        """Estimates for each item of ``items`` (in order), as an int64 array."""
        buckets = bucket_indices(item_hashes(items, self._seed), self._salts, self._width)
        return min_over_rows(self._table, buckets)

    def merge(self, other: Sketch) -> None:
        """In place: add ``other``'s table (same width, depth and seed required)."""
        if not isinstance(other, CountMinSketch):
            raise TypeError(f"cannot merge {type(other).__name__} into CountMinSketch")
        mine = (self._width, self._depth, self._seed)
        theirs = (other.width, other.depth, other.seed)
        if mine != theirs:
            raise ValueError(f"cannot merge Count-Min sketches with (width, depth, seed) {theirs} != {mine}")
        self._table += other._table
        self._n += other.n

    def merge_accumulator(self, k: int) -> CountMinSketch:
        """An empty sketch with this width (which must equal ``k``), depth and seed: merges add
        tables, so only sketches with the same hash functions merge."""
        if k != self._width:
            raise ValueError(f"k: a Count-Min merge keeps the width {self._width}, got k={k}")
        return CountMinSketch(self._width, self._depth, self._seed)

    def to_bytes(self) -> bytes:
        params = [self._width, self._depth, self._seed, self._n]
        return encode(CountMinSketch, params, self._table.astype("<i8").tobytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> CountMinSketch:
        (width, depth, seed, n), payload = decode(data, cls, 4)
        require(width >= 1 and depth >= 1, "width and depth must be >= 1")
        require(len(payload) == 8 * width * depth, "payload size does not match width * depth")
        table = decode_array(payload, "<i8", width * depth).reshape(depth, width).astype(np.int64)
        require(bool((table >= 0).all()) and bool((table.sum(axis=1) == n).all()), "every row must sum to n")
        sketch = cls(width, depth, seed)
        sketch._table = table
        sketch._n = n
        return sketch
