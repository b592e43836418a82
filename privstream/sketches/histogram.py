"""Exact histograms of item batches, vectorised with numpy.

:class:`Counts` is a multiset of items with positive int64 counts, split by key type so that int
keys stay in numpy arrays (fast merges) while str keys use a dict. :func:`exact_histogram` builds one
from a batch:

* int arrays (and lists of plain ints): ``np.bincount`` when the value range is moderate,
  otherwise ``np.unique`` (sort);
* numpy unicode arrays: ``np.unique``; lists / object arrays of str: ``collections.Counter``
  (C-accelerated);
* anything mixed is normalised item by item (bools and other types are rejected).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from privstream.sketches.order import INT64_MAX, Item, Key, normalize_item

#: bincount is used when max - min of the batch is below max(this, 2 * batch length).
_BINCOUNT_MIN_RANGE = 1 << 20

_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@dataclass
class Counts:
    """A multiset of items: ``int_keys`` (int64, unique) with ``int_counts``, plus ``str_counts``."""

    int_keys: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    int_counts: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    str_counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, mapping: Mapping[Item, int] | Mapping[Key, int]) -> Counts:
        """The items of ``mapping`` with a count > 0 (Dummy keys dropped); an all-int mapping is
        converted with ``np.fromiter`` (same keys, same order)."""
        if mapping and set(map(type, mapping)) == {int}:
            size = len(mapping)
            keys = np.fromiter(mapping.keys(), dtype=np.int64, count=size)
            counts = np.fromiter(mapping.values(), dtype=np.int64, count=size)
            keep = counts > 0
            return cls(keys[keep], counts[keep]) if not keep.all() else cls(keys, counts)
        ints = [(x, c) for x, c in mapping.items() if type(x) is int and c > 0]
        strs = {x: c for x, c in mapping.items() if type(x) is str and c > 0}
        if not ints:
            return cls(str_counts=strs)
        arr = np.array(ints, dtype=np.int64)
        return cls(arr[:, 0].copy(), arr[:, 1].copy(), strs)

    def to_dict(self) -> dict[Item, int]:
        out: dict[Item, int] = dict(zip(self.int_keys.tolist(), self.int_counts.tolist(), strict=True))
        out.update(self.str_counts)
        return out

    def to_sorted_dict(self) -> dict[Item, int]:
        """The items with a positive count in the universe's total order (ints numerically, then
        strs by code point), as ``counters()`` returns them; the int part sorted with numpy."""
        keep = self.int_counts > 0
        keys, counts = self.int_keys[keep], self.int_counts[keep]
        if len(keys) > 1 and not bool(np.all(keys[1:] > keys[:-1])):
            order = np.argsort(keys, kind="stable")
            keys, counts = keys[order], counts[order]
        out: dict[Item, int] = dict(zip(keys.tolist(), counts.tolist(), strict=True))
        out.update(sorted((x, c) for x, c in self.str_counts.items() if c > 0))
        return out

    def __len__(self) -> int:
        return len(self.int_keys) + len(self.str_counts)

    def total(self) -> int:
        return int(self.int_counts.sum()) + sum(self.str_counts.values())

    def all_counts(self) -> np.ndarray:
        strs = np.fromiter(self.str_counts.values(), dtype=np.int64, count=len(self.str_counts))
        return np.concatenate([self.int_counts, strs]) if len(strs) else self.int_counts

    def plus(self, other: Counts) -> Counts:
        """Per-key sum (the first step of the mergeable-summaries merge)."""
        keys, counts = _sum_int_parts(self.int_keys, self.int_counts, other.int_keys, other.int_counts)
        strs = dict(self.str_counts)
        for x, c in other.str_counts.items():
            strs[x] = strs.get(x, 0) + c
        return Counts(keys, counts, strs)

    def shifted_down(self, value: int) -> Counts:
        """Subtract ``value`` from every count and drop counts that become <= 0."""
        keep = self.int_counts > value
        strs = {x: c - value for x, c in self.str_counts.items() if c > value}
        return Counts(self.int_keys[keep], self.int_counts[keep] - value, strs)


def _sum_int_parts(
    keys_a: np.ndarray, counts_a: np.ndarray, keys_b: np.ndarray, counts_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sum two int-keyed count vectors (keys unique within each). Looks the smaller side up in the
    sorted larger side, so a batch histogram (already sorted) is never re-sorted."""
    if len(keys_a) < len(keys_b):
        keys_a, counts_a, keys_b, counts_b = keys_b, counts_b, keys_a, counts_a
    if len(keys_b) == 0:
        return keys_a, counts_a
    if len(keys_a) > 1 and not bool(np.all(keys_a[1:] > keys_a[:-1])):
        order = np.argsort(keys_a, kind="stable")
        keys_a, counts_a = keys_a[order], counts_a[order]
    pos = np.searchsorted(keys_a, keys_b)
    found = pos < len(keys_a)
    found[found] = keys_a[pos[found]] == keys_b[found]
    counts = counts_a.copy()
    counts[pos[found]] += counts_b[found]
    new = ~found
    return np.concatenate([keys_a, keys_b[new]]), np.concatenate([counts, counts_b[new]])


def _int_histogram(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(values) == 0:
        return _EMPTY_I64, _EMPTY_I64
    lo, hi = int(values.min()), int(values.max())
    limit = max(_BINCOUNT_MIN_RANGE, 2 * len(values))
    if hi - lo < limit:
        offset = 0 if lo >= 0 and hi < limit else lo
        hist = np.bincount(values - offset if offset else values)
        keys = np.flatnonzero(hist)
        return keys.astype(np.int64) + offset, hist[keys].astype(np.int64)
    keys, counts = np.unique(values, return_counts=True)
    return keys, counts.astype(np.int64)


def _int_array(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > INT64_MAX:
        raise ValueError("items: unsigned values above the signed 64-bit range")
    return arr.astype(np.int64, copy=False).ravel()


def _counts_from_items(items: Iterable[object]) -> Counts:
    """General path: normalise each item (rejects bools, floats, …)."""
    counter = Counter(map(normalize_item, items))
    return Counts.from_mapping(counter)


def exact_histogram(items: Iterable[object] | np.ndarray) -> Counts:
    """Exact multiset of a batch of items (see module docstring for the paths taken)."""
    if isinstance(items, np.ndarray):
        kind = items.dtype.kind
        if kind in "iu":
            return Counts(*_int_histogram(_int_array(items)))
        if kind == "U":
            keys, counts = np.unique(items.ravel(), return_counts=True)
            return Counts(str_counts=dict(zip(keys.tolist(), counts.tolist(), strict=True)))
        if kind == "O":
            return _counts_from_items(items.ravel().tolist())
        raise TypeError(f"items: unsupported array dtype {items.dtype} (need integers or str)")
    if not isinstance(items, list | tuple):
        items = list(items)
    types = set(map(type, items))
    if types == {int}:
        try:
            arr = np.array(items, dtype=np.int64)
        except OverflowError as exc:
            raise ValueError("items: int outside the signed 64-bit range") from exc
        return Counts(*_int_histogram(arr))
    if types == {str}:  # checked just above: every item is exactly a str
        return Counts(str_counts=dict(Counter(cast("list[str] | tuple[str, ...]", items))))
    return _counts_from_items(items)
